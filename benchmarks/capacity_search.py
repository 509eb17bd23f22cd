"""Does `servelab run --capacity` find the load a running-request cap implies, and what
does the search cost against scanning every load?

For each cap C, a server that admits C requests at once and queues the rest, closed
loop, every request of one length: up to C concurrent clients every request is admitted
at once. Past C, the C running requests start and end together, so of N clients N - C
wait a whole request's time S for a slot, and miss any TTFT SLO under S: a share
(N - C) / N of requests. With the attainment a (0.9), N holds while (N - C) / N <= 1 - a:
the boundary the cap implies is floor(C / a) held, the next load failed (3 for a cap of
3, 13 for 12, 44 for 40). The SLO is an eighth of S (for the simulator S = TTFT +
(out - 1) x ITL; for an engine, its median E2E at concurrency C, measured first).

    python benchmarks/capacity_search.py [--caps 3,12,40]
    python benchmarks/capacity_search.py --url http://127.0.0.1:8000 --caps 4 [--output-len 256]

Without --url each cap gets a fresh `servelab sim` (20 ms TTFT, 30 ms between tokens).
Prints per cap: the implied capacity, the capacity found and the load that failed, found /
implied, the levels the search measured (re-measures included) against the levels a scan
of 1, 2, ... needs to see the same boundary, and the search's time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servelab.engines.base import EngineSpec, Knobs
from servelab.engines.launcher import engine_running

TTFT_MS, ITL_MS = 20.0, 30.0
ATTAINMENT = 0.9


def _sim(cap: int) -> EngineSpec:
    return EngineSpec(
        engine="sim",
        options={"ttft_ms": TTFT_MS, "itl_ms": ITL_MS},
        knobs=Knobs(max_running_requests=cap),
        startup_timeout_s=60,
    )


def _servelab(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "servelab", *args, "--json"], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"servelab {args[0]}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _service_ms(url: str, cap: int, lengths: list[str], out: Path) -> float:
    """A request's median E2E with the cap's slots all busy (an engine's S)."""
    summary = _servelab(
        *("bench", "--url", url, "--concurrency", str(cap), "--duration", "6s"),
        *("--warmup", str(2 * cap), *lengths, "--out", str(out)),
    )
    return float(summary["levels"][0]["median_e2e_latency_ms"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="An engine's URL, its cap set by you; default: sims.")
    parser.add_argument("--caps", default="3,12,40", help="The running-request caps.")
    parser.add_argument("--output-len", type=int, default=16)
    args = parser.parse_args()
    caps = [int(c) for c in args.caps.split(",")]
    lengths = ["--input-len", "16" if args.url is None else "64"]
    lengths += ["--output-len", str(args.output_len)]
    root = Path(tempfile.mkdtemp(prefix="servelab-capacity-"))
    print(
        f"{'cap':>4} {'SLO TTFT ms':>11} {'implied':>7} {'found':>6} {'failed':>6} "
        f"{'found/implied':>13} {'levels':>6} {'scan':>5} {'levels/scan':>11} {'search s':>8}"
    )
    for cap in caps:
        with contextlib.ExitStack() as stack:
            if args.url:
                url = args.url
                service_ms = _service_ms(url, cap, lengths, root / f"probe-{cap}")
            else:
                sim = stack.enter_context(
                    engine_running(_sim(cap), log_path=root / f"sim-{cap}.log")
                )
                url = sim.url
                service_ms = TTFT_MS + (args.output_len - 1) * ITL_MS
            slo_ms = service_ms / 8
            started = time.monotonic()
            summary = _servelab(
                *("run", "--url", url, "--slo", f"ttft={slo_ms:.0f}ms", "--capacity"),
                *("--attainment", str(ATTAINMENT)),
                *("--max-concurrency", str(4 * cap), *lengths),
                *("--out", str(root / f"run-{cap}"), "--runs-dir", str(root)),
            )
            elapsed = time.monotonic() - started
        found = summary["capacity"]
        held = found["held"]["load"] if found.get("held") else None
        failed = found["failed"]["load"] if found.get("failed") else None
        levels = len(found["levels"])
        implied = math.floor(cap / ATTAINMENT)
        ratio = f"{held / implied:.3f}" if held else "n/a"
        print(
            f"{cap:>4} {slo_ms:>11.0f} {implied:>7} {held!s:>6} {failed!s:>6} {ratio:>13} "
            f"{levels:>6} {implied + 1:>5} {levels / (implied + 1):>11.2f} {elapsed:>8.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
