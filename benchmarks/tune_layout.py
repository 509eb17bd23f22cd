"""TP8 or TP4+PP2? DESIGN.md's layout question, answered by `servelab tune run` on the simulator.

Not a test (pytest does not collect it): run it by hand from anywhere; it prints Markdown.

    python benchmarks/tune_layout.py [--out DIR]

Two studies, the space files tests/tune/test_layout.py runs (tests/fixtures/tune/
layout-256-128.yaml and layout-8192-128.yaml): GLM-5 NVFP4 on eight RTX PRO 6000 over
PCIe without P2P (the probe fixture's host-staged copies and all-reduce calibrate the
model), TP8, TP4+PP2 and TP2+PP4 each at running-request caps 32 and 64, 64 requests in
flight. Per workload and layout: the best measured total tok/s (divided by the space's
time_scale: the simulated box's own rate), the model's account of that trial that the
study records and the report's layout table shows: the decode step (ms, all-reduces x
bytes, all-reduce ms, pipeline send ms, bubble share), the prompts' prefill per cycle, the
requests the KV cache holds at these lengths, and the total tok/s the model predicts for
the cycle. Then the ratio TP4+PP2 / TP8, measured and modelled. Ratios are the claim; the
simulator's timing is the model's, so the numbers repeat on any machine (within a few per cent for
the pipelined layouts, whose first steps depend on how the requests' arrivals fall).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SPACES = [
    REPO / "tests" / "fixtures" / "tune" / f"layout-{w}.yaml" for w in ("256-128", "8192-128")
]
TP8, TP4_PP2 = "tp=8", "tp=4,pp=2"


@dataclass(frozen=True)
class LayoutRow:
    """One layout's best trial: what was measured, and the model's account of it."""

    layout: str
    trial: int
    cap: int
    measured_tok_s: float
    model: dict[str, Any]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="Keep the studies here (default: a temp dir).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        for space in SPACES:
            _report(space, _run(space, root / space.stem))


def _run(space: Path, out: Path) -> dict[str, Any]:
    """One study, from the repository root (the space's calibrate path is relative to it)."""
    command = [sys.executable, "-m", "servelab", "tune", "run", str(space), "--out", str(out)]
    command += ["--runs-dir", str(out.parent / "runs"), "--no-report"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    if done.returncode != 0:
        sys.exit(f"{space.name}: servelab tune run exited {done.returncode}\n{done.stderr[-2000:]}")
    study: dict[str, Any] = json.loads((out / "study.json").read_text())
    return study


def _report(space_file: Path, study: dict[str, Any]) -> None:
    space = yaml.safe_load(space_file.read_text())
    rows = _rows(space, study)
    scale = float(space["base"]["options"]["time_scale"])
    print(f"### {space_file.name}: {study['workload']}\n")
    print(
        "| layout | best trial (cap) | measured total tok/s | vs TP8 | model step ms"
        " | all-reduces x bytes | all-reduce ms | pipeline send ms | bubble"
        " | model prefill ms per cycle | model total tok/s | vs TP8 | KV holds (requests) |"
    )
    print("|---" * 13 + "|")
    base = rows[TP8]
    for row in rows.values():
        m = row.model
        print(
            f"| {row.layout} | {row.trial} ({row.cap}) | {row.measured_tok_s / scale:,.0f}"
            f" | {row.measured_tok_s / base.measured_tok_s:.2f}"
            f" | {m['step_ms']:.1f} | {m['allreduces']} x {m['allreduce_bytes'] / 1024:,.0f} KiB"
            f" | {m['allreduce_ms']:.1f} | {m['pp_send_ms']:.2f} | {m['pp_bubble_fraction']:.0%}"
            f" | {m['prefill_ms']:,.0f} | {m['total_tokens_per_s'] / scale:,.0f}"
            f" | {m['total_tokens_per_s'] / base.model['total_tokens_per_s']:.2f}"
            f" | {m['kv_max_requests']} |"
        )
    measured = max(rows.values(), key=lambda r: r.measured_tok_s)
    modelled = max(rows.values(), key=lambda r: r.model["total_tokens_per_s"])
    pair = rows[TP4_PP2]
    print(
        f"\n- measured winner: **{measured.layout}**; the recorded model account's winner:"
        f" **{modelled.layout}** ({'agree' if measured is modelled else 'disagree'})"
    )
    print(
        f"- TP4+PP2 / TP8: measured **{pair.measured_tok_s / base.measured_tok_s:.2f}**,"
        f" modelled **{pair.model['total_tokens_per_s'] / base.model['total_tokens_per_s']:.2f}**"
    )
    print(f"- measured values divided by the space's time_scale ({scale:g})\n")


def _rows(space: dict[str, Any], study: dict[str, Any]) -> dict[str, LayoutRow]:
    """Each layout's best complete trial, in the space's order of layouts."""
    rows: dict[str, LayoutRow] = {}
    for sizes in space["space"]["layout"]:
        name = ",".join(f"{k}={v}" for k, v in sizes.items())
        trials = [
            t
            for t in study["trials"]
            if t["params"]["layout"] == name and t["state"] == "complete" and t["values"]
        ]
        best = max(trials, key=lambda t: t["values"][0])
        rows[name] = LayoutRow(
            layout=name,
            trial=best["number"],
            cap=best["params"]["knobs.max_running_requests"],
            measured_tok_s=best["values"][0],
            model=best["model"],
        )
    return rows


if __name__ == "__main__":
    main()
