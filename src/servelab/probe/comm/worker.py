"""One all-reduce rank: `python -m servelab.probe.comm.worker RUN_DIR`, started by allreduce.py.

It reads RUN_DIR/config.json and RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT from its
environment, and appends JSON lines to RUN_DIR/rank<RANK>.jsonl: one "ready" line (with
the check of a known sum), then one "point" per size as soon as it is timed, then "done".
It dies with its parent and exits by itself after the config's deadline, so a stuck
collective never outlives the probe.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from servelab.core.processes import die_with_parent
from servelab.core.units import NS_PER_US
from servelab.probe.comm._timing import synchronize

if TYPE_CHECKING:
    import torch

__all__ = ["main"]

_DEADLINE_EXIT_CODE = 124


def main(argv: list[str] | None = None) -> int:
    """Run this rank's part of the sweep; 0 when every size was timed."""
    args = sys.argv[1:] if argv is None else argv
    run_dir = Path(args[0])
    config: dict[str, Any] = json.loads((run_dir / "config.json").read_text())
    die_with_parent(int(config["parent_pid"]))
    _exit_after(float(config["deadline_s"]))

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    if config["device_type"] == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(
        backend=config["backend"],
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=float(config["deadline_s"])),
        device_id=device if device.type == "cuda" else None,
    )
    dtype = getattr(torch, config["dtype"])
    try:
        with (run_dir / f"rank{rank}.jsonl").open("a") as out:
            _emit(out, event="ready", sum_verified=_sum_verified(device, world_size))
            for size in config["sizes_bytes"]:
                count = max(1, size // dtype.itemsize)
                time_us = _time_allreduce(
                    torch.zeros(count, dtype=dtype, device=device),
                    warmup=int(config["warmup_iterations"]),
                    iterations=int(config["iterations"]),
                )
                _emit(
                    out,
                    event="point",
                    size_bytes=count * dtype.itemsize,
                    count=count,
                    time_us=time_us,
                )
            _emit(out, event="done")
    finally:
        dist.destroy_process_group()
    return 0


def _time_allreduce(buffer: torch.Tensor, *, warmup: int, iterations: int) -> float:
    """nccl-tests' timing: warm up, barrier, time `iterations` calls to completion, divide.

    The buffer holds zeros, so repeated in-place sums stay finite.
    """
    import torch.distributed as dist

    for _ in range(warmup):
        dist.all_reduce(buffer)
    synchronize(buffer.device)
    dist.barrier()
    start_ns = time.perf_counter_ns()
    for _ in range(iterations):
        dist.all_reduce(buffer)
    synchronize(buffer.device)
    return (time.perf_counter_ns() - start_ns) / NS_PER_US / iterations


def _sum_verified(device: torch.device, world_size: int) -> bool:
    """Rank r contributes r + 1; every rank must then hold 1 + 2 + ... + n."""
    import torch
    import torch.distributed as dist

    values = torch.full((1024,), float(dist.get_rank() + 1), device=device)
    dist.all_reduce(values)
    expected = world_size * (world_size + 1) / 2
    return bool(torch.all(values == expected).item())


def _emit(out: IO[str], **record: object) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def _exit_after(seconds: float) -> None:
    """Leave at the deadline even if a collective hangs (os._exit skips NCCL's teardown)."""
    timer = threading.Timer(seconds, os._exit, args=(_DEADLINE_EXIT_CODE,))
    timer.daemon = True
    timer.start()


if __name__ == "__main__":
    sys.exit(main())
