"""Time of the collectives a forward pass needs: latency + bytes / bandwidth, per link type.

An all-reduce over n ranks by a ring moves 2(n-1)/n of the buffer through each GPU's
link (reduce-scatter then all-gather, each (n-1)/n): time = latency + size x 2(n-1)/n /
busbw, the bus bandwidth nccl-tests reports. An all-gather moves (n-1)/n. The bus
bandwidth defaults to the link's datasheet bandwidth in one direction; the latency
defaults below are estimates, replaced by a probe's measured sweep when one is given.
"""

from __future__ import annotations

import itertools
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.model.calibration import AllReduceSample, Calibration
from servelab.model.gpus import GpuSpec

__all__ = [
    "ALLREDUCE_LATENCY_S",
    "SEND_LATENCY_S",
    "CommModel",
    "LinkKind",
    "comm_model",
]

LinkKind = Literal["nvlink", "pcie"]

ALLREDUCE_LATENCY_S: dict[str, float] = {
    # Small-message all-reduce on 8 NVLink/NVSwitch GPUs: vLLM's and SGLang's one-shot
    # custom all-reduce takes about 5 us, NCCL's LL protocol about 10-15 us; 8 us sits
    # between the two.
    "nvlink": 8e-6,
    # Over PCIe the engines fall back to NCCL for more than two GPUs (their custom
    # all-reduce needs NVLink or full P2P): a ring of 8 makes 2(n-1) = 14 hops of
    # 1.5-2 us each through PCIe switches and root complexes, about 25 us.
    "pcie": 25e-6,
}
"""Per-call latency of an all-reduce (and of an all-to-all: one synchronising round too)."""

SEND_LATENCY_S: dict[str, float] = {
    # One small peer copy plus the send/receive handshake of a pipeline boundary.
    "nvlink": 5e-6,
    "pcie": 8e-6,
}
"""Per-message latency of a point-to-point send between pipeline stages."""


class CommModel(BaseModel):
    """The link figures a deployment's collectives are timed with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    link: LinkKind
    link_bandwidth_bytes_s: float = Field(description="Per GPU and direction: sends, all-to-all.")
    allreduce_busbw_bytes_s: float = Field(description="All-reduce and all-gather bus bandwidth.")
    allreduce_latency_s: float
    send_latency_s: float
    measured_allreduce: tuple[AllReduceSample, ...] = Field(
        default=(), description="A probe's all-reduce sweep over `measured_world_size` ranks."
    )
    measured_world_size: int | None = None

    def allreduce_s(self, size_bytes: float, ranks: int) -> float:
        """One all-reduce of `size_bytes` per rank over `ranks` GPUs."""
        if ranks <= 1 or size_bytes <= 0:
            return 0.0
        if self.measured_allreduce and self.measured_world_size == ranks:
            return _interpolate(self.measured_allreduce, size_bytes)
        factor = 2 * (ranks - 1) / ranks
        return self.allreduce_latency_s + size_bytes * factor / self.allreduce_busbw_bytes_s

    def allgather_s(self, size_bytes: float, ranks: int) -> float:
        """One all-gather whose result is `size_bytes` on every rank."""
        if ranks <= 1 or size_bytes <= 0:
            return 0.0
        factor = (ranks - 1) / ranks
        return self.allreduce_latency_s + size_bytes * factor / self.allreduce_busbw_bytes_s

    def alltoall_s(self, sent_bytes: float) -> float:
        """One all-to-all in which each GPU sends `sent_bytes` to the others in total."""
        if sent_bytes <= 0:
            return 0.0
        return self.allreduce_latency_s + sent_bytes / self.link_bandwidth_bytes_s

    def send_s(self, size_bytes: float) -> float:
        """One point-to-point send of `size_bytes`."""
        if size_bytes <= 0:
            return 0.0
        return self.send_latency_s + size_bytes / self.link_bandwidth_bytes_s


def comm_model(gpu: GpuSpec, calibration: Calibration | None = None) -> CommModel:
    """Datasheet link figures of `gpu`, with whatever `calibration` measured in their place."""
    if gpu.nvlink_bandwidth_bytes_s:
        link: LinkKind = "nvlink"
        bandwidth = gpu.nvlink_bandwidth_bytes_s / 2  # NVIDIA quotes both directions
    else:
        link, bandwidth = "pcie", gpu.pcie_bandwidth_bytes_s
    allreduce_latency, send_latency = ALLREDUCE_LATENCY_S[link], SEND_LATENCY_S[link]
    measured: tuple[AllReduceSample, ...] = ()
    world: int | None = None
    if calibration is not None:
        bandwidth = calibration.link_bandwidth_bytes_s or bandwidth
        send_latency = calibration.send_latency_s or send_latency
    busbw = bandwidth
    if calibration is not None and calibration.allreduce:
        measured, world = calibration.allreduce, calibration.allreduce_world_size
        # For rank counts the sweep did not cover: its floor and its best bus bandwidth.
        allreduce_latency = min(s.time_s for s in measured)
        busbw = max(s.busbw_bytes_s for s in measured)
    return CommModel(
        link=link,
        link_bandwidth_bytes_s=bandwidth,
        allreduce_busbw_bytes_s=busbw,
        allreduce_latency_s=allreduce_latency,
        send_latency_s=send_latency,
        measured_allreduce=measured,
        measured_world_size=world,
    )


def _interpolate(samples: tuple[AllReduceSample, ...], size_bytes: float) -> float:
    """Measured time at `size_bytes`: linear between sizes, the floor below, algbw above."""
    first, last = samples[0], samples[-1]
    if size_bytes <= first.size_bytes:
        return first.time_s
    if size_bytes >= last.size_bytes:
        return last.time_s * size_bytes / last.size_bytes
    for low, high in itertools.pairwise(samples):
        if low.size_bytes <= size_bytes <= high.size_bytes:
            span = high.size_bytes - low.size_bytes
            weight = (size_bytes - low.size_bytes) / span if span else 0.0
            return low.time_s + weight * (high.time_s - low.time_s)
    return last.time_s
