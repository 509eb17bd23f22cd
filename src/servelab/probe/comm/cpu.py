"""The CPU's own ceilings: copy bandwidth, matmul rate and op dispatch, by thread count.

An engine on the CPU (the embedded engine's `transformers serve`, vLLM's CPU build) runs
torch's CPU kernels with OMP_NUM_THREADS threads; a decode step then reads its weights
through the CPU's memory and dispatches each torch op on the host thread. These are what
the model's CPU ceiling needs (`servelab.model.cpus`), measured as the GPU's are
(`_timing.time_per_call_us` on the CPU is a perf_counter batch): a buffer larger than the
last-level cache copied into another, a square fp32 (and with --comm, bf16) multiply, the
launch chain of tiny ops. Each thread count runs under torch.set_num_threads, and the
process's own count is restored afterwards.

`measure_cpu` runs in this process (`servelab probe --comm` has torch loaded anyway);
`measure_cpu_in_child` runs it in a child process (`python -m servelab.probe.comm.cpu`),
so a caller that does not otherwise load torch (`servelab run`) keeps none of its
threads and pays only the child's start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servelab.core.processes import usable_cpus
from servelab.core.units import MIB
from servelab.probe.comm.device import measure_matmul, measure_memory_copy
from servelab.probe.comm.launch import measure_launch
from servelab.probe.comm.results import CpuRates, CpuThreadRates
from servelab.probe.sysfs import list_dir, read_text

__all__ = [
    "CPU_CHILD_TIMEOUT_S",
    "FULL_CPU_PLAN",
    "QUICK_CPU_PLAN",
    "CpuPlan",
    "cpu_thread_counts",
    "last_level_cache_bytes",
    "measure_cpu",
    "measure_cpu_in_child",
]

CPU_CHILD_TIMEOUT_S = 60.0
"""The child imports torch (1-3 s) and measures for about a second; a minute is trouble."""


@dataclass(frozen=True)
class CpuPlan:
    """How hard each part tries at each thread count."""

    min_copy_bytes: int
    """The copy buffer: at least this, and twice the last-level cache (at most 1 GiB)."""
    copy_iterations: int
    copy_repeats: int
    matmul_mnk: int
    matmul_iterations: int
    matmul_repeats: int
    bf16: bool
    """Also time a bf16 multiply (slow on CPUs without bf16 instructions)."""
    launch_repeats: int


FULL_CPU_PLAN = CpuPlan(256 * MIB, 3, 5, 2048, 1, 5, True, 5)
QUICK_CPU_PLAN = CpuPlan(64 * MIB, 1, 3, 1024, 1, 3, False, 3)
"""What `servelab run` measures before each run: under a second past the torch import."""
_MAX_COPY_BYTES = 1 << 30


def cpu_thread_counts(cores: int | None = None, env: dict[str, str] | None = None) -> list[int]:
    """The counts an engine here is likely to use: OMP_NUM_THREADS when set, half the cores
    (what servelab's CPU engines take beside the load generator) and all of them."""
    cores = cores or _cores()
    env = dict(os.environ) if env is None else env
    counts = {max(1, cores // 2), cores}
    given = env.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        counts.add(int(given))
    return sorted(counts)


def measure_cpu(
    threads: Sequence[int] | None = None, *, plan: CpuPlan = QUICK_CPU_PLAN
) -> CpuRates:
    """Measure at each thread count (default `cpu_thread_counts()`); errors are recorded."""
    import torch

    started = time.perf_counter()
    counts = list(threads) if threads is not None else cpu_thread_counts()
    llc = last_level_cache_bytes()
    copy_bytes = min(max(plan.min_copy_bytes, 2 * (llc or 0)), _MAX_COPY_BYTES)
    original = torch.get_num_threads()
    rates = CpuRates(
        cores=_cores(),
        torch_threads=original,
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        last_level_cache_bytes=llc,
    )
    cpu = torch.device("cpu")
    try:
        for count in counts:
            torch.set_num_threads(count)
            try:
                matmul = [
                    measure_matmul(
                        cpu,
                        dtype="fp32",
                        mnk=plan.matmul_mnk,
                        iterations=plan.matmul_iterations,
                        repeats=plan.matmul_repeats,
                    )
                ]
                if plan.bf16:
                    matmul.append(
                        measure_matmul(
                            cpu,
                            dtype="bf16",
                            mnk=plan.matmul_mnk // 2,
                            iterations=plan.matmul_iterations,
                            repeats=plan.matmul_repeats,
                        )
                    )
                rates.by_threads.append(
                    CpuThreadRates(
                        threads=count,
                        memory_copy=measure_memory_copy(
                            cpu,
                            size_bytes=copy_bytes,
                            iterations=plan.copy_iterations,
                            repeats=plan.copy_repeats,
                        ),
                        matmul=matmul,
                        launch=measure_launch(cpu, repeats=plan.launch_repeats),
                    )
                )
            except Exception as exc:  # one count failing leaves the others
                rates.errors[str(count)] = f"{type(exc).__name__}: {exc}".strip()
    finally:
        torch.set_num_threads(original)
    rates.duration_s = time.perf_counter() - started
    return rates


def measure_cpu_in_child(
    threads: Sequence[int] | None = None,
    *,
    quick: bool = True,
    timeout_s: float = CPU_CHILD_TIMEOUT_S,
) -> CpuRates:
    """`measure_cpu` in a child process; a child that fails is one entry in `errors`."""
    counts = list(threads) if threads is not None else cpu_thread_counts()
    args = [sys.executable, "-m", "servelab.probe.comm.cpu", "quick" if quick else "full"]
    args += [str(c) for c in counts]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _failed(f"{type(exc).__name__}: {exc}")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return _failed(f"the measuring child exited {done.returncode}: {tail[0]}")
    try:
        return CpuRates.model_validate_json(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        return _failed(f"the measuring child printed no result: {exc}")


def last_level_cache_bytes(root: Path = Path("/")) -> int | None:
    """The largest cache sysfs lists for cpu0 ('32768K' -> bytes); None when hidden."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    sizes = []
    for entry in list_dir(root, base) or []:
        text = read_text(root, f"{base}/{entry}/size") or ""
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        if text[:-1].isdigit() and text[-1:].upper() in units:
            sizes.append(int(text[:-1]) * units[text[-1].upper()])
        elif text.isdigit():
            sizes.append(int(text))
    return max(sizes) if sizes else None


def _cores() -> int:
    return len(usable_cpus()) or 1


def _failed(why: str) -> CpuRates:
    return CpuRates(cores=_cores(), torch_threads=0, errors={"cpu": why})


def _main(argv: list[str]) -> int:
    """`python -m servelab.probe.comm.cpu quick|full [THREADS...]`: one JSON line out."""
    plan = QUICK_CPU_PLAN if not argv or argv[0] != "full" else FULL_CPU_PLAN
    counts = [int(a) for a in argv[1:]] or None
    print(measure_cpu(counts, plan=plan).model_dump_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
