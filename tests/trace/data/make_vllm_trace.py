"""How dp0_pp0_tp0_dcp0_ep0_rank0.*.pt.trace.json.gz was made: vLLM 0.32 for CPUs, serving the
embedded tiny model, profiled with torch (no Python stacks) over two requests of 4 tokens.

    PY='from servelab.engines.embedded import ensure_model; print(ensure_model("tiny"))'
    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python tests/trace/data/make_vllm_trace.py \\
        "$(.venv/bin/python -c "$PY")" /tmp/vllm-trace
"""

import sys

from vllm import LLM, SamplingParams


def main(model: str, out_dir: str) -> None:
    profiler = {
        "profiler": "torch",
        "torch_profiler_dir": out_dir,
        "torch_profiler_with_stack": False,
    }
    llm = LLM(
        model=model,
        enforce_eager=True,
        max_model_len=1024,
        dtype="float32",
        profiler_config=profiler,
    )
    params = SamplingParams(max_tokens=4, ignore_eos=True, temperature=0)
    llm.start_profile()
    llm.generate(["hello world " * (i + 4) for i in range(2)], params)
    llm.stop_profile()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
