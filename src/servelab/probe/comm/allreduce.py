"""All-reduce latency and bus bandwidth by message size, one process per rank.

This is nccl-tests' all_reduce_perf in torch.distributed: sizes from 8 B to 256 MiB
doubling (`-b 8 -e 256M -f 2`), float32, in place; each rank runs warm-up calls, then
times `iterations` back-to-back calls with a host timer and divides; the slowest rank's
time is reported (nccl-tests `-a 3`; its default averages the ranks). Bandwidths:

- algbw = size / time: what the caller sees.
- busbw = algbw x 2(n-1)/n: a ring all-reduce sends and receives 2(n-1)/n of the buffer
  on every link, so busbw is the traffic per link, comparable with the link's bandwidth
  per direction whatever n is (nccl-tests doc/PERFORMANCE.md derives it).

Processes: each rank is `python -m servelab.probe.comm.worker RUN_DIR` with RANK,
WORLD_SIZE and MASTER_ADDR/MASTER_PORT (127.0.0.1 and a free port) in its environment,
in a session of its own. It writes its points as JSON lines to RUN_DIR/rank<r>.jsonl as
it goes, so the sizes that finished survive a failure. The parent polls; when a rank
fails, or `timeout_s` passes, every rank's process group gets SIGTERM, then SIGKILL,
and is reaped. Ranks also die with the parent (PR_SET_PDEATHSIG) and exit on their own
a little after the deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from servelab.core.net import free_port
from servelab.core.processes import signal_group
from servelab.probe.comm._timing import gb_s
from servelab.probe.comm.nccl_log import parse_nccl_log
from servelab.probe.comm.results import AllReducePoint, AllReduceResult

__all__ = [
    "ALLREDUCE_MAX_BYTES",
    "ALLREDUCE_MIN_BYTES",
    "DEFAULT_ALLREDUCE_TIMEOUT_S",
    "KEPT_ENV",
    "NCCL_DEBUG_ENV",
    "allreduce_sizes",
    "bus_bandwidth_factor",
    "run_allreduce",
]

ALLREDUCE_MIN_BYTES = 8
ALLREDUCE_MAX_BYTES = 256 << 20
DEFAULT_ALLREDUCE_TIMEOUT_S = 180.0

# NVLink multicast stays off in NCCL, torch and NVSHMEM: on shared machines a program
# that uses it can take the host's GPUs out of service. Always set; never remove.
KEPT_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# Subsystem names as NCCL's NCCL_DEBUG_SUBSYS accepts them (src/debug.cc).
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,P2P,SHM,NET"}

_LOCALHOST = "127.0.0.1"
_POLL_S = 0.1
_STOP_GRACE_S = 3.0
_WORKER_EXTRA_S = 5.0  # ranks give up this long after the parent's deadline
_LOG_TAIL_LINES = 20


def allreduce_sizes(
    min_bytes: int = ALLREDUCE_MIN_BYTES, max_bytes: int = ALLREDUCE_MAX_BYTES, factor: int = 2
) -> list[int]:
    """nccl-tests' size series (-b, -e, -f): min_bytes times factor^i up to max_bytes."""
    if min_bytes <= 0 or factor < 2:
        raise ValueError("sizes need min_bytes > 0 and factor >= 2")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def bus_bandwidth_factor(world_size: int) -> float:
    """2(n-1)/n: busbw / algbw of an all-reduce over n ranks (nccl-tests' AllReduceGetBw)."""
    return 2 * (world_size - 1) / world_size


def run_allreduce(
    *,
    world_size: int,
    backend: str = "nccl",
    device_type: str = "cuda",
    sizes_bytes: Sequence[int] | None = None,
    dtype: str = "float32",
    warmup_iterations: int = 5,
    iterations: int = 20,
    timeout_s: float = DEFAULT_ALLREDUCE_TIMEOUT_S,
    log_dir: Path | None = None,
) -> AllReduceResult:
    """Run the sweep on `world_size` local ranks (cuda:r each, or the CPU with gloo).

    Failures are returned in `error` with the points that finished; nothing is raised
    for a rank that fails. Logs stay in `log_dir` when given, else in a removed temp dir.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    sizes = list(sizes_bytes) if sizes_bytes is not None else allreduce_sizes()
    run_dir = Path(tempfile.mkdtemp(prefix="servelab-allreduce-")) if log_dir is None else log_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    result = AllReduceResult(
        world_size=world_size,
        backend=backend,
        device_type=device_type,
        dtype=dtype,
        warmup_iterations=warmup_iterations,
        iterations=iterations,
    )
    try:
        config = {
            "backend": backend,
            "device_type": device_type,
            "dtype": dtype,
            "sizes_bytes": sizes,
            "warmup_iterations": warmup_iterations,
            "iterations": iterations,
            "parent_pid": os.getpid(),
            "deadline_s": timeout_s + _WORKER_EXTRA_S,
        }
        (run_dir / "config.json").write_text(json.dumps(config))
        failed_rank = _run_ranks(run_dir, world_size, backend, timeout_s, result)
        _collect(run_dir, world_size, result)
        if result.error is not None:
            result.log_tail = _tail(run_dir / f"rank{failed_rank}.log")
        if backend == "nccl":
            result.nccl = parse_nccl_log(_log_lines(run_dir, world_size))
    finally:
        if log_dir is None:
            shutil.rmtree(run_dir, ignore_errors=True)
    return result


def _run_ranks(
    run_dir: Path, world_size: int, backend: str, timeout_s: float, result: AllReduceResult
) -> int:
    """Start one worker per rank and wait; set result.error; return the rank to blame."""
    port = free_port(_LOCALHOST)
    logs: list[IO[bytes]] = []
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(world_size):
            log = (run_dir / f"rank{rank}.log").open("wb")
            logs.append(log)
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "servelab.probe.comm.worker", str(run_dir)],
                    env=_rank_env(run_dir, rank, world_size, port, backend),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + timeout_s
        while True:
            codes = [process.poll() for process in processes]
            failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                rank, code = failed[0]
                result.error = f"rank {rank} exited with code {code}"
                return rank
            if all(code == 0 for code in codes):
                return 0
            if time.monotonic() > deadline:
                result.error = f"timed out after {timeout_s:g} s"
                return 0
            time.sleep(_POLL_S)
    finally:
        _stop(processes)
        for handle in logs:
            handle.close()


def _rank_env(run_dir: Path, rank: int, world_size: int, port: int, backend: str) -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[3])  # the directory holding `servelab`
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")  # n ranks share the host's cores
    env.update(
        MASTER_ADDR=_LOCALHOST,
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
    )
    if backend == "nccl":
        env.update(NCCL_DEBUG_ENV)
        # NCCL line-buffers its own file; stdout would be lost in a block buffer on a kill.
        env["NCCL_DEBUG_FILE"] = str(run_dir / f"nccl-rank{rank}.log")
    env.update(KEPT_ENV)
    return env


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each rank's process group, SIGKILL what is left after a grace, reap all."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in running:
        signal_group(process.pid, signal.SIGKILL)  # also any child the rank started
    for process in processes:
        process.wait()


def _collect(run_dir: Path, world_size: int, result: AllReduceResult) -> None:
    """Merge the ranks' JSON lines: a size counts once every rank timed it."""
    times: dict[int, list[float]] = {}
    counts: dict[int, int] = {}
    verified: list[bool] = []
    for rank in range(world_size):
        path = run_dir / f"rank{rank}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                record = json.loads(line)
                if record["event"] == "ready":
                    verified.append(bool(record["sum_verified"]))
                elif record["event"] == "point":
                    times.setdefault(record["size_bytes"], []).append(record["time_us"])
                    counts[record["size_bytes"]] = record["count"]
    if verified:
        result.sum_verified = all(verified) and len(verified) == world_size
    factor = bus_bandwidth_factor(world_size)
    for size in sorted(times):
        if len(times[size]) < world_size:
            continue
        slowest = max(times[size])
        algbw = gb_s(size, slowest)
        result.points.append(
            AllReducePoint(
                size_bytes=size,
                count=counts[size],
                dtype=result.dtype,
                time_us=slowest,
                algbw_gb_s=algbw,
                busbw_gb_s=algbw * factor,
            )
        )


def _log_lines(run_dir: Path, world_size: int) -> list[str]:
    lines: list[str] = []
    for rank in range(world_size):
        for name in (f"nccl-rank{rank}.log", f"rank{rank}.log"):
            path = run_dir / name
            if path.exists():
                lines.extend(path.read_text(errors="replace").splitlines())
    return lines


def _tail(path: Path) -> list[str]:
    if not path.exists():
        return []
    return path.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
