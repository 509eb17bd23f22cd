"""Verdicts on the host around the GPUs: virtualization, NUMA, and whether any GPU is visible."""

from __future__ import annotations

from servelab.probe.host import HostFacts
from servelab.probe.verdict import Severity, Verdict
from servelab.probe.virt import VirtFacts

__all__ = ["host_verdicts", "no_gpu_verdict"]


def host_verdicts(host: HostFacts, virt: VirtFacts) -> list[Verdict]:
    """What the host's shape means for serving: a VM or container, a NUMA layout."""
    verdicts: list[Verdict] = []
    if virt.vm is not None:
        verdicts.append(
            Verdict(
                code="virtual-machine",
                severity=Severity.INFO,
                title=f"Running in a virtual machine: {virt.summary}",
                evidence=virt.evidence,
                meaning=(
                    "A hypervisor sits between the GPUs and the PCIe fabric: it can hide the "
                    "real topology (every pair reads PHB), block peer-to-peer DMA between GPUs "
                    "(the IOMMU and ACS), and hide NUMA locality. The GPU verdicts say which "
                    "of these happened here."
                ),
                action=(
                    "Check the GPU pair verdicts; when P2P or NUMA is missing, ask the provider "
                    "for GPU passthrough with P2P enabled, or a bare-metal instance."
                ),
                subjects=["host"],
            )
        )
    elif virt.container is not None:
        verdicts.append(
            Verdict(
                code="container",
                severity=Severity.INFO,
                title=f"Running in a container: {virt.summary}",
                evidence=virt.evidence,
                meaning=(
                    "A container shares the host's kernel and PCIe tree, so the GPU facts are "
                    "the machine's; its CPU and memory limits may still be narrower than the "
                    "host's."
                ),
                action="Give the serving container the CPUs local to its GPUs (--cpuset-cpus).",
                subjects=["host"],
            )
        )
    if len(host.numa_nodes) > 1 and host.affinity is not None:
        nodes = [n.id for n in host.numa_nodes if set(host.affinity) & set(n.cpus)]
        if len(nodes) > 1:
            verdicts.append(
                Verdict(
                    code="process-spans-numa-nodes",
                    severity=Severity.INFO,
                    title=f"This process may run on CPUs of {len(nodes)} NUMA nodes",
                    evidence=[f"CPU affinity covers NUMA nodes {', '.join(map(str, nodes))}"],
                    meaning=(
                        "An unpinned engine's scheduler and tokenizer threads can land on the "
                        "node far from their GPU, adding a cross-socket hop to every host-device "
                        "copy and kernel launch."
                    ),
                    action=(
                        "Pin each engine process to its GPU's NUMA node: "
                        "numactl --cpunodebind=N --membind=N."
                    ),
                    subjects=["host"],
                )
            )
    return verdicts


def no_gpu_verdict(reason: str | None) -> Verdict:
    """The verdict of a machine where NVML sees no NVIDIA GPU (normal for a CPU box)."""
    return Verdict(
        code="no-nvidia-gpu",
        severity=Severity.WARNING,
        title="No NVIDIA GPU visible",
        evidence=[reason or "NVML reports 0 devices"],
        meaning=(
            "Only the host facts can be read: GPU, topology and P2P verdicts need an NVIDIA "
            "driver and at least one GPU."
        ),
        action=(
            "On a GPU machine: check that the NVIDIA driver is loaded (nvidia-smi) and, in a "
            "container, that the GPUs are passed in (--gpus all)."
        ),
        subjects=["host"],
    )
