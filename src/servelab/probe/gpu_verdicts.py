"""Verdicts on the GPUs and how they connect: what each fact costs a serving deployment.

Pair findings are grouped, so eight GPUs without P2P give one verdict that lists 28 pairs, not
28 verdicts. Everything here reads the idle machine: clocks and PCIe links are as read now,
and `servelab probe --comm` measures what the paths actually deliver.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from servelab.probe.arch_verdicts import architecture_verdicts
from servelab.probe.gpus import GpuFacts, GpuInventory, GpuPair
from servelab.probe.sysfs import format_cpulist
from servelab.probe.verdict import Severity, Verdict

__all__ = ["gpu_verdicts"]

_MEASURE = "Measure what the paths deliver with `servelab probe --comm`."

_P2P_LABEL_MEANINGS = {
    "CNS": "the chipset, or a VM's virtual root complex, does not support P2P",
    "GNS": "the GPU does not support P2P",
    "TNS": "the topology between them (e.g. across I/O hubs) does not support P2P",
    "DIS": "P2P is disabled by a driver registry key",
    "NS": "not supported on this path (in a VM: the hypervisor, IOMMU or ACS blocks peer DMA)",
    "U": "unknown",
}

# Clock event reasons that are normal: idle, or clocks an administrator chose.
_BENIGN_REASONS = frozenset({"GpuIdle", "ApplicationsClocksSetting"})
# Hardware protection and thermal limits: the GPU is being slowed hard, right now.
_SLOWDOWN_REASONS = frozenset(
    {"HwSlowdown", "HwThermalSlowdown", "SwThermalSlowdown", "HwPowerBrakeSlowdown"}
)
_REASON_MEANINGS = {
    "SwPowerCap": "clocks held down to stay under the power limit",
    "HwSlowdown": "hardware slowdown (temperature, power brake or an external signal)",
    "SyncBoost": "held to the clock of its sync-boost group",
    "SwThermalSlowdown": "the driver lowered clocks: GPU or memory temperature over its limit",
    "HwThermalSlowdown": "hardware thermal protection cut the clocks",
    "HwPowerBrakeSlowdown": "an external power brake (power supply or chassis) cut the clocks",
    "DisplayClockSetting": "held below the display clock setting",
    "BoardLimit": "held by a board limit",
    "Reliability": "held by a reliability limit",
}

_VM_VIRTUALIZATION = frozenset({"passthrough", "vgpu"})


def gpu_verdicts(
    inventory: GpuInventory, *, process_cpus: list[int] | None = None, in_vm: bool = False
) -> list[Verdict]:
    """The GPU findings, worst first; `process_cpus` is where the serving process may run."""
    vm = in_vm or any(gpu.virtualization_mode in _VM_VIRTUALIZATION for gpu in inventory.gpus)
    verdicts = _p2p(inventory.pairs)
    # A VM's flat PHB tree is the hypervisor's, not the machine's: say that instead of PHB.
    flat = _flat_topology(inventory, vm)
    verdicts += flat or _topology(inventory.pairs)
    verdicts += _numa_unknown(inventory.gpus, vm)
    verdicts += _cpu_affinity(inventory.gpus, process_cpus)
    verdicts += _power_limit(inventory.gpus)
    verdicts += _clock_events(inventory.gpus)
    verdicts += _pcie_link(inventory.gpus)
    verdicts += _ecc(inventory.gpus)
    verdicts += _mig(inventory.gpus)
    verdicts += architecture_verdicts(inventory.gpus)
    return sorted(verdicts, key=lambda verdict: verdict.severity.rank)


def _p2p_usable(pair: GpuPair) -> bool:
    return (pair.p2p_read == "OK" and pair.p2p_write == "OK") or pair.p2p_nvlink == "OK"


def _p2p(pairs: list[GpuPair]) -> list[Verdict]:
    if not pairs:
        return []
    known = [pair for pair in pairs if pair.p2p_read is not None or pair.p2p_write is not None]
    failing = [pair for pair in known if not _p2p_usable(pair)]
    if not failing:
        return [_p2p_ok(pairs)] if len(known) == len(pairs) else []
    groups: dict[tuple[str | None, str | None], list[GpuPair]] = defaultdict(list)
    for pair in failing:
        groups[(pair.p2p_read, pair.p2p_write)].append(pair)
    evidence = [
        f"P2P read {read}, write {write}: {_pair_list(group)}"
        for (read, write), group in groups.items()
    ]
    labels = sorted({label for key in groups for label in key if label in _P2P_LABEL_MEANINGS})
    evidence += [f"{label}: {_P2P_LABEL_MEANINGS[label]}" for label in labels]
    topologies = Counter(pair.topology or "?" for pair in failing)
    evidence.append(
        "topology of these pairs: "
        + ", ".join(f"{label} ×{count}" for label, count in sorted(topologies.items()))
    )
    without_nvlink = any(pair.nvlink_count == 0 for pair in failing)
    meaning = (
        "Without peer-to-peer DMA, NCCL cannot copy directly between these GPUs: it stages "
        "every transfer through host memory (SHM transport, or NET), so each all-reduce crosses "
        "PCIe twice through the host. Small-message latency goes from a few µs to 10+ µs (on a "
        "KVM VM with P2P NS everywhere a 12 KB GPU-to-GPU copy took 13.7 µs, 0.90 GB/s), and "
        "decode pays it on every layer of every step: tensor parallelism does two all-reduces "
        "per layer, 156 per token for a 78-layer model."
    )
    if not without_nvlink:
        meaning += (
            " These GPUs have NVLink, yet NVML says P2P is not OK: on NVSwitch systems that is "
            "usually nvidia-fabricmanager not running or the GPUs in different NVLink partitions."
        )
    islands = _p2p_islands(pairs)
    if islands:
        where = "; here: " + " and ".join(
            "GPUs " + ",".join(str(index) for index in island) for island in islands
        )
    else:
        where = "; here no two GPUs have it, so any tensor-parallel size above 1 pays this"
    action = (
        f"Keep each tensor-parallel group within GPUs that have P2P OK among themselves{where}. "
        "On a VM, ask the provider for GPU passthrough with P2P enabled (ACS off on the PCIe "
        "switches and root ports, peer DMA allowed through the IOMMU) or a bare-metal instance; "
        "on your own host an LXC container, unlike a KVM guest, sees the real PCIe tree. "
        "NCCL_P2P_LEVEL does not help when the hardware path says NS: it only chooses among "
        f"paths that support P2P. {_MEASURE}"
    )
    if "DIS" in labels:
        action += " DIS: check the nvidia driver's registry keys (NVreg_RegistryDwords)."
    if not without_nvlink:
        action += " Check `systemctl status nvidia-fabricmanager` and `nvidia-smi nvlink -s`."
    return [
        Verdict(
            code="p2p-not-supported",
            severity=Severity.CRITICAL if without_nvlink else Severity.WARNING,
            title=f"No GPU peer-to-peer (P2P) for {len(failing)} of {len(pairs)} GPU pairs",
            evidence=evidence,
            meaning=meaning,
            action=action,
            subjects=[pair.name for pair in failing],
        )
    ]


def _p2p_ok(pairs: list[GpuPair]) -> Verdict:
    gpus = {index for pair in pairs for index in (pair.a, pair.b)}
    topologies = Counter(pair.topology or "?" for pair in pairs)
    return Verdict(
        code="p2p-ok",
        severity=Severity.OK,
        title=f"GPU peer-to-peer (P2P) OK between all {len(gpus)} GPUs",
        evidence=[
            f"P2P OK for all {len(pairs)} pairs",
            "topology: "
            + ", ".join(f"{label} ×{count}" for label, count in sorted(topologies.items())),
        ],
        meaning=(
            "NCCL can copy directly between every pair of GPUs (its P2P transport, over NVLink "
            "or PCIe), without staging through host memory."
        ),
        action=f"Nothing to fix. {_MEASURE}",
        subjects=[f"gpu{index}" for index in sorted(gpus)],
    )


def _p2p_islands(pairs: list[GpuPair]) -> list[list[int]]:
    """Groups of two or more GPUs with P2P OK between every two of them.

    Connected groups that are not complete are left out rather than guessed at.
    """
    usable = {(pair.a, pair.b) for pair in pairs if _p2p_usable(pair)}
    neighbours: dict[int, set[int]] = defaultdict(set)
    for a, b in usable:
        neighbours[a].add(b)
        neighbours[b].add(a)
    islands: list[list[int]] = []
    seen: set[int] = set()
    for start in sorted(neighbours):
        if start in seen:
            continue
        group, frontier = {start}, [start]
        while frontier:
            for peer in neighbours[frontier.pop()] - group:
                group.add(peer)
                frontier.append(peer)
        seen |= group
        members = sorted(group)
        complete = all(
            (a, b) in usable or (b, a) in usable
            for i, a in enumerate(members)
            for b in members[i + 1 :]
        )
        if complete:
            islands.append(members)
    return islands


_TOPOLOGY_MEANINGS = {
    "SYS": (
        Severity.WARNING,
        "Traffic between these GPUs crosses PCIe and the inter-socket link (UPI or Infinity "
        "Fabric) between NUMA nodes: P2P is slower than within a node (53.8 GB/s within a NUMA "
        "node against 40.2 GB/s across, on one 8-GPU PCIe box), and every all-reduce of a "
        "tensor-parallel group spanning sockets runs at the cross-socket pace.",
    ),
    "PHB": (
        Severity.WARNING,
        "Traffic between these GPUs goes up through the CPU's PCIe host bridge instead of a "
        "PCIe switch: P2P runs at what the root complex forwards, often below the link rate, "
        "with more latency per transfer; an all-reduce runs at the pace of its slowest pair.",
    ),
    "NODE": (
        Severity.INFO,
        "Traffic between these GPUs crosses between PCIe host bridges within one NUMA node: "
        "usually close to PHB, worth knowing when choosing which GPUs form a group.",
    ),
}


def _topology(pairs: list[GpuPair]) -> list[Verdict]:
    by_label: dict[str, list[GpuPair]] = defaultdict(list)
    for pair in pairs:
        if pair.nvlink_count == 0 and pair.pcie_topology in _TOPOLOGY_MEANINGS:
            by_label[pair.pcie_topology].append(pair)
    verdicts = []
    for label, group in by_label.items():
        severity, meaning = _TOPOLOGY_MEANINGS[label]
        verdicts.append(
            Verdict(
                code=f"topology-{label.lower()}",
                severity=severity,
                title=f"{len(group)} GPU pairs connect through {label}, without NVLink",
                evidence=[f"{label}: {_pair_list(group)}"],
                meaning=meaning,
                action=(
                    "Prefer tensor-parallel groups of GPUs behind one PCIe switch (PIX, PXB), then "
                    "within one NUMA node; if a group must span sockets, consider tensor parallel "
                    f"within a socket and data or pipeline parallel across. {_MEASURE}"
                ),
                subjects=[pair.name for pair in group],
            )
        )
    return verdicts


def _flat_topology(inventory: GpuInventory, vm: bool) -> list[Verdict]:
    # NVLink pairs do not go through the PCIe tree: its shape does not matter to them.
    labels = [
        pair.pcie_topology
        for pair in inventory.pairs
        if pair.pcie_topology is not None and pair.nvlink_count == 0
    ]
    if not vm or not labels:
        return []
    all_phb = all(label == "PHB" for label in labels)
    flat = len(inventory.gpus) >= 3 and len(set(labels)) == 1
    if not (all_phb or flat):
        return []
    modes = Counter(gpu.virtualization_mode or "?" for gpu in inventory.gpus)
    return [
        Verdict(
            code="vm-flat-topology",
            severity=Severity.WARNING,
            title="A VM shows a flat GPU topology: the real PCIe tree is hidden",
            evidence=[
                f"every one of {len(labels)} GPU pairs reads {labels[0]}",
                "NVML virtualization mode: "
                + ", ".join(f"{mode} ×{count}" for mode, count in sorted(modes.items())),
            ],
            meaning=(
                "In a VM the hypervisor presents the GPUs on its own virtual PCIe tree: the level "
                "NVML reports says where the virtual root complex is, not whether two GPUs share a "
                "switch or sit on different sockets. Neither NCCL nor you can then place ranks by "
                "topology, and peer-to-peer DMA is commonly blocked (a 12 KB GPU-to-GPU copy took "
                "13.7 µs on such a VM)."
            ),
            action=(
                "Ask the provider for a shape that passes the PCIe topology and NUMA through, or "
                "for bare metal; on your own host an LXC container sees the real tree (P2P went "
                "from NS everywhere to 53.8 GB/s within a NUMA node that way, though that alone "
                f"did not make serving faster). {_MEASURE}"
            ),
            subjects=[pair.name for pair in inventory.pairs],
        )
    ]


def _numa_unknown(gpus: list[GpuFacts], vm: bool) -> list[Verdict]:
    unknown = [gpu for gpu in gpus if gpu.numa_node == -1]
    where = "the VM does not expose it" if vm else "the BIOS does not publish it (ACPI SRAT/_PXM)"
    return _on_gpus(
        unknown,
        code="numa-unknown",
        severity=Severity.WARNING,
        title="NUMA node unknown for {gpus}",
        evidence=[f"{_gpu(gpu)}: numa_node = -1" for gpu in unknown],
        meaning=(
            f"The kernel does not know which NUMA node these GPUs hang off ({where}). Nothing "
            "can then place a GPU's serving process and its host buffers (pinned staging "
            "memory, NCCL's SHM transport, KV offload) next to it, and on a two-socket machine "
            "about half the host-to-GPU traffic may cross the inter-socket link."
        ),
        action=(
            "Find the real node on the host (`nvidia-smi topo -m`, NUMA Affinity column). On "
            "bare metal enable NUMA/SRAT reporting in the BIOS; on a VM ask for a NUMA-aware "
            "shape (vNUMA that follows the GPUs), or bind by hand with `numactl`."
        ),
    )


def _cpu_affinity(gpus: list[GpuFacts], process_cpus: list[int] | None) -> list[Verdict]:
    if not process_cpus:
        return []
    allowed = set(process_cpus)
    remote = [gpu for gpu in gpus if gpu.local_cpus and not allowed <= set(gpu.local_cpus)]
    evidence = [f"this process may run on CPUs {format_cpulist(process_cpus)}"]
    evidence += [
        f"{_gpu(gpu)}: local CPUs {format_cpulist(gpu.local_cpus or [])}, NUMA node {gpu.numa_node}"
        for gpu in remote
    ]
    return _on_gpus(
        remote,
        code="cpu-affinity-not-local",
        severity=Severity.WARNING,
        title="The process may run on CPUs not local to {gpus}",
        evidence=evidence,
        meaning=(
            "A serving process scheduled on a remote socket launches kernels and copies to "
            "its GPU across the inter-socket link, and its host buffers (NCCL's SHM staging, "
            "pinned memory) may live on the wrong node: added latency on every decode step."
        ),
        action=(
            "Run each GPU's worker on that GPU's local CPUs: `numactl --cpunodebind=<node> "
            "--membind=<node> <command>` or `taskset -c <local CPUs> <command>`; with one "
            "process per GPU, bind each rank to its own GPU's node."
        ),
    )


def _power_limit(gpus: list[GpuFacts]) -> list[Verdict]:
    lowered: list[GpuFacts] = []
    evidence: list[str] = []
    for gpu in gpus:
        limit, default = gpu.power_limit_w, gpu.default_power_limit_w
        if limit is None or not default or limit >= default - 0.5:
            continue
        lowered.append(gpu)
        evidence.append(
            f"{_gpu(gpu)}: enforced {limit:.0f} W of {default:.0f} W default "
            f"({100 * limit / default:.0f}%)"
        )
    return _on_gpus(
        lowered,
        code="power-limit-below-default",
        severity=Severity.WARNING,
        title="Power limit below default on {gpus}",
        evidence=evidence,
        meaning=(
            "The GPU lowers its clocks to stay under the cap: compute-bound work (prefill, "
            "large decode batches) slows roughly in proportion to the clock it loses; "
            "small-batch decode, bound by memory bandwidth, loses less."
        ),
        action=(
            "Restore it with `sudo nvidia-smi -i <index> -pl <default W>` (until reboot); on "
            "a cloud VM the provider may set it, so ask. `nvidia-smi -q -d POWER` shows the "
            "limits."
        ),
    )


def _clock_events(gpus: list[GpuFacts]) -> list[Verdict]:
    slowed: list[GpuFacts] = []
    limited: list[GpuFacts] = []
    for gpu in gpus:
        active = set(gpu.clock_event_reasons) - _BENIGN_REASONS
        if active & _SLOWDOWN_REASONS:
            slowed.append(gpu)
        elif active:
            limited.append(gpu)
    slowdown = _on_gpus(
        slowed,
        code="clock-slowdown",
        severity=Severity.CRITICAL,
        title="Hardware or thermal slowdown active on {gpus}",
        evidence=_reason_evidence(slowed),
        meaning=(
            "Protection is cutting the clocks now, at idle: under load throughput drops "
            "sharply and unevenly, and one slow GPU holds back its whole tensor-parallel "
            "group at every all-reduce."
        ),
        action=(
            "Check cooling, airflow and power delivery: `nvidia-smi -q -d "
            "PERFORMANCE,TEMPERATURE,POWER`, the BMC's sensor and event logs, and `dmesg` "
            "for Xid messages."
        ),
    )
    return slowdown + _on_gpus(
        limited,
        code="clock-limited",
        severity=Severity.WARNING,
        title="Clocks held below maximum on {gpus}",
        evidence=_reason_evidence(limited),
        meaning=(
            "The GPU runs below its maximum clock for a reason other than being idle; "
            "compute-bound phases (prefill, large batches) slow with the clock."
        ),
        action=(
            "Look at `nvidia-smi -q -d PERFORMANCE` for the reason; for SwPowerCap compare "
            "the power limit with the default; read again under load."
        ),
    )


def _reason_evidence(gpus: list[GpuFacts]) -> list[str]:
    lines = []
    for gpu in gpus:
        reasons = [reason for reason in gpu.clock_event_reasons if reason not in _BENIGN_REASONS]
        described = "; ".join(
            f"{reason} ({_REASON_MEANINGS.get(reason, 'not a reason servelab knows')})"
            for reason in reasons
        )
        lines.append(f"{_gpu(gpu)}: SM {gpu.sm_clock_mhz}/{gpu.sm_clock_max_mhz} MHz; {described}")
    return lines


def _pcie_link(gpus: list[GpuFacts]) -> list[Verdict]:
    below = [
        gpu
        for gpu in gpus
        if _below(gpu.pcie_gen, gpu.pcie_gen_max) or _below(gpu.pcie_width, gpu.pcie_width_max)
    ]
    return _on_gpus(
        below,
        code="pcie-link-below-max",
        severity=Severity.INFO,
        title="PCIe link below its maximum on {gpus} (read at idle)",
        evidence=[
            f"{_gpu(gpu)}: Gen{gpu.pcie_gen} x{gpu.pcie_width} of "
            f"Gen{gpu.pcie_gen_max} x{gpu.pcie_width_max}"
            for gpu in below
        ],
        meaning=(
            "GPUs drop their PCIe link to a lower generation when idle to save power, so this "
            "is only meaningful under load. If it stays low under load, host-to-GPU copies "
            "and, without P2P, every GPU-to-GPU transfer run at the lower rate (Gen1 carries "
            "about 1/16 of Gen5 per lane)."
        ),
        action=(
            "Read it again under load (`nvidia-smi -q -d PCIE` while serving); if it stays "
            "low, check the slot, riser and the BIOS PCIe speed setting."
        ),
    )


def _ecc(gpus: list[GpuFacts]) -> list[Verdict]:
    uncorrected = [gpu for gpu in gpus if (gpu.ecc_errors_uncorrected or 0) > 0]
    corrected = [gpu for gpu in gpus if (gpu.ecc_errors_corrected or 0) > 0]
    lost = _on_gpus(
        uncorrected,
        code="ecc-uncorrected",
        severity=Severity.CRITICAL,
        title="Uncorrected memory (ECC) errors on {gpus}",
        evidence=[
            f"{_gpu(gpu)}: {gpu.ecc_errors_uncorrected} uncorrected since the driver loaded"
            for gpu in uncorrected
        ],
        meaning=(
            "Data in GPU memory was lost: the processes using it were killed or got wrong "
            "results, and the affected memory is retired or remapped only at the next "
            "reset. A serving replica on this GPU can crash or return garbage."
        ),
        action=(
            "Drain the GPU and reset it (`nvidia-smi -r -i <index>`); check "
            "`nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT` and `dmesg` for Xid 48/63/94; "
            "if errors come back, have the GPU replaced."
        ),
    )
    return lost + _on_gpus(
        corrected,
        code="ecc-corrected",
        severity=Severity.INFO,
        title="Corrected memory (ECC) errors on {gpus}",
        evidence=[
            f"{_gpu(gpu)}: {gpu.ecc_errors_corrected} corrected since the driver loaded"
            for gpu in corrected
        ],
        meaning=(
            "ECC fixed them, so no data was lost and serving is unaffected; a count that "
            "keeps rising can announce failing memory."
        ),
        action="Watch the count over days (`nvidia-smi -q -d ECC`).",
    )


def _mig(gpus: list[GpuFacts]) -> list[Verdict]:
    mig = [gpu for gpu in gpus if gpu.mig_enabled]
    return _on_gpus(
        mig,
        code="mig-enabled",
        severity=Severity.INFO,
        title="MIG enabled on {gpus}",
        evidence=[f"{_gpu(gpu)}: MIG mode enabled" for gpu in mig],
        meaning=(
            "The GPU is split into MIG instances: a serving engine sees one instance, with "
            "its share of SMs, memory and bandwidth, and there is no P2P between instances."
        ),
        action=(
            "For whole-GPU serving disable it: `sudo nvidia-smi -i <index> -mig 0`, then reset "
            "the GPU."
        ),
    )


def _on_gpus(
    gpus: list[GpuFacts],
    *,
    code: str,
    severity: Severity,
    title: str,
    evidence: list[str],
    meaning: str,
    action: str,
) -> list[Verdict]:
    """One verdict on the GPUs a finding holds for, none when it holds for none: `title`'s
    {gpus} becomes their count ('2 GPUs'), and each GPU is a subject."""
    if not gpus:
        return []
    return [
        Verdict(
            code=code,
            severity=severity,
            title=title.format(gpus=_count(gpus, "GPU")),
            evidence=evidence,
            meaning=meaning,
            action=action,
            subjects=[_name(gpu) for gpu in gpus],
        )
    ]


def _below(value: int | None, maximum: int | None) -> bool:
    return value is not None and maximum is not None and value < maximum


def _name(gpu: GpuFacts) -> str:
    return f"gpu{gpu.nvml_index}"


def _gpu(gpu: GpuFacts) -> str:
    return f"{_name(gpu)} ({gpu.pci_bus_id})" if gpu.pci_bus_id else _name(gpu)


def _count(items: list[GpuFacts], noun: str) -> str:
    return f"{len(items)} {noun}" + ("" if len(items) == 1 else "s")


def _pair_list(pairs: list[GpuPair]) -> str:
    """The pairs by name, or 'every pair among GPUs 0,1,2' when that is what they are."""
    gpus = sorted({index for pair in pairs for index in (pair.a, pair.b)})
    if len(gpus) > 2 and len(pairs) == len(gpus) * (len(gpus) - 1) // 2:
        listed = "every pair among GPUs " + ",".join(str(index) for index in gpus)
    else:
        listed = ", ".join(pair.name for pair in pairs)
    return f"{listed} ({len(pairs)} pairs)"
