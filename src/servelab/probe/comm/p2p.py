"""GPU-to-GPU copies by message size, in both directions, with a copy-and-verify check.

Tensor-parallel decoding moves small messages (tens of KB per layer) between GPUs, so
the latency of a 12 KB copy matters as much as the bandwidth of a large one. A copy
between two GPUs goes over NVLink or PCIe peer-to-peer when the driver allows it, and
is staged through host memory when it does not (a VM without P2P: ~1 GB/s at 12 KB,
where P2P gives tens); `p2p_access_reported` says which the driver claims, the
bandwidth says which happened. The sizes follow DESIGN.md's measurements.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from servelab.probe.comm._timing import bandwidth_point, time_per_call_us
from servelab.probe.comm.results import BandwidthPoint, P2PResult

if TYPE_CHECKING:
    import torch

__all__ = ["P2P_SIZES_BYTES", "QUICK_P2P_SIZES_BYTES", "measure_p2p_pair"]

P2P_SIZES_BYTES = (12 << 10, 48 << 10, 192 << 10, 768 << 10, 16 << 20, 256 << 20)
QUICK_P2P_SIZES_BYTES = (12 << 10, 768 << 10, 16 << 20)

_BATCH_BYTES = 64 << 20  # a timed batch moves about this much, capped below
_MAX_BATCH = 50
_MIN_BATCH = 2
_LARGE_BYTES = 64 << 20  # sizes from here get fewer repeats: each copy already takes ms
_VERIFY_BYTES = 16 << 20
_PATTERN_SEED = 20240607


def measure_p2p_pair(
    a: torch.device,
    b: torch.device,
    *,
    sizes_bytes: Sequence[int] = P2P_SIZES_BYTES,
    repeats: int = 5,
    large_repeats: int = 3,
) -> P2PResult:
    """Copy between `a` and `b` both ways at each size; verify a known pattern each way.

    Devices carry their index (cuda:0, cuda:1); on the CPU (cpu:0, cpu:1) the same code
    times plain memory copies, for tests.
    """
    import torch

    if a.index is None or b.index is None:
        raise ValueError(f"devices need an index, got {a} and {b}")
    largest = max(sizes_bytes)
    # Per device: a buffer sent from and one received into, sliced for each size.
    buffers = {
        device: (
            torch.ones(largest, dtype=torch.uint8, device=device),
            torch.empty(largest, dtype=torch.uint8, device=device),
        )
        for device in (a, b)
    }
    verified = _copy_verifies(a, b) and _copy_verifies(b, a)
    series: dict[tuple[torch.device, torch.device], list[BandwidthPoint]] = {(a, b): [], (b, a): []}
    for size in sorted(sizes_bytes):
        for src, dst in series:
            send, recv = buffers[src][0][:size], buffers[dst][1][:size]
            times = time_per_call_us(
                src,
                partial(recv.copy_, send),
                iterations=max(_MIN_BATCH, min(_MAX_BATCH, _BATCH_BYTES // size)),
                repeats=large_repeats if size >= _LARGE_BYTES else repeats,
            )
            series[(src, dst)].append(bandwidth_point(size, times))
    return P2PResult(
        gpu_a=a.index,
        gpu_b=b.index,
        p2p_access_reported=_peer_access(a, b) and _peer_access(b, a),
        copy_verified=verified,
        a_to_b=series[(a, b)],
        b_to_a=series[(b, a)],
    )


def _peer_access(src: torch.device, dst: torch.device) -> bool:
    import torch

    if src.type != "cuda" or dst.type != "cuda":
        return False
    return bool(torch.cuda.can_device_access_peer(src, dst))


def _copy_verifies(src: torch.device, dst: torch.device) -> bool:
    """Copy a seeded random pattern from src to dst and compare it, read back through the host."""
    import torch

    generator = torch.Generator().manual_seed(_PATTERN_SEED)
    pattern = torch.randint(0, 256, (_VERIFY_BYTES,), dtype=torch.uint8, generator=generator)
    on_src = pattern.to(src)
    on_dst = torch.zeros_like(pattern, device=dst)
    on_dst.copy_(on_src)
    return bool(torch.equal(on_dst.cpu(), pattern))
