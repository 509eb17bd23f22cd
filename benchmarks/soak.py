"""Soak: launch and stop engines many times; nothing may be left behind.

    python benchmarks/soak.py [--sim 100] [--embedded 20] [--json]

Each cycle launches an engine through servelab's launcher (the fixed-timing simulator,
or the embedded engine on the CPU), streams one chat completion from it, and stops it.
After every stop the engine's process group must be empty and its port bindable; after
the last, no process this script started (or any of theirs) may be alive. It prints the
leaks as a ratio of cycles (the claim: 0 of N) and the time per cycle.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from servelab.core.net import port_free
from servelab.core.processes import all_proc_stats, group_alive
from servelab.engines.base import EngineSpec
from servelab.engines.launcher import launch_engine


@dataclass
class SoakResult:
    engine: str
    cycles: int
    answered: int = 0
    groups_left: int = 0
    ports_busy: int = 0
    seconds: list[float] = field(default_factory=list)


def _spec(engine: str) -> EngineSpec:
    if engine == "sim":
        return EngineSpec(engine="sim", options={"ttft_ms": 5, "itl_ms": 2}, startup_timeout_s=60)
    return EngineSpec(engine="embedded", model="tiny", startup_timeout_s=300)


def _chat(url: str) -> bool:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 4,
        "stream": True,
    }
    models = json.load(urllib.request.urlopen(f"{url}/v1/models", timeout=30))
    body["model"] = models["data"][0]["id"]
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        data = response.read()
    # transformers serve ends with a finish_reason and no [DONE]; the simulator sends both.
    return response.status == 200 and (b"[DONE]" in data or b'"finish_reason":"' in data)


def soak(engine: str, cycles: int, log_dir: Path) -> tuple[SoakResult, list[int]]:
    """Run the cycles; return the result and every process group that was started."""
    result = SoakResult(engine, cycles)
    groups: list[int] = []
    for n in range(cycles):
        t0 = time.monotonic()
        running = launch_engine(_spec(engine), log_path=log_dir / f"{engine}-{n}.log")
        groups.append(running.pgid)
        port = int(running.url.rsplit(":", 1)[1])
        try:
            result.answered += _chat(running.url)
        finally:
            running.stop()
        result.groups_left += group_alive(running.pgid)
        result.ports_busy += not port_free("127.0.0.1", port)
        result.seconds.append(time.monotonic() - t0)
    return result, groups


def descendants(pid: int) -> list[int]:
    """Every live process whose parent chain reaches `pid`."""
    parents = {stat.pid: stat.ppid for stat in all_proc_stats() if stat.state != "Z"}
    found = []
    for child in parents:
        ancestor = parents.get(child)
        while ancestor is not None and ancestor > 1:
            if ancestor == pid:
                found.append(child)
                break
            ancestor = parents.get(ancestor)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sim", type=int, default=100, help="simulator cycles")
    parser.add_argument("--embedded", type=int, default=20, help="embedded-engine cycles")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    results: list[SoakResult] = []
    groups: list[int] = []
    with tempfile.TemporaryDirectory(prefix="servelab-soak-") as tmp:
        for engine, cycles in (("sim", args.sim), ("embedded", args.embedded)):
            if cycles:
                result, started = soak(engine, cycles, Path(tmp))
                results.append(result)
                groups += started
    leftover_groups = sum(group_alive(g) for g in groups)
    leftover_children = descendants(os.getpid())
    if args.json:
        print(
            json.dumps(
                {
                    "results": [asdict(r) for r in results],
                    "groups_alive_at_end": leftover_groups,
                    "children_alive_at_end": leftover_children,
                }
            )
        )
    else:
        print("| engine | cycles | answered | groups left | ports busy | s per cycle (median) |")
        print("|---|---|---|---|---|---|")
        for r in results:
            median = statistics.median(r.seconds)
            print(
                f"| {r.engine} | {r.cycles} | {r.answered}/{r.cycles} | "
                f"{r.groups_left}/{r.cycles} | {r.ports_busy}/{r.cycles} | {median:.2f} |"
            )
        print(f"process groups alive at the end: {leftover_groups} of {len(groups)}")
        print(f"child processes alive at the end: {len(leftover_children)}")
    clean = leftover_groups == 0 and not leftover_children
    clean = clean and all(r.groups_left == 0 and r.ports_busy == 0 for r in results)
    return 0 if clean and all(r.answered == r.cycles for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
