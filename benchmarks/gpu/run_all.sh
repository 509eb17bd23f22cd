#!/usr/bin/env bash
# Every GPU check of servelab in one call, for a machine with an NVIDIA GPU and PyTorch.
#
#   OUT=/some/dir PARTS="probe fidelity embedded" bash benchmarks/gpu/run_all.sh
#
# Installs the wheels carried in .whl/ (what the machine lacks: pydantic, orjson, and for
# the embedded engine fastapi, uvicorn, openai, a newer transformers, ...) into /tmp/site,
# and SGLang's client with the modules it imports from .whl-sglang/ into /tmp/sglsite, then
# runs servelab from the source tree. Parts:
#   probe     `servelab probe` (facts, with NVML's raw readings recorded) and
#             `servelab probe --comm --json` (measurements)
#   fidelity  benchmarks/client_fidelity.py: servelab's and SGLang's clients against the
#             simulator at 256 and 1,024 streams, on this machine's many cores
#   decode    benchmarks/gpu/decode_step.py: one decode step of the h200-ref model in plain
#             torch, eager and as a CUDA graph, against its memory-bound floor
#   embedded  the h200-ref embedded engine (a 2.6B-parameter Qwen3-MoE-style model with
#             random weights, generated on the spot) served by transformers serve on GPU 0,
#             swept by `servelab run` with GPU telemetry
#   diagnose  h200-ref under `servelab run` with transformers serve's defaults and with
#             CUDA graphs on, each followed by `servelab diagnose` on its run directory
#   report    h200-ref under `servelab run`'s adaptive sweep (from 1, doubling until two
#             levels past the knee) with GPU telemetry, targets, diagnose and the report
#             (report.html, report.md, plots/) written into the run directory
#   trace     benchmarks/gpu/decode_step.py at batch 1 under torch.profiler, 10 eager steps
#             and 10 CUDA-graph replays, summarised by `servelab trace --steps 10`
#             (trace-summary.json; the traces themselves stay out of the repository)
#   tune      `servelab tune run benchmarks/gpu/tune-h200.yaml`: h200-ref from transformers
#             serve's defaults, Pareto on single-stream and total tok/s at 64, in the study
#             folder $STUDY (default benchmarks/gpu/results/h200-tune/study, in the working
#             tree, so a study brought back and unpacked there continues in the next call).
#             TUNE_BUDGET (default 7m) stops starting trials; TUNE_LIMIT_S (default 540)
#             interrupts the study (finished trials kept). Tarred to $OUT/tune-study.tgz.
#   cuda      the CUDA driver check for real: `servelab probe --json` (cuda-ok, the count
#             against NVML's), the check with CUDA_VISIBLE_DEVICES empty (the real driver's
#             CUDA_ERROR_NO_DEVICE), and `servelab engine check` reading specs against
#             this machine (a GPU index that is not there, a layout too large, NCCL
#             variables); cuda-summary.txt holds the verdict lines.
#   cache     the KV cache in tokens on the GPU: h200-ref with a memory share too small
#             for its batch tokens (knobs {cuda_graphs: true, mem_fraction: 0.002}) under
#             `servelab run`, which must stop at preflight with the named cause (exit 5),
#             then h200-ref with knobs {cuda_graphs: true, kv_cache_tokens: 16384} swept at
#             1, 4, 16 (--cb-num-blocks 64: the engine's own log says what it built);
#             cache-summary.txt holds the error line, the exit codes and the cache lines.
#   planted   diagnose against what a second run measures: h200-ref with one planted limit
#             per case (PLANTED, default "default graphs kv batch": transformers serve's
#             defaults; CUDA graphs on; graphs on with a 0.4% memory share for the cache;
#             graphs on with 128 batch tokens per step), each swept by `servelab run` at 1,
#             4, 16, 64 (12 s levels, 512 in / 64 out) and diagnosed. The graphs case is the
#             rerun with each other case's limit removed; kv-applied and batch-applied
#             rerun kv and batch with diagnose's first action applied (--cb-num-blocks 48,
#             i.e. kv_cache_tokens 12288; max_batch_tokens 1024). The run directories (with
#             requests.jsonl and metrics.jsonl gzipped, for the twin's fit from the streams)
#             are tarred to $OUT/planted-CASE.tgz, to be kept in the repository and read by
#             benchmarks/diagnose_accuracy.py and benchmarks/twin_fidelity.py.
#   pairs     planted limits at shapes the kept pairs do not have (1,024 in / 96 out at
#             concurrency 1, 8, 32, 10 s levels; kv3, batch3 and graphs3 at the shapes in
#             PAIR_SHAPES): PAIRS (default "kv2 batch2") each swept by
#             `servelab run`, diagnosed, then swept again with the first engine action of
#             its first finding applied (read from its diagnosis.json, so the value is the
#             one diagnose asked for) and `--applies` naming the finding; both diagnosed
#             and tarred to $OUT/pair-CASE.tgz with requests.jsonl gzipped (for
#             benchmarks/replay_accuracy.py).
#   tp        benchmarks/gpu/tp_step.py at every tp up to the GPUs present (1, 2, 4, 8), batch
#             1 and 64, with P2P and, past one GPU, again with NCCL_P2P_DISABLE=1
#   quality   the quality probe, CUDA graphs against eager: h200-ref under transformers
#             serve with CUDA graphs off and `--quality`, then on with `--quality-ref` the
#             first (one 10 s level of 8 streams, 512 in / 64 out, each); both run
#             directories tarred to $OUT/quality.tgz.
# Logs and results, tarred, go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/servelab-gpu}
PARTS=${PARTS:-probe fidelity}
mkdir -p "$OUT/logs"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 SERVELAB_CACHE=/tmp/servelab-cache
PIP_TARGET=(python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade)
if [ -d .whl ]; then
    "${PIP_TARGET[@]}" --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
LOGS="$OUT/logs"

{
    nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv
    nvidia-smi topo -m
    python3 -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name(0))"
    nproc
} > "$LOGS/env.txt" 2>&1

timed() {  # timed NAME COMMAND...: run, log, and note the exit code and seconds
    local name=$1 start
    shift
    start=$(date +%s.%N)
    "$@" > "$LOGS/$name.out" 2> "$LOGS/$name.err"
    echo "$name: exit $? after $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" \
        | tee -a "$LOGS/times.txt"
}

if [[ " $PARTS " == *" probe "* ]]; then
    timed probe python3 -m servelab probe --record-nvml "$LOGS/nvml-recording.json" \
        --out "$LOGS/probe"
    timed probe-comm python3 -m servelab probe --comm --json --out "$LOGS/probe-comm"
    # One rank is enough to exercise the NCCL harness and its log parsing on one GPU.
    timed nccl-one-rank python3 -c "from servelab.probe.comm.allreduce import \
run_allreduce, allreduce_sizes; print(run_allreduce(world_size=1, backend='nccl', \
device_type='cuda', sizes_bytes=allreduce_sizes(factor=4), timeout_s=120, \
log_dir=__import__('pathlib').Path('$LOGS/nccl-one-rank')).model_dump_json(indent=1))"
fi

if [[ " $PARTS " == *" fidelity "* ]]; then
    if [ -d .whl-sglang ]; then
        "${PIP_TARGET[@]}" --target /tmp/sglsite .whl-sglang/*.whl || exit 1
    fi
    # No GPU for SGLang's client: with CUDA visible, sglang imports its kernel package.
    printf '#!/bin/sh\nCUDA_VISIBLE_DEVICES= PYTHONPATH=/tmp/sglsite:%s exec python3 "$@"\n' \
        "$PYTHONPATH" \
        > /tmp/sglang-python
    chmod +x /tmp/sglang-python
    timed fidelity python3 benchmarks/client_fidelity.py --concurrency 256,1024 \
        --sim-workers 4 --sglang-python /tmp/sglang-python --keep "$LOGS/fidelity-runs"
    rm -rf "$LOGS/fidelity-runs"/*/*/runs
fi

if [[ " $PARTS " == *" decode "* ]]; then
    timed decode python3 benchmarks/gpu/decode_step.py --preset h200-ref \
        --json-out "$LOGS/decode-step.json"
fi

if [[ " $PARTS " == *" trace "* ]]; then
    timed trace-decode python3 benchmarks/gpu/decode_step.py --preset h200-ref --batch 1 \
        --experts grouped_mm --trace-dir "$LOGS/traces" --trace-steps 10 \
        --json-out "$LOGS/trace-decode-step.json"
    timed trace-summary python3 -m servelab trace "$LOGS/traces" --steps 10 --json
    cp "$LOGS/trace-summary.out" "$LOGS/trace-summary.json"
    COLUMNS=160 python3 -m servelab trace "$LOGS/traces" --steps 10 > "$LOGS/trace-summary.txt" 2>&1
    rm -rf "$LOGS/traces"
fi

if [[ " $PARTS " == *" embedded "* ]]; then
    # The reference deployment: h200-ref with transformers serve's defaults, swept with
    # telemetry on GPU 0. SIGINT at the limit: servelab keeps what it measured and still
    # writes report.md.
    timed embedded timeout -s INT "${RUN_LIMIT_S:-420}" python3 -m servelab run \
        --preset h200-ref --concurrency "${CONCURRENCY:-1,8,32,128,512}" \
        --duration "${LEVEL_DURATION:-40s}" --input-len 512 --output-len 64 --gpus 0 \
        --out "$LOGS/run-h200-ref"
fi

if [[ " $PARTS " == *" diagnose "* ]]; then
    # diagnose on the reference deployment: transformers serve's defaults, then the same
    # with CUDA graphs on (--cb-use-cuda-graph); each run diagnosed from its directory.
    printf 'engine: embedded\nmodel: h200-ref\nknobs: {cuda_graphs: true}\n' > /tmp/h200-graphs.yaml
    for variant in default graphs; do
        engine=(--preset h200-ref)
        [ "$variant" = graphs ] && engine=(--engine /tmp/h200-graphs.yaml)
        timed "run-$variant" timeout -s INT "${RUN_LIMIT_S:-240}" python3 -m servelab run \
            "${engine[@]}" --concurrency "${CONCURRENCY:-1,8,64}" \
            --duration "${LEVEL_DURATION:-15s}" --input-len 512 --output-len 64 --gpus 0 \
            --out "$LOGS/diagnose-$variant"
        timed "diagnose-$variant" python3 -m servelab diagnose "$LOGS/diagnose-$variant"
        COLUMNS=160 python3 -m servelab diagnose "$LOGS/diagnose-$variant" \
            > "$LOGS/diagnose-$variant.txt" 2>&1
    done
fi

if [[ " $PARTS " == *" report "* ]]; then
    timed report timeout -s INT "${RUN_LIMIT_S:-480}" python3 -m servelab run \
        --preset h200-ref --duration "${LEVEL_DURATION:-15s}" --input-len 512 --output-len 64 \
        --max-concurrency "${MAX_CONCURRENCY:-512}" --gpus 0 --target single=100 \
        --target total=5000 --target ttft_p99=2s --title "h200-ref on one H200" \
        --out "$LOGS/report-run"
fi

if [[ " $PARTS " == *" tune "* ]]; then
    # One study across device calls: rerunning the same command on the same folder continues
    # it; a trial killed mid-run goes stale after two 10 s heartbeats and is run again.
    STUDY=${STUDY:-benchmarks/gpu/results/h200-tune/study}
    timed tune timeout -s INT "${TUNE_LIMIT_S:-540}" python3 -m servelab tune run \
        benchmarks/gpu/tune-h200.yaml --out "$STUDY" --time-budget "${TUNE_BUDGET:-7m}" \
        --heartbeat 10s --gpus 0
    COLUMNS=200 python3 -m servelab tune show "$STUDY" > "$LOGS/tune-show.txt" 2>&1
    grep -E '^(trial|study|best|  )' "$LOGS/tune.err" | tail -n 40
    cat "$LOGS/tune-show.txt"
    tar -C "$(dirname "$STUDY")" -czf "$OUT/tune-study.tgz" "$(basename "$STUDY")"
fi

if [[ " $PARTS " == *" cuda "* ]]; then
    timed cuda-probe python3 -m servelab probe --json --out "$LOGS/cuda-probe"
    timed cuda-hidden env CUDA_VISIBLE_DEVICES= python3 -c "from servelab.probe.cuda_init \
import check_cuda; from servelab.probe.cuda_verdicts import cuda_verdicts; c = check_cuda(); \
print(c.model_dump_json(indent=1)); [print(v.severity.value, v.code, v.title, v.evidence) \
for v in cuda_verdicts(c, nvml_count=1, in_container=False)]"
    timed cuda-check-absent env CUDA_VISIBLE_DEVICES=0,7 python3 -m servelab engine check \
        --engine vllm --model m --tp 2 --recorded
    timed cuda-check-nccl env NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_MAX_NCHANNELS=0 \
        NCCL_IB_HCA=mlx5_0 python3 -m servelab engine check --engine sglang --model m --recorded
    {
        python3 -c "import json; d = json.load(open('$LOGS/cuda-probe/probe.json')); \
c = d['cuda']; print({k: c[k] for k in ('library_path', 'init_result_name', 'device_count', \
'driver_api_version', 'module_flavour', 'module_version', 'uvm_disable_hmm', \
'dev_nvidia_uvm', 'kernel_release')}); [print(v['severity'], v['code'], v['title']) for v in \
d['verdicts'] if v['code'].startswith(('cuda', 'sm120'))]"
        grep -E "CUDA_ERROR|^critical" "$LOGS/cuda-hidden.out"
        grep -E "^  (error|warning|info)|^error" "$LOGS/cuda-check-absent.out" \
            "$LOGS/cuda-check-absent.err" "$LOGS/cuda-check-nccl.out" "$LOGS/cuda-check-nccl.err"
    } > "$OUT/cuda-summary.txt" 2>&1
    cat "$OUT/cuda-summary.txt"
fi

if [[ " $PARTS " == *" cache "* ]]; then
    printf 'engine: embedded\nmodel: h200-ref\nknobs: {cuda_graphs: true, mem_fraction: 0.002}\n' \
        > /tmp/h200-starved.yaml
    printf 'engine: embedded\nmodel: h200-ref\nknobs: {cuda_graphs: true, kv_cache_tokens: 16384}\n' \
        > /tmp/h200-tokens.yaml
    timed cache-starved timeout -s INT 300 python3 -m servelab run --engine /tmp/h200-starved.yaml \
        --concurrency 1 --num-requests 4 --input-len 512 --output-len 64 --out "$LOGS/cache-starved"
    timed cache-tokens timeout -s INT 300 python3 -m servelab run --engine /tmp/h200-tokens.yaml \
        --concurrency 1,4,16 --duration 10s --input-len 512 --output-len 64 --gpus 0 \
        --out "$LOGS/cache-tokens"
    {
        grep -E "^cache-" "$LOGS/times.txt"
        grep -E "^error" "$LOGS/cache-starved.err"
        grep -hE "Paged cache initialized|Memory available for cache|Invalid values" \
            "$LOGS/cache-starved/engine.log" "$LOGS/cache-tokens/engine.log"
        grep -E "^level|^top finding|^try first" "$LOGS/cache-tokens.err"
    } > "$OUT/cache-summary.txt" 2>&1
    cat "$OUT/cache-summary.txt"
fi

if [[ " $PARTS " == *" planted "* ]]; then
    mkdir -p "$LOGS/planted"
    declare -A PLANTED_KNOBS=(
        [default]=""
        [graphs]="knobs: {cuda_graphs: true}"
        [kv]="knobs: {cuda_graphs: true, mem_fraction: 0.004}"
        [batch]="knobs: {cuda_graphs: true, max_batch_tokens: 128}"
        [kv-applied]="knobs: {cuda_graphs: true, kv_cache_tokens: 12288}"
        [batch-applied]="knobs: {cuda_graphs: true, max_batch_tokens: 1024}"
    )
    for case in ${PLANTED:-default graphs kv batch}; do
        printf 'engine: embedded\nmodel: h200-ref\n%s\n' "${PLANTED_KNOBS[$case]}" \
            > "/tmp/planted-$case.yaml"
        timed "planted-$case" timeout -s INT "${RUN_LIMIT_S:-280}" python3 -m servelab run \
            --engine "/tmp/planted-$case.yaml" --concurrency "${CONCURRENCY:-1,4,16,64}" \
            --duration "${LEVEL_DURATION:-12s}" --input-len 512 --output-len 64 --gpus 0 \
            --out "$LOGS/planted/$case"
        cp "/tmp/planted-$case.yaml" "$LOGS/planted/$case/spec.yaml"
        COLUMNS=160 python3 -m servelab diagnose "$LOGS/planted/$case" \
            > "$LOGS/planted/$case/diagnose.txt" 2>&1
        gzip -9 "$LOGS/planted/$case/requests.jsonl" "$LOGS/planted/$case/metrics.jsonl"
        grep -m 3 -E "│ [0-9] " "$LOGS/planted/$case/diagnose.txt"
        tar -C "$LOGS/planted" -czf "$OUT/planted-$case.tgz" "$case"
    done
    grep -E "^planted-" "$LOGS/times.txt"
    rm -rf "$LOGS/planted"
fi

if [[ " $PARTS " == *" pairs "* ]]; then
    mkdir -p "$LOGS/pairs"
    declare -A PAIR_KNOBS=(
        [kv2]="cuda_graphs: true, mem_fraction: 0.006"
        [batch2]="cuda_graphs: true, max_batch_tokens: 256"
        [graphs2]="cuda_graphs: false"
        [kv3]="cuda_graphs: true, mem_fraction: 0.01"
        [batch3]="cuda_graphs: true, max_batch_tokens: 512"
        [graphs3]="cuda_graphs: false"
        [kv4]="cuda_graphs: true, kv_cache_tokens: 20480"
        [batch4]="cuda_graphs: true, max_batch_tokens: 384"
        [batch5]="cuda_graphs: true, max_batch_tokens: 640"
    )
    # input, output and concurrency per case; the *3 and *4 cases were chosen before they ran
    # (batch4 after the padded positions' reading was built, to try it; batch5 after the
    # replay of a level for its set time was built)
    declare -A PAIR_SHAPES=(
        [kv3]="512 192 1,4,24"
        [batch3]="2048 48 1,12,40"
        [graphs3]="256 256 1,4,16"
        [kv4]="3072 128 1,4,12"
        [batch4]="1536 64 1,8,28"
        [batch5]="2560 40 1,10,36"
    )
    sweep_pair() {  # sweep_pair NAME KNOBS [APPLIES]: one sweep of h200-ref, diagnosed
        local name=$1 knobs=$2 applies=${3:-} input output levels
        read -r input output levels <<< "${PAIR_SHAPES[${name%-applied}]:-1024 96 ${CONCURRENCY:-1,8,32}}"
        printf 'engine: embedded\nmodel: h200-ref\nknobs: {%s}\n' "$knobs" > "/tmp/pair-$name.yaml"
        timed "pair-$name" timeout -s INT "${RUN_LIMIT_S:-200}" python3 -m servelab run \
            --engine "/tmp/pair-$name.yaml" --concurrency "$levels" \
            --duration "${LEVEL_DURATION:-10s}" --input-len "$input" --output-len "$output" --gpus 0 \
            ${applies:+--applies "$applies"} --out "$LOGS/pairs/$name"
        cp "/tmp/pair-$name.yaml" "$LOGS/pairs/$name/spec.yaml"
        COLUMNS=160 python3 -m servelab diagnose "$LOGS/pairs/$name" \
            > "$LOGS/pairs/$name/diagnose.txt" 2>&1
    }
    for case in ${PAIRS:-kv2 batch2}; do
        sweep_pair "$case" "${PAIR_KNOBS[$case]}"
        read -r kind action < <(python3 - "$LOGS/pairs/$case/diagnosis.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for finding in doc["findings"]:
    for action in finding["actions"]:
        if action.get("target") == "engine" and action.get("knob") and action.get("value") is not None:
            value = json.dumps(action["value"])
            print(finding["kind"], f"{action['knob']}: {value}")
            sys.exit(0)
PY
)
        echo "pair-$case: first finding $kind, action $action"
        if [ -n "$action" ]; then
            # the action's knob replaces the planted one; a cache in tokens replaces a share
            base=$(echo "${PAIR_KNOBS[$case]}" | sed -E "s/(^|, )${action%%:*}: [^,]*//")
            [ "${action%%:*}" = kv_cache_tokens ] && base=$(echo "$base" | sed -E "s/(^|, )mem_fraction: [^,]*//")
            sweep_pair "$case-applied" "${base:+$base, }$action" "$LOGS/pairs/$case:$kind"
            grep -E "prediction check" "$LOGS/pairs/$case-applied/diagnose.txt"
        fi
        for name in "$case" "$case-applied"; do
            [ -d "$LOGS/pairs/$name" ] || continue
            gzip -9 "$LOGS/pairs/$name/requests.jsonl" "$LOGS/pairs/$name/metrics.jsonl"
        done
        tar -C "$LOGS/pairs" -czf "$OUT/pair-$case.tgz" $(cd "$LOGS/pairs" && ls -d "$case" "$case-applied" 2>/dev/null)
    done
    grep -E "^pair-" "$LOGS/times.txt"
    rm -rf "$LOGS/pairs"
fi

if [[ " $PARTS " == *" tp "* ]]; then
    gpus=$(nvidia-smi --list-gpus | wc -l)
    sizes=$(python3 -c "print(','.join(str(n) for n in (1, 2, 4, 8) if n <= $gpus))")
    timed tp-step python3 benchmarks/gpu/tp_step.py --preset h200-ref --device cuda \
        --tp "$sizes" --batch 1,64 --json-out "$LOGS/tp-step.json"
    if [ "$gpus" -gt 1 ]; then
        NCCL_P2P_DISABLE=1 timed tp-step-nop2p python3 benchmarks/gpu/tp_step.py \
            --preset h200-ref --device cuda --tp "${sizes#1,}" --batch 1,64 \
            --json-out "$LOGS/tp-step-nop2p.json"
    fi
fi

if [[ " $PARTS " == *" quality "* ]]; then
    mkdir -p "$LOGS/quality"
    for variant in eager graphs; do
        graphs=false
        reference=(--quality)
        if [ "$variant" = graphs ]; then
            graphs=true
            reference=(--quality-ref "$LOGS/quality/eager")
        fi
        printf 'engine: embedded\nmodel: h200-ref\nknobs: {cuda_graphs: %s}\n' "$graphs" \
            > "/tmp/quality-$variant.yaml"
        timed "quality-$variant" python3 -m servelab bench --engine "/tmp/quality-$variant.yaml" \
            --concurrency 8 --duration 10s --input-len 512 --output-len 64 "${reference[@]}" \
            --out "$LOGS/quality/$variant"
    done
    tar -C "$LOGS" -czf "$OUT/quality.tgz" quality && rm -rf "$LOGS/quality"
fi

nvidia-smi --query-gpu=memory.used --format=csv >> "$LOGS/env.txt" 2>&1
tar -C "$OUT" -czf "$OUT/logs.tgz" logs && rm -rf "$LOGS"
