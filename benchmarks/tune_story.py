"""Does `servelab tune` find the story's fix? The cap, on the simulated story deployment.

DESIGN.md's deployment (GLM-5 NVFP4 on 8 RTX PRO 6000, TP8) ran with the server's
running-request cap at 64, and the fix was found by hand. Here `servelab tune run` starts
from that cap on the simulator (the story profile, `--time-scale` faster than real time,
which keeps ratios) with a space over the cap, 256 in / 128 out, the objective total
throughput at 128 concurrent. It prints every trial and the best trial's throughput over
the default's, measured in the same study. The claim: >= 1.6x, found by the first trials
(the default, then diagnose's action).

    python benchmarks/tune_story.py [--time-scale 50] [--trials 4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=50.0)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--keep", type=Path, help="Keep the study folder here.")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="servelab-tune-story-"))
    root.mkdir(parents=True, exist_ok=True)
    space = root / "story.yaml"
    space.write_text(
        yaml.safe_dump(
            {
                "study": "story-cap",
                "base": {
                    "engine": "sim",
                    "options": {"profile": "glm5-rtxpro6000-tp8", "time_scale": args.time_scale},
                    "knobs": {"max_running_requests": 64},
                },
                "space": {"knobs.max_running_requests": [32, 96, 128, 192, 256]},
                "workload": {"input_len": 256, "output_len": 128},
                "load": {"concurrency": [1, 128], "warmup": 0},
                "objective": "total_throughput@128",
                "trials": args.trials,
            },
            sort_keys=False,
        )
    )
    out = root / "study"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "servelab",
            "tune",
            "run",
            str(space),
            "--out",
            str(out),
            "--runs-dir",
            str(root / "runs"),
            "--no-report",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    study = json.loads((out / "study.json").read_text())
    print(f"{'trial':>5}  {'role':<9} {'cap':>5}  {'total tok/s at 128':>18}  note")
    for trial in study["trials"]:
        value = f"{trial['values'][0]:,.0f}" if trial["values"] else "-"
        cap = trial["params"].get("knobs.max_running_requests")
        note = trial["reason"] or ""
        print(f"{trial['number']:>5}  {trial['role']:<9} {cap:>5}  {value:>18}  {note}")
    default = next(t for t in study["trials"] if t["number"] == study["default_trial"])
    best = next(t for t in study["trials"] if t["number"] == study["best"][0])
    ratio = best["values"][0] / default["values"][0]
    diagnose = [t for t in study["trials"] if t["role"] == "diagnose"]
    first = diagnose[0]["values"][0] / default["values"][0] if diagnose else None
    print(
        f"best (trial {best['number']}, cap {best['params']['knobs.max_running_requests']}) "
        f"/ default (cap 64): {ratio:.2f}x"
    )
    if first is not None:
        print(f"diagnose's action (trial {diagnose[0]['number']}) / default: {first:.2f}x")
    return 0 if ratio >= 1.6 else 1


if __name__ == "__main__":
    sys.exit(main())
