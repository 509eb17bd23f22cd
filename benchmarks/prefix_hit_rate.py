"""How close does an engine's prefix-cache hit rate come to what the workload could reuse?

Runs two workloads whose prompts share real prefixes against one engine, with
`servelab bench`, and prints per workload the ideal hit rate (the workload's repeated
prefixes in whole blocks of the engine's cache) beside the rate the engine's own counters
measured over the level, and their ratio:

- conversations: two sessions at a time, three turns each, a 512-token system prompt,
  turns of 128 tokens and replies of 32, every turn resending the history;
- the Mooncake fixture (tests/bench/data/traces/mooncake_small.jsonl): 20 requests over
  3.8 s whose equal 512-token block ids become equal text.

    python benchmarks/prefix_hit_rate.py --url http://127.0.0.1:8000 [--tokenizer DIR]

Without --url it starts `servelab sim` (its prefix cache, vLLM's rules, blocks of 16) and
measures that: the model running, checked against itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from servelab.engines.base import EngineSpec
from servelab.engines.launcher import RunningEngine, engine_running

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "tests" / "bench" / "data" / "traces" / "mooncake_small.jsonl"
WORKLOADS = {
    "conversations": [
        "--dataset",
        "conversation",
        "--turns",
        "3",
        "--concurrency",
        "2",
        "--num-requests",
        "18",
        "--input-len",
        "128",
        "--output-len",
        "32",
        "--shared-prefix-len",
        "512",
    ],
    "mooncake": ["--dataset", f"trace:{MOONCAKE}"],
}


def _sim(root: Path) -> contextlib.AbstractContextManager[RunningEngine]:
    spec = EngineSpec(engine="sim", options={"metrics_style": "vllm"}, startup_timeout_s=60)
    return engine_running(spec, log_path=root / "sim.log")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="An engine's URL; default: start servelab sim.")
    parser.add_argument("--tokenizer", help="The engine's tokenizer, for exact prompt lengths.")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="servelab-prefix-"))
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(_sim(root)).url
        print(f"{'workload':<14} {'ideal':>7} {'measured':>9} {'measured/ideal':>15}  block")
        for name, extra in WORKLOADS.items():
            out = root / name
            command = [sys.executable, "-m", "servelab", "bench", "--url", url, "--warmup", "0"]
            command += [*extra, "--out", str(out)]
            if args.tokenizer:
                command += ["--tokenizer", args.tokenizer]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"{name}: exit {done.returncode}\n{done.stderr[-2000:]}")
                return 1
            level = json.loads((out / "summary.json").read_text())["levels"][0]
            cache = level["prefix_cache"]
            ideal, hit = cache["ideal_hit_rate"], cache["hit_rate"]
            ratio = f"{hit / ideal:.3f}" if hit is not None and ideal else "n/a"
            measured = f"{hit:.1%}" if hit is not None else "n/a"
            print(
                f"{name:<14} {ideal:>7.1%} {measured:>9} {ratio:>15}  "
                f"{cache['block_tokens']} ({cache['block_source']})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
