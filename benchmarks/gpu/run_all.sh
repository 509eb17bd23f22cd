#!/usr/bin/env bash
# Every GPU check of servelab in one call, for a machine with an NVIDIA GPU and PyTorch.
#
#   OUT=/some/dir bash benchmarks/gpu/run_all.sh
#
# Installs the wheels carried in .whl/ (what the machine lacks: fastapi, uvicorn, pydantic,
# openai, a newer transformers, ...) into /tmp/site, runs servelab from the source tree,
# and serves the embedded h200-ref preset (a 2.6B-parameter Qwen3-MoE-style model with
# random weights, generated on the spot) with transformers serve on GPU 0, swept by
# `servelab run`. Logs and the run directory, tarred, go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/servelab-gpu}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 SERVELAB_CACHE=/tmp/servelab-cache
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

{
    nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv
    python3 -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name(0))"
} > "$OUT/env.txt" 2>&1

RUN="$OUT/run-h200-ref"
start=$(date +%s)
# SIGINT at the limit: servelab keeps what it measured and still writes report.md.
timeout -s INT "${RUN_LIMIT_S:-480}" python3 -m servelab run --preset h200-ref \
    --concurrency "${CONCURRENCY:-1,4,16,64,256}" --input-len 512 --output-len 128 \
    --out "$RUN" > "$OUT/run.log" 2>&1
echo "servelab run exit code $? after $(( $(date +%s) - start )) s" >> "$OUT/run.log"
nvidia-smi --query-gpu=memory.used --format=csv >> "$OUT/env.txt" 2>&1
tar -C "$OUT" -czf "$OUT/run-h200-ref.tgz" run-h200-ref && rm -rf "$RUN"
