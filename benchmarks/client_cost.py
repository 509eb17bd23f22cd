"""What servelab's client costs per streamed chunk, against the least a client can do.

Not a test (pytest does not collect it): run it by hand; it prints Markdown tables, the
ratios and whether the goal was met, and exits 0 (it measures, it does not assert).

    .venv/bin/python benchmarks/client_cost.py [--concurrency 1024] [--clients raw,servelab]

Each client drives one closed-loop level against a fresh fixed-timing simulator in its
own process (`servelab sim --ttft-ms 20 --itl-ms 20 --record`, so one stream ideally
gets 50 tok/s): `--requests-per-stream` x concurrency requests of 128 input and 256
output tokens after one warm-up. The clients:

- `raw`: `raw_stream_client.py`, one asyncio protocol per keep-alive connection that
  stamps the first text bytes and counts tokens without parsing anything;
- `servelab`: `servelab bench`, as a user runs it (its own worker count);
- `sglang`: SGLang's `bench_serving` 0.5.23 (`client_fidelity.py` builds its venv);
- `aiperf`: NVIDIA AIPerf 0.13.0, in its own venv under `.bench-venvs/` (made here).

Measured from the same run, per client:

- CPU-us per chunk: the CPU the client's whole process tree used while the measured
  requests streamed (sampled from /proc every 100 ms, interpolated to the window from the
  server's first receive of a measured request to its last chunk sent), divided by the
  text chunks the server sent in that window;
- TTFT error: the client's mean TTFT minus the server's true one (its first chunk's send
  time minus its receive time, from the truth log);
- output throughput against the ideal, concurrency x 50 tok/s.

The goal (issue 18) at the largest concurrency: servelab at least 95% of the ideal and its
TTFT error at most twice the raw reader's. `--py-spy DIR` also samples servelab's client
processes with py-spy (installed separately) into DIR while it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from client_fidelity import (
    INPUT_LEN,
    ITL_MS,
    OUTPUT_LEN,
    VENVS,
    WARMUP,
    _sglang_python,
    _simulator,
    _stop,
    _tokenizer_folder,
    _work_dir,
    print_header,
)
from servelab.core.processes import proc_stat
from servelab.sim import TruthRecord, read_truth

HERE = Path(__file__).resolve().parent
AIPERF = "aiperf==0.13.0"
THROUGHPUT_GOAL = 0.95
TTFT_ERROR_GOAL = 2.0
"""servelab's TTFT error at most this many times the raw reader's."""
CLIENT_TIMEOUT_S = 900
SAMPLE_S = 0.1
CLIENTS = ("raw", "servelab", "sglang", "aiperf")


@dataclass(frozen=True)
class Result:
    client: str
    concurrency: int
    completed: int
    mean_ttft_ms: float
    truth_ttft_ms: float
    output_throughput: float
    window_cpu_s: float
    window_system_s: float
    """Of it, in the kernel (the sockets' reads and writes, the loop's polling)."""
    window_s: float
    window_chunks: int
    total_cpu_s: float

    @property
    def ttft_error_ms(self) -> float:
        return self.mean_ttft_ms - self.truth_ttft_ms

    @property
    def share_of_ideal(self) -> float:
        return self.output_throughput / (self.concurrency * 1000.0 / ITL_MS)

    @property
    def cpu_us_per_chunk(self) -> float:
        return self.window_cpu_s / self.window_chunks * 1e6 if self.window_chunks else 0.0

    @property
    def system_us_per_chunk(self) -> float:
        return self.window_system_s / self.window_chunks * 1e6 if self.window_chunks else 0.0

    @property
    def cores(self) -> float:
        return self.window_cpu_s / self.window_s if self.window_s else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1024", help="comma-separated levels")
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--sim-workers", type=int, default=2)
    parser.add_argument("--clients", default=",".join(CLIENTS), help="which clients to run")
    parser.add_argument("--keep", type=Path, help="keep logs, truth logs and results here")
    parser.add_argument("--py-spy", type=Path, help="profile servelab's client into this folder")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    clients = args.clients.split(",")
    unknown = sorted(set(clients) - set(CLIENTS))
    if unknown:
        parser.error(f"unknown client {', '.join(unknown)}; choose from {', '.join(CLIENTS)}")
    pythons = {
        "sglang": _sglang_python() if "sglang" in clients else None,
        "aiperf": _aiperf_python() if "aiperf" in clients else None,
    }
    tokenizer = _tokenizer_folder(pythons["sglang"])
    print_header("client cost", args)
    results: list[Result] = []
    with _work_dir(args.keep) as work:
        for concurrency in levels:
            for client in clients:
                run_dir = work / f"{client}-c{concurrency}"
                run_dir.mkdir(parents=True, exist_ok=True)
                command = _command(client, concurrency, run_dir, args, tokenizer, pythons)
                try:
                    results.append(_measure(client, concurrency, command, run_dir, args))
                except RuntimeError as exc:
                    print(f"{client} at concurrency {concurrency} failed: {exc}", file=sys.stderr)
    _print(results, levels)


# --- the clients ----------------------------------------------------------------------


def _command(
    client: str,
    concurrency: int,
    run_dir: Path,
    args: argparse.Namespace,
    tokenizer: Path,
    pythons: dict[str, Path | None],
) -> list[str]:
    """The client's command line, with `{url}` where the simulator's URL goes."""
    n = args.requests_per_stream * concurrency
    if client == "raw":
        return [
            *(sys.executable, str(HERE / "raw_stream_client.py"), "--url", "{url}"),
            *("--concurrency", str(concurrency), "--requests", str(n)),
            *("--input-words", str(INPUT_LEN), "--max-tokens", str(OUTPUT_LEN)),
            *("--out", str(run_dir / "raw.jsonl")),
        ]
    if client == "servelab":
        return [
            *(sys.executable, "-m", "servelab", "bench", "--url", "{url}"),
            *("--concurrency", str(concurrency), "--num-requests", str(n)),
            *("--warmup", str(WARMUP), "--input-len", str(INPUT_LEN)),
            *("--output-len", str(OUTPUT_LEN), "--tokenizer", str(tokenizer)),
            *("--out", str(run_dir / "run"), "--runs-dir", str(run_dir / "runs")),
        ]
    if client == "sglang":
        return [
            *(str(pythons["sglang"]), "-m", "sglang.bench_serving", "--backend"),
            *("sglang-oai-chat", "--base-url", "{url}", "--dataset-name", "random-ids"),
            *("--tokenizer", str(tokenizer), "--random-range-ratio", "1"),
            *("--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN)),
            *("--num-prompts", str(n), "--max-concurrency", str(concurrency)),
            *("--request-rate", "inf", "--warmup-requests", str(WARMUP)),
            *("--output-file", str(run_dir / "sglang.jsonl"), "--disable-tqdm"),
        ]
    python = pythons["aiperf"]
    assert python is not None
    return [
        *(str(python.parent / "aiperf"), "profile", "--model", "servelab-sim"),
        *("--url", "{url}", "--endpoint-type", "chat", "--streaming"),
        *("--tokenizer", str(tokenizer), "--concurrency", str(concurrency)),
        *("--request-count", str(n), "--warmup-request-count", str(WARMUP)),
        *("--isl", str(INPUT_LEN), "--isl-stddev", "0", "--osl", str(OUTPUT_LEN)),
        *("--osl-stddev", "0", "--random-seed", "1", "--ui", "none"),
        *("--artifact-dir", str(run_dir / "aiperf")),
    ]


def _aiperf_python() -> Path:
    """AIPerf's venv under .bench-venvs/, created when missing (idempotent)."""
    venv = VENVS / AIPERF.replace("==", "-")
    python = venv / "bin" / "python"
    marker = venv / "servelab-installed.txt"
    if marker.is_file() and marker.read_text() == AIPERF + "\n":
        return python
    print(f"installing {AIPERF} into {venv} (once)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, AIPERF], check=True)
    marker.write_text(AIPERF + "\n")
    return python


def _client_level(client: str, run_dir: Path, stdout: str) -> tuple[int, float, float]:
    """(completed, mean TTFT ms, output tok/s) as the client itself reported them."""
    if client == "raw":
        level = json.loads(stdout.strip().splitlines()[-1])
    elif client == "servelab":
        level = json.loads((run_dir / "run" / "summary.json").read_text())["levels"][0]
    elif client == "sglang":
        level = json.loads((run_dir / "sglang.jsonl").read_text().splitlines()[-1])
    else:
        found = sorted((run_dir / "aiperf").rglob("profile_export_aiperf.json"))
        if not found:
            raise RuntimeError(f"AIPerf wrote no profile_export_aiperf.json under {run_dir}")
        export = json.loads(found[-1].read_text())
        return (
            int(export["request_count"]["avg"]),
            float(export["time_to_first_token"]["avg"]),
            float(export["output_token_throughput"]["avg"]),
        )
    return level["completed"], level["mean_ttft_ms"], level["output_throughput"]


# --- one measurement -------------------------------------------------------------------


def _measure(
    client: str, concurrency: int, command: list[str], run_dir: Path, args: argparse.Namespace
) -> Result:
    record = run_dir / "truth.jsonl"
    with _simulator(record, args.sim_workers, run_dir / "sim.log") as url:
        argv = [part.replace("{url}", url) for part in command]
        samples, total_cpu_s, stdout = _run_sampled(argv, run_dir, client, args.py_spy)
    measured = _measured(read_truth(record))
    completed, ttft_ms, throughput = _client_level(client, run_dir, stdout)
    t_first = min(r.t_recv_ns for r in measured)
    t_last = max(r.chunk_sent_ns[-1] for r in measured if r.chunk_sent_ns)
    chunks = sum(1 for r in measured for sent in r.chunk_sent_ns if t_first <= sent <= t_last)
    user = np.interp([t_first, t_last], samples[:, 0], samples[:, 1])
    system = np.interp([t_first, t_last], samples[:, 0], samples[:, 2])
    return Result(
        client=client,
        concurrency=concurrency,
        completed=completed,
        mean_ttft_ms=ttft_ms,
        truth_ttft_ms=float(np.mean([r.chunk_sent_ns[0] - r.t_recv_ns for r in measured])) / 1e6,
        output_throughput=throughput,
        window_cpu_s=float(user[1] - user[0] + system[1] - system[0]),
        window_system_s=float(system[1] - system[0]),
        window_s=(t_last - t_first) / 1e9,
        window_chunks=chunks,
        total_cpu_s=total_cpu_s,
    )


def _measured(records: list[TruthRecord]) -> list[TruthRecord]:
    """The measured requests: by X-Request-Id where the client sends one, else by order."""
    records = sorted((r for r in records if r.chunk_sent_ns), key=lambda r: r.t_recv_ns)
    tagged = [r for r in records if r.request_id.startswith(("servelab-", "raw-"))]
    if tagged:
        return [r for r in tagged if "-m" in r.request_id]
    return records[WARMUP:]


def _run_sampled(
    argv: list[str], run_dir: Path, client: str, py_spy: Path | None
) -> tuple[np.ndarray, float, str]:
    """Run the client; (monotonic ns, user s, system s) of its tree, total CPU s, stdout."""
    log = run_dir / "client.log"
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    if client != "aiperf":
        env["HF_HUB_OFFLINE"] = "1"  # AIPerf 0.13 then looks a local folder up in the hub cache
    with log.open("w") as stderr:
        child = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True, start_new_session=True
        )
        samples: list[tuple[int, float, float]] = []
        sampler = threading.Thread(target=_sample, args=(child, samples), daemon=True)
        sampler.start()
        spy = _start_py_spy(child.pid, py_spy, run_dir) if client == "servelab" else None
        try:
            stdout, _ = child.communicate(timeout=CLIENT_TIMEOUT_S)
        finally:
            _stop(child)
            if spy is not None:
                spy.wait(60)
        sampler.join()
    if child.returncode != 0:
        tail = " | ".join(log.read_text(errors="replace").splitlines()[-5:])
        raise RuntimeError(f"{argv[0]} exited with {child.returncode}; {log} ends: {tail}")
    total = max(user + system for _, user, system in samples) if samples else 0.0
    return np.asarray(samples, dtype=np.float64), total, stdout


def _sample(child: subprocess.Popen, samples: list[tuple[int, float, float]]) -> None:
    """Every SAMPLE_S, the user and system CPU s of `child` and its descendants, to its exit."""
    seen: dict[int, tuple[float, float]] = {}
    while child.poll() is None:
        for pid in _tree(child.pid):
            cpu = _cpu_s(pid)
            if cpu is not None:
                seen[pid] = cpu
        user = sum(u for u, _ in seen.values())
        samples.append((time.monotonic_ns(), user, sum(s for _, s in seen.values())))
        time.sleep(SAMPLE_S)


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return pids


def _cpu_s(pid: int) -> tuple[float, float] | None:
    """(user, system) CPU seconds of one process."""
    stat = proc_stat(pid)
    return None if stat is None else (stat.user_s, stat.system_s)


def _start_py_spy(pid: int, folder: Path | None, run_dir: Path) -> subprocess.Popen | None:
    if folder is None:
        return None
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            *(py_spy, "record", "--subprocesses", "--pid", str(pid), "--rate", "200"),
            *("--format", "raw", "--output", str(folder / f"{run_dir.name}.txt")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(run_dir / "py-spy.log").open("w"),
    )


# --- report ---------------------------------------------------------------------------


def _print(results: list[Result], levels: list[int]) -> None:
    print(
        "| streams | client | completed | TTFT error ms | output / ideal"
        " | CPU-us per chunk (of it kernel) | cores while streaming | client CPU s (whole run) |"
    )
    print("|---" * 8 + "|")
    for r in results:
        print(
            f"| {r.concurrency} | {r.client} | {r.completed} | {r.ttft_error_ms:.1f}"
            f" | {r.share_of_ideal:.3f} | {r.cpu_us_per_chunk:.1f} ({r.system_us_per_chunk:.1f})"
            f" | {r.cores:.2f}"
            f" | {r.total_cpu_s:.1f} |"
        )
    print()
    by_key = {(r.client, r.concurrency): r for r in results}
    for concurrency in levels:
        raw, ours = by_key.get(("raw", concurrency)), by_key.get(("servelab", concurrency))
        for peer in (r for r in results if r.concurrency == concurrency and r.client != "raw"):
            if raw is None:
                continue
            print(
                f"{concurrency} streams, {peer.client} / raw: CPU per chunk"
                f" {peer.cpu_us_per_chunk / raw.cpu_us_per_chunk:.2f}x, TTFT error"
                f" {peer.ttft_error_ms / raw.ttft_error_ms:.2f}x, throughput"
                f" {peer.share_of_ideal / raw.share_of_ideal:.3f}"
            )
        if concurrency == max(levels) and raw is not None and ours is not None:
            ratio = ours.ttft_error_ms / raw.ttft_error_ms
            met = ours.share_of_ideal >= THROUGHPUT_GOAL and ratio <= TTFT_ERROR_GOAL
            print(
                f"goal at {concurrency} streams (servelab >= {THROUGHPUT_GOAL:.0%} of ideal,"
                f" TTFT error <= {TTFT_ERROR_GOAL:g}x the raw reader's):"
                f" {'met' if met else 'NOT met'} ({ours.share_of_ideal:.1%}, {ratio:.2f}x)"
            )


if __name__ == "__main__":
    main()
