"""Host facts from procfs and sysfs: CPUs, NUMA layout, memory, kernel.

Serving performance depends on which NUMA node a GPU's feeding CPUs and memory sit on, and
on whether this process is confined to a few CPUs; these are the facts the verdicts use.
Everything is read under `root`, so a synthetic tree in a test stands in for a machine.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servelab.probe.sysfs import list_dir, parse_cpulist, read_text

__all__ = ["HostFacts", "NumaNode", "read_host"]

_NODE_DIR = "/sys/devices/system/node"
_CPU_DIR = "/sys/devices/system/cpu"
_NODE_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s*kB", re.MULTILINE)
_MEMTOTAL = re.compile(r"^MemTotal:\s+(\d+)\s*kB", re.MULTILINE)


class NumaNode(BaseModel):
    """One NUMA node: its CPUs, its distance to every node, its memory."""

    model_config = ConfigDict(extra="forbid")

    id: int
    cpus: list[int] = Field(description="CPUs of this node, from nodeN/cpulist.")
    distances: list[int] = Field(
        description="SLIT distance to node 0, 1, ... in order (10 = local), from nodeN/distance."
    )
    memory_bytes: int | None = Field(description="MemTotal of this node; None when unknown.")


class HostFacts(BaseModel):
    """The host as this process sees it; None where the system did not say."""

    model_config = ConfigDict(extra="forbid")

    hostname: str | None
    cpu_model: str | None = Field(description="'model name' (or 'Model'/'Hardware') of cpuinfo.")
    logical_cpus: int | None = Field(description="Online logical CPUs (hardware threads).")
    physical_cores: int | None = Field(description="Distinct (package, core) pairs.")
    sockets: int | None = Field(description="Distinct physical packages.")
    hypervisor_flag: bool = Field(description="The CPU reports the 'hypervisor' flag (x86).")
    memory_bytes: int | None = Field(description="MemTotal of /proc/meminfo.")
    numa_nodes: list[NumaNode] = Field(description="Empty when the kernel exposes no nodes.")
    kernel_release: str | None = Field(description="uname -r, e.g. '6.8.0-45-generic'.")
    kernel_version: str | None = Field(description="The /proc/version line.")
    affinity: list[int] | None = Field(
        description="CPUs this process may run on; None when not known (synthetic trees)."
    )
    infiniband_devices: list[str] | None = Field(
        default=None,
        description="RDMA devices in /sys/class/infiniband (InfiniBand or RoCE HCAs); "
        "None when the class is missing (no RDMA driver loaded).",
    )


def read_host(root: Path = Path("/"), *, affinity: list[int] | None = None) -> HostFacts:
    """Read the host's facts under `root`.

    `affinity` defaults to this process's own CPU affinity, but only when `root` is the live
    system: for any other root it cannot be observed, so tests pass it.
    """
    blocks = _cpuinfo_blocks(read_text(root, "/proc/cpuinfo") or "")
    if affinity is None and root == Path("/") and hasattr(os, "sched_getaffinity"):
        affinity = sorted(os.sched_getaffinity(0))
    cores, sockets = _topology(root, blocks)
    return HostFacts(
        hostname=read_text(root, "/proc/sys/kernel/hostname") or None,
        cpu_model=_cpu_model(blocks),
        logical_cpus=_logical_cpus(root, blocks),
        physical_cores=cores,
        sockets=sockets,
        hypervisor_flag=any("hypervisor" in b.get("flags", "").split() for b in blocks),
        memory_bytes=_kb_field(read_text(root, "/proc/meminfo"), _MEMTOTAL),
        numa_nodes=_numa_nodes(root),
        kernel_release=read_text(root, "/proc/sys/kernel/osrelease") or None,
        kernel_version=read_text(root, "/proc/version") or None,
        affinity=sorted(set(affinity)) if affinity is not None else None,
        infiniband_devices=list_dir(root, "/sys/class/infiniband"),
    )


def _cpuinfo_blocks(text: str) -> list[dict[str, str]]:
    """cpuinfo as one dict per blank-line separated block (x86: one per processor)."""
    blocks: list[dict[str, str]] = []
    for chunk in re.split(r"\n\s*\n", text):
        block: dict[str, str] = {}
        for line in chunk.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                block.setdefault(key.strip(), value.strip())
        if block:
            blocks.append(block)
    return blocks


def _cpu_model(blocks: list[dict[str, str]]) -> str | None:
    # x86 says "model name"; some ARM boards only give the board ("Model") or SoC ("Hardware").
    for key in ("model name", "Model", "Hardware"):
        for block in blocks:
            if block.get(key):
                return block[key]
    return None


def _processors(blocks: list[dict[str, str]]) -> list[dict[str, str]]:
    return [b for b in blocks if b.get("processor", "").isdigit()]


def _logical_cpus(root: Path, blocks: list[dict[str, str]]) -> int | None:
    if count := len(_processors(blocks)):
        return count
    online = _cpulist_file(root, f"{_CPU_DIR}/online")
    return len(online) if online else None


def _topology(root: Path, blocks: list[dict[str, str]]) -> tuple[int | None, int | None]:
    """(physical cores, sockets) from cpuinfo; from sysfs topology where cpuinfo lacks them."""
    procs = _processors(blocks)
    pairs: set[tuple[str, str]] = set()
    if procs and all("physical id" in b and "core id" in b for b in procs):
        pairs = {(b["physical id"], b["core id"]) for b in procs}
    else:
        # ARM and other architectures keep the topology only in sysfs.
        for cpu in _cpulist_file(root, f"{_CPU_DIR}/online") or []:
            package = read_text(root, f"{_CPU_DIR}/cpu{cpu}/topology/physical_package_id")
            core = read_text(root, f"{_CPU_DIR}/cpu{cpu}/topology/core_id")
            if package is None or core is None:
                return None, None
            pairs.add((package, core))
    if not pairs:
        return None, None
    return len(pairs), len({package for package, _ in pairs})


def _numa_nodes(root: Path) -> list[NumaNode]:
    ids = sorted(
        int(name[4:])
        for name in list_dir(root, _NODE_DIR) or []
        if name.startswith("node") and name[4:].isdigit()
    )
    nodes: list[NumaNode] = []
    for node in ids:
        base = f"{_NODE_DIR}/node{node}"
        distance = read_text(root, f"{base}/distance") or ""
        nodes.append(
            NumaNode(
                id=node,
                cpus=_cpulist_file(root, f"{base}/cpulist") or [],
                distances=[int(d) for d in distance.split() if d.lstrip("-").isdigit()],
                memory_bytes=_kb_field(read_text(root, f"{base}/meminfo"), _NODE_MEMTOTAL),
            )
        )
    return nodes


def _cpulist_file(root: Path, path: str) -> list[int] | None:
    text = read_text(root, path)
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def _kb_field(text: str | None, pattern: re.Pattern[str]) -> int | None:
    match = pattern.search(text or "")
    return int(match.group(1)) * 1024 if match else None
