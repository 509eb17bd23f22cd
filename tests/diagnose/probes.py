"""A probe document of the story's VM: eight RTX PRO 6000 without GPU peer-to-peer.

The GPU facts are the hand-written recording the probe tests use (`vm_8gpu_no_p2p.json`:
P2P NS between every pair, a flat PHB tree, NUMA hidden) and their verdicts come from the
probe's own `gpu_verdicts`; the copies are the story's measurements (a 12 KB copy in
13.7 µs, 0.90 GB/s; 786 KB in 40 µs), judged by `comm_verdicts` against PCIe Gen5 x16.
Only what `diagnose` and the model's calibration read is filled in.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from servelab.model import gpu_by_slug
from servelab.probe.comm.results import BandwidthPoint, CommResults, CudaDevice, P2PResult
from servelab.probe.comm_verdicts import comm_verdicts
from servelab.probe.gpu_verdicts import gpu_verdicts
from tests.probe.test_gpus import inventory, load, vm_sysfs

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
STORY_COPIES_US = {12 * 1024: 13.7, 48 * 1024: 18.0, 192 * 1024: 24.0, 768 * 1024: 40.0}
"""Copy time by size between two GPUs of the story's VM, staged through the host."""


def _points() -> list[BandwidthPoint]:
    return [
        BandwidthPoint(
            size_bytes=size,
            time_us=time_us,
            min_time_us=time_us * 0.98,
            max_time_us=time_us * 1.05,
            bandwidth_gb_s=size / time_us / 1e3,
        )
        for size, time_us in STORY_COPIES_US.items()
    ]


def story_vm_probe(folder: Path, *, with_facts: bool = False) -> Path:
    """Write the story VM's probe.json into `folder` (which holds a synthetic sysfs);
    `with_facts` adds the NVML facts (GPUs, pairs) and a host without InfiniBand."""
    gpus = inventory(load("vm_8gpu_no_p2p.json"), vm_sysfs(folder / "sysfs"))
    devices = [
        CudaDevice(
            index=i,
            name=GPU_NAME,
            uuid=gpu.uuid or f"GPU-{i}",
            compute_capability="12.0",
            catalogue_slug="rtx-pro-6000",
        )
        for i, gpu in enumerate(gpus.gpus)
    ]
    pairs = [
        P2PResult(
            gpu_a=a,
            gpu_b=b,
            p2p_access_reported=False,
            copy_verified=True,
            a_to_b=_points(),
            b_to_a=_points(),
        )
        for a, b in itertools.combinations(range(len(devices)), 2)
    ]
    comm = CommResults(devices=devices, p2p=pairs)
    link = gpu_by_slug("rtx-pro-6000").pcie_bandwidth_bytes_s
    links = {(p.gpu_a, p.gpu_b): link for p in pairs}
    verdicts = gpu_verdicts(gpus, process_cpus=list(range(64)), in_vm=True)
    verdicts += comm_verdicts(comm, links)
    document = {
        "schema": "servelab.probe/1",
        "comm": comm.model_dump(mode="json"),
        "verdicts": [v.model_dump(mode="json") for v in verdicts],
    }
    if with_facts:
        document["gpus"] = gpus.model_dump(mode="json")
        document["host"] = {"infiniband_devices": []}
    path = folder / "probe.json"
    path.write_text(json.dumps(document, indent=2))
    return path
