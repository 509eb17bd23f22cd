"""The probe's result: one versioned document of facts, measurements and verdicts."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servelab.probe.comm.results import CommResults
from servelab.probe.cuda_init import CudaInit
from servelab.probe.gpus import GpuInventory
from servelab.probe.host import HostFacts
from servelab.probe.verdict import Verdict
from servelab.probe.virt import VirtFacts

__all__ = ["SCHEMA", "NvmlStatus", "ProbeReport"]

SCHEMA = "servelab.probe/1"


class NvmlStatus(BaseModel):
    """Whether NVML could be read, and why not."""

    model_config = ConfigDict(extra="forbid")

    available: bool
    reason: str | None = Field(default=None, description="Why NVML was not read, when it was not.")


class ProbeReport(BaseModel):
    """`servelab probe`'s document (`--json`, probe.json); verdicts sorted worst first."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default=SCHEMA, alias="schema")
    created_utc: str
    servelab_version: str
    duration_s: float = Field(description="Wall time of the whole probe, in seconds.")
    host: HostFacts
    virtualization: VirtFacts
    nvml: NvmlStatus
    gpus: GpuInventory | None = Field(description="None when NVML is unavailable.")
    cuda: CudaInit | None = Field(
        default=None, description="The CUDA driver check; None where no NVIDIA driver is."
    )
    comm: CommResults | None = Field(default=None, description="Only with --comm.")
    verdicts: list[Verdict]
