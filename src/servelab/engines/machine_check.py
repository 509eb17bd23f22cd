"""An engine spec read against the machine it will run on: settings the probe contradicts.

The NCCL variables and the layout a launch carries are often copied from another
machine; each rule here compares one of them with what the probe found (P2P status
per GPU pair, NVLink and NVSwitch, NUMA nodes, InfiniBand devices, the GPU count) and
says what it costs and what to do. NCCL's own parsing is followed: `NCCL_P2P_LEVEL`
takes LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS or the legacy integers 0-5
(1 = PIX, 2 = PXB, 3 = PHB, 4 and up = SYS) and ignores anything else;
`NCCL_P2P_DISABLE` and `NCCL_SHM_DISABLE` act only on the value 1; channel counts are
capped at 64 (32 before NCCL 2.25) (NCCL src/graph/paths.cc, src/init.cc).

The probe is read as a document (a dict), so a partial one (only `comm`, or no
`gpus`) still gives the rules it has facts for; the rest are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.model import calibration_from_probe, deploy, throughput_curve
from servelab.model.gpus import gpu_for_nvml_name
from servelab.probe.verdict import Severity, Verdict

__all__ = ["ESTIMATE_BATCH", "ESTIMATE_LENGTHS", "machine_verdicts"]

_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
_LEGACY_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
# nvidia-smi's PCIe words as NCCL's path types: NODE (across host bridges of one NUMA
# node) is NCCL's PHB, SYS its SYS.
_SMI_TO_NCCL = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}
_MAX_CHANNELS = 64
_MAX_CHANNELS_BEFORE_2_25 = 32
ESTIMATE_BATCH = 64
ESTIMATE_LENGTHS = (1024, 256)
"""The model's estimate of another layout: 64 requests of 1,024 in / 256 out tokens."""


@dataclass(frozen=True)
class _Gpu:
    index: int
    """NVML index (the probe's pairs use these)."""
    name: str
    uuid: str | None
    numa_node: int | None
    to_switch: bool


@dataclass(frozen=True)
class _Machine:
    """What the rules read from a probe document."""

    source: str
    gpus: list[_Gpu]
    p2p: dict[tuple[int, int], bool]
    """Per pair of NVML indexes: P2P usable (driver status, else the measured access)."""
    paths: dict[tuple[int, int], str]
    """Per pair: NCCL's path type (NVL, PIX ... SYS) as the probe's topology says."""
    small_copy_us: float | None
    infiniband: list[str] | None
    """RDMA devices; None when the probe did not look (an older probe document)."""
    document: Mapping[str, Any]


def machine_verdicts(
    spec: EngineSpec,
    env: Mapping[str, str],
    probe: Mapping[str, Any],
    *,
    source: str,
    inherited: frozenset[str] = frozenset(),
) -> list[Verdict]:
    """What in `spec` (and `env`, the environment it launches with) the probe contradicts.

    `inherited` names the variables of `env` that come from the caller's environment
    rather than the spec, so the evidence says where each came from.
    """
    machine = _read(probe, source)
    if not machine.gpus:
        return []
    where = _Where(inherited)
    verdicts: list[Verdict] = []
    visible, absent = _visible(env.get("CUDA_VISIBLE_DEVICES"), machine)
    if absent:
        verdicts.append(_absent_devices(env["CUDA_VISIBLE_DEVICES"], absent, machine, where))
    needed = spec.gpus_needed
    if needed > len(visible):
        verdicts.append(_too_few(spec, needed, len(visible), env, machine))
    used = visible[:needed]
    pairs = [(min(a, b), max(a, b)) for a, b in combinations(used, 2)]
    verdicts += _p2p_level(env, pairs, machine, where)
    verdicts += _p2p_disable(env, pairs, machine, where)
    verdicts += _shm_disable(env, pairs, machine, where)
    verdicts += _channels(env, where)
    verdicts += _infiniband(env, machine, where)
    verdicts += _nvls(env, used, machine, where)
    if spec.tp > 1 and len(used) >= spec.tp:
        verdicts += _tp_group(spec, used[: spec.tp], machine)
    return sorted(verdicts, key=lambda v: v.severity.rank)


# --- reading the probe ------------------------------------------------------------------


def _section(document: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = document.get(key)
    return value if isinstance(value, dict) else {}


def _read(document: Mapping[str, Any], source: str) -> _Machine:
    inventory, comm = _section(document, "gpus"), _section(document, "comm")
    gpus: list[_Gpu] = []
    p2p: dict[tuple[int, int], bool] = {}
    paths: dict[tuple[int, int], str] = {}
    if inventory and inventory.get("gpus"):
        for raw in inventory["gpus"]:
            links = raw.get("nvlinks") or []
            gpus.append(
                _Gpu(
                    index=int(raw.get("nvml_index", len(gpus))),
                    name=str(raw.get("name") or "GPU"),
                    uuid=raw.get("uuid"),
                    numa_node=_numa(raw.get("numa_node")),
                    to_switch=any(
                        link.get("active") and link.get("remote_device_type") == "switch"
                        for link in links
                    ),
                )
            )
        for pair in inventory.get("pairs") or []:
            key = (min(pair["a"], pair["b"]), max(pair["a"], pair["b"]))
            usable = (pair.get("p2p_read") == "OK" and pair.get("p2p_write") == "OK") or (
                pair.get("p2p_nvlink") == "OK"
            )
            p2p[key] = usable
            paths[key] = (
                "NVL"
                if pair.get("nvlink_count")
                else _SMI_TO_NCCL.get(str(pair.get("pcie_topology")), "SYS")
            )
    elif comm.get("devices"):
        for raw in comm["devices"]:
            gpus.append(
                _Gpu(int(raw["index"]), str(raw.get("name") or "GPU"), raw.get("uuid"), None, False)
            )
    for result in comm.get("p2p") or []:
        key = (min(result["gpu_a"], result["gpu_b"]), max(result["gpu_a"], result["gpu_b"]))
        p2p.setdefault(key, bool(result.get("p2p_access_reported")))
    host = _section(document, "host")
    return _Machine(
        source=source,
        gpus=sorted(gpus, key=lambda g: g.index),
        p2p=p2p,
        paths=paths,
        small_copy_us=_small_copy_us(comm),
        infiniband=(host.get("infiniband_devices") or []) if "infiniband_devices" in host else None,
        document=document,
    )


def _numa(value: Any) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def _small_copy_us(comm: Mapping[str, Any]) -> float | None:
    """The smallest measured GPU-to-GPU copy's time (the story's 12 KB in 13.7 us)."""
    times = [
        (point["size_bytes"], point["time_us"])
        for result in comm.get("p2p") or []
        for point in result.get("a_to_b") or []
    ]
    return min(times)[1] if times else None


def _visible(value: str | None, machine: _Machine) -> tuple[list[int], list[str]]:
    """The NVML indexes CUDA_VISIBLE_DEVICES leaves, in its order, and the names it gives
    that match no GPU. CUDA stops at the first entry it cannot match; so does this."""
    indexes = [g.index for g in machine.gpus]
    if value is None:
        return indexes, []
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    visible: list[int] = []
    for i, entry in enumerate(entries):
        match = _match_device(entry, machine)
        if match is None:
            return visible, entries[i:]
        visible.append(match)
    return visible, []


def _match_device(entry: str, machine: _Machine) -> int | None:
    if entry.lstrip("-").isdigit():
        position = int(entry)
        return machine.gpus[position].index if 0 <= position < len(machine.gpus) else None
    found = [g.index for g in machine.gpus if g.uuid and g.uuid.startswith(entry)]
    return found[0] if len(found) == 1 else None


# --- the rules --------------------------------------------------------------------------


class _Where:
    def __init__(self, inherited: frozenset[str]) -> None:
        self.inherited = inherited

    def __call__(self, env: Mapping[str, str], name: str) -> str:
        origin = "inherited from the environment" if name in self.inherited else "in the spec"
        return f"{name}={env[name]} ({origin})"


def _absent_devices(value: str, absent: list[str], machine: _Machine, where: _Where) -> Verdict:
    count = len(machine.gpus)
    return Verdict(
        code="cuda-visible-devices-absent",
        severity=Severity.ERROR,
        title=f"CUDA_VISIBLE_DEVICES names GPUs this machine does not have: {', '.join(absent)}",
        evidence=[
            where({"CUDA_VISIBLE_DEVICES": value}, "CUDA_VISIBLE_DEVICES"),
            f"{count} GPU(s) in {machine.source}: indexes 0-{count - 1}"
            + "".join(f", {g.uuid}" for g in machine.gpus[:2] if g.uuid)
            + (" ..." if count > 2 else ""),
        ],
        meaning=(
            "CUDA stops reading CUDA_VISIBLE_DEVICES at the first entry it cannot match: the "
            "GPUs from there on are hidden, so the engine gets fewer than it was given, or none."
        ),
        action="Name GPUs that exist: indexes below the count, or GPU- UUIDs from nvidia-smi -L.",
        subjects=["host"],
    )


def _too_few(
    spec: EngineSpec, needed: int, visible: int, env: Mapping[str, str], machine: _Machine
) -> Verdict:
    layout = f"tp {spec.tp} x pp {spec.pp} x dp {spec.dp}"
    hidden = "CUDA_VISIBLE_DEVICES" in env
    return Verdict(
        code="layout-exceeds-gpus",
        severity=Severity.ERROR,
        title=f"The layout needs {needed} GPUs ({layout}); {visible} "
        f"{'is' if visible == 1 else 'are'} visible",
        evidence=[
            f"layout: {layout} = {needed} GPUs",
            f"{len(machine.gpus)} GPU(s) in {machine.source}"
            + (
                f", {visible} left by CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}"
                if hidden
                else ""
            ),
        ],
        meaning="The engine will stop at start-up: it cannot place every rank on its own GPU.",
        action=(
            f"Choose a layout of at most {visible} GPUs (tp x pp x dp), or make more GPUs visible."
        ),
        subjects=["host"],
    )


def _level(value: str) -> str | None:
    if value in _LEVELS:
        return value
    if value.lstrip("-").isdigit():
        number = int(value)
        return _LEGACY_LEVELS[min(number, 4)] if number >= 0 else None
    return None


def _p2p_level(
    env: Mapping[str, str], pairs: list[tuple[int, int]], machine: _Machine, where: _Where
) -> list[Verdict]:
    value = env.get("NCCL_P2P_LEVEL")
    if value is None:
        return []
    level = _level(value)
    if level is None:
        return [_ignored(env, "NCCL_P2P_LEVEL", f"not one of {', '.join(_LEVELS)} or 0-5", where)]
    rank = _LEVELS.index(level)
    refused = [
        pair
        for pair in pairs
        if machine.p2p.get(pair) is False and _LEVELS.index(machine.paths.get(pair, "SYS")) <= rank
    ]
    if level == "LOC" or not refused:
        return []
    evidence = [
        where(env, "NCCL_P2P_LEVEL") + f": NCCL reads it as {level}, P2P allowed up to {level}",
        f"P2P not supported on {len(refused)} of {len(pairs)} pairs of the GPUs this launch "
        f"uses ({_pairs(refused)}), per {machine.source}",
    ]
    if machine.small_copy_us is not None:
        evidence.append(
            f"a small GPU-to-GPU copy takes {machine.small_copy_us:g} µs (probe --comm): "
            "staged through host memory"
        )
    return [
        Verdict(
            code="nccl-p2p-level-without-p2p",
            severity=Severity.WARNING,
            title=f"NCCL_P2P_LEVEL={value} asks for P2P between GPUs the driver says have none",
            evidence=evidence,
            meaning=(
                "The level only widens which topology paths NCCL may try P2P on; it cannot make "
                "the platform allow it. Here it is at best inert (NCCL asks the driver, is "
                "refused and copies through host memory), and where a hypervisor reports "
                "access its IOMMU then blocks, P2P copies fail or hang at the first collective. "
                "Either way the launch assumes a machine this one is not: its all-reduces run "
                "at host-staged copy speed."
            ),
            action=(
                "Drop NCCL_P2P_LEVEL and let NCCL choose its transport. To get P2P, fix the "
                "platform (bare metal or a container on the host instead of this VM, or "
                "passthrough with ACS/IOMMU set for peer DMA), then check with servelab probe."
            ),
            subjects=[f"gpu{a}-gpu{b}" for a, b in refused],
        )
    ]


def _p2p_disable(
    env: Mapping[str, str], pairs: list[tuple[int, int]], machine: _Machine, where: _Where
) -> list[Verdict]:
    value = env.get("NCCL_P2P_DISABLE")
    if value is None:
        return []
    if _int(value) != 1:
        return [_ignored(env, "NCCL_P2P_DISABLE", "only the value 1 disables P2P", where)]
    working = [pair for pair in pairs if machine.p2p.get(pair) is True]
    if not pairs or len(working) < len(pairs):
        return []
    paths = sorted({machine.paths.get(pair, "?") for pair in working})
    return [
        Verdict(
            code="nccl-p2p-disabled",
            severity=Severity.WARNING,
            title="NCCL_P2P_DISABLE=1 turns off P2P that works between these GPUs",
            evidence=[
                where(env, "NCCL_P2P_DISABLE"),
                f"P2P supported on all {len(pairs)} pairs ({', '.join(paths)}), per "
                f"{machine.source}",
            ],
            meaning=(
                "NCCL then sends every intra-node collective through host shared memory: two "
                "copies per hop instead of one direct DMA, at a fraction of the link's "
                "bandwidth and several times its latency."
            ),
            action="Remove NCCL_P2P_DISABLE (it was likely copied from a machine without P2P).",
            subjects=["host"],
        )
    ]


def _shm_disable(
    env: Mapping[str, str], pairs: list[tuple[int, int]], machine: _Machine, where: _Where
) -> list[Verdict]:
    value = env.get("NCCL_SHM_DISABLE")
    if value is None:
        return []
    if _int(value) != 1:
        return [_ignored(env, "NCCL_SHM_DISABLE", "only the value 1 disables shared memory", where)]
    no_p2p = [pair for pair in pairs if machine.p2p.get(pair) is False]
    severity = Severity.WARNING if no_p2p else Severity.INFO
    if no_p2p:
        meaning = (
            "On one host without P2P, shared memory is NCCL's path between GPUs; without it "
            "NCCL falls to its network transport (sockets, or IB loopback), slower still."
        )
    else:
        meaning = (
            "P2P carries this launch's traffic, so it costs little here; but any pair without "
            "P2P, or a process that cannot map its peer, then goes through the network "
            "transport."
        )
    return [
        Verdict(
            code="nccl-shm-disabled",
            severity=severity,
            title="NCCL_SHM_DISABLE=1 on a single host",
            evidence=[
                where(env, "NCCL_SHM_DISABLE"),
                f"P2P missing on {len(no_p2p)} of {len(pairs)} pairs the launch uses"
                if pairs
                else "one GPU",
            ],
            meaning=meaning,
            action="Remove NCCL_SHM_DISABLE on a single-host deployment.",
            subjects=["host"],
        )
    ]


def _channels(env: Mapping[str, str], where: _Where) -> list[Verdict]:
    verdicts: list[Verdict] = []
    values: dict[str, int] = {}
    for name in ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS"):
        if name not in env:
            continue
        number = _int(env[name])
        if number is None:
            verdicts.append(_ignored(env, name, "not an integer", where))
            continue
        values[name] = number
        if number < 1:
            problem, severity = (
                "below 1: NCCL raises a maximum to 1 and ignores a minimum",
                Severity.WARNING if name.startswith("NCCL_MAX") else Severity.INFO,
            )
        elif number > _MAX_CHANNELS:
            problem, severity = (
                f"above NCCL's limit: capped at {_MAX_CHANNELS} "
                f"({_MAX_CHANNELS_BEFORE_2_25} before NCCL 2.25)",
                Severity.INFO,
            )
        elif number > _MAX_CHANNELS_BEFORE_2_25:
            problem, severity = (
                f"NCCL before 2.25 caps it at {_MAX_CHANNELS_BEFORE_2_25}",
                Severity.INFO,
            )
        else:
            continue
        verdicts.append(_channel_verdict(env, name, problem, severity, where))
    for low, high in (
        ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"),
        ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"),
    ):
        if low in values and high in values and values[low] > values[high]:
            verdicts.append(
                _channel_verdict(
                    env,
                    low,
                    f"above {where(env, high)}: the two contradict",
                    Severity.WARNING,
                    where,
                )
            )
    return verdicts


def _channel_verdict(
    env: Mapping[str, str], name: str, problem: str, severity: Severity, where: _Where
) -> Verdict:
    return Verdict(
        code="nccl-channels-out-of-range",
        severity=severity,
        title=f"{name}={env[name]}: {problem}",
        evidence=[where(env, name), f"NCCL's channel limit: {_MAX_CHANNELS} (NCCL 2.25 and later)"],
        meaning=(
            "Channels are the CTAs NCCL runs each collective on: too few and a collective "
            "cannot fill the links; more than the limit are not created, so the setting "
            "does not mean what it says."
        ),
        action=f"Unset {name} unless a measurement (nccl-tests, probe --comm) showed it helps.",
        subjects=["host"],
    )


def _infiniband(env: Mapping[str, str], machine: _Machine, where: _Where) -> list[Verdict]:
    names = sorted(name for name in env if name.startswith("NCCL_IB_"))
    if not names or machine.infiniband is None or machine.infiniband:
        return []
    return [
        Verdict(
            code="nccl-ib-without-infiniband",
            severity=Severity.INFO,
            title=f"{', '.join(names)} set on a machine without InfiniBand: harmless",
            evidence=[
                *(where(env, name) for name in names),
                f"no RDMA device in /sys/class/infiniband, per {machine.source}",
            ],
            meaning=(
                "NCCL's InfiniBand transport has no device to use here: these variables change "
                "nothing on one host (NCCL's own traffic stays on P2P or shared memory)."
            ),
            action="Nothing to do; drop them to keep the launch honest about this machine.",
            subjects=["host"],
        )
    ]


def _nvls(
    env: Mapping[str, str], used: Sequence[int], machine: _Machine, where: _Where
) -> list[Verdict]:
    value = env.get("NCCL_NVLS_ENABLE")
    if value is None or _int(value) == 0:
        return []
    gpus = [g for g in machine.gpus if g.index in used]
    if not gpus or all(g.to_switch for g in gpus):
        return []
    nvlink = any(path == "NVL" for path in machine.paths.values())
    return [
        Verdict(
            code="nccl-nvls-without-nvswitch",
            severity=Severity.INFO,
            title=f"NCCL_NVLS_ENABLE={value} on GPUs without NVSwitch: NVLink SHARP cannot run",
            evidence=[
                where(env, "NCCL_NVLS_ENABLE"),
                "NVLink between GPUs, but no link to an NVSwitch"
                if nvlink
                else "no NVLink between the GPUs",
            ],
            meaning=(
                "NVLS reduces in the NVSwitch; without one NCCL leaves it off, so the setting "
                "is inert here."
            ),
            action="Drop NCCL_NVLS_ENABLE on this machine.",
            subjects=["host"],
        )
    ]


def _tp_group(spec: EngineSpec, group: list[int], machine: _Machine) -> list[Verdict]:
    pairs = [(min(a, b), max(a, b)) for a, b in combinations(group, 2)]
    no_p2p = [pair for pair in pairs if machine.p2p.get(pair) is False]
    nodes = sorted(
        {g.numa_node for g in machine.gpus if g.index in group and g.numa_node is not None}
    )
    roots = sorted({machine.paths[p] for p in pairs if machine.paths.get(p) in ("PHB", "SYS")})
    if not no_p2p:
        return []
    evidence = [f"tensor-parallel group: GPUs {', '.join(map(str, group))} (tp {spec.tp})"]
    evidence.append(f"P2P not supported on {len(no_p2p)} of {len(pairs)} pairs ({_pairs(no_p2p)})")
    if len(nodes) > 1:
        evidence.append(f"the group spans NUMA nodes {', '.join(map(str, nodes))}")
    if roots:
        evidence.append(f"pairs joined across PCIe host bridges ({', '.join(roots)})")
    if machine.small_copy_us is not None:
        evidence.append(
            f"a small GPU-to-GPU copy takes {machine.small_copy_us:g} µs (probe --comm)"
        )
    estimate, gain = _layout_estimate(spec, machine)
    evidence.append(estimate)
    half = spec.tp // 2
    action = (
        f"Measure tp {half} x pp {spec.pp * 2} against tp {spec.tp} "
        f"(servelab tune run with a layout parameter, or two servelab run launches)"
        if spec.tp % 2 == 0
        else "Keep tensor parallelism inside GPUs that have P2P"
    )
    return [
        Verdict(
            code="tp-group-without-p2p",
            severity=Severity.WARNING,
            title=(
                f"The tensor-parallel group of {spec.tp} GPUs has no P2P on {len(no_p2p)} of "
                f"{len(pairs)} pairs{gain}"
            ),
            evidence=evidence,
            meaning=(
                "Every decode step runs two all-reduces per layer across the whole tensor-"
                "parallel group; without P2P each goes through host memory and pays the staged "
                "copy's latency per hop, the step's largest cost at small batches. A pipeline "
                "split halves the group, and sends one activation per step between stages "
                "instead."
            ),
            action=action + "; the model's estimate is in the evidence.",
            subjects=[f"gpu{a}-gpu{b}" for a, b in no_p2p],
        )
    ]


def _layout_estimate(spec: EngineSpec, machine: _Machine) -> tuple[str, str]:
    """The model's output tok/s of tp/2 x pp*2 against the spec's layout, and a title tail."""
    if spec.tp % 2:
        return "no pipeline split of an odd tensor-parallel size to estimate", ""
    slug = _gpu_slug(machine)
    if slug is None or spec.model is None:
        return "the model's estimate needs a GPU in its catalogue and a model it knows", ""
    try:
        calibration = (
            calibration_from_probe(machine.document) if machine.document.get("comm") else None
        )
    except ConfigError:
        calibration = None
    input_len, output_len = ESTIMATE_LENGTHS
    rates = []
    for tp, pp in ((spec.tp, spec.pp), (spec.tp // 2, spec.pp * 2)):
        try:
            dep = deploy(
                spec.model, gpu=slug, tp=tp, pp=pp, ep=spec.ep, dp=spec.dp, calibration=calibration
            )
        except ConfigError as exc:
            return f"the model cannot estimate tp {tp} x pp {pp}: {exc}", ""
        (point,) = throughput_curve(dep, input_len, output_len, [ESTIMATE_BATCH])
        rates.append(point.output_tokens_per_s)
    ratio = rates[1] / rates[0] if rates[0] else 0.0
    text = (
        f"model ({spec.model} on {slug}{', calibrated by the probe' if calibration else ''}): "
        f"tp {spec.tp // 2} x pp {spec.pp * 2} gives {ratio:.2f}x the output tok/s of tp "
        f"{spec.tp} x pp {spec.pp} at {ESTIMATE_BATCH} requests of {input_len} in / "
        f"{output_len} out ({rates[1]:,.0f} against {rates[0]:,.0f})"
    )
    tail = f"; the model expects {ratio:.2f}x from tp {spec.tp // 2} x pp {spec.pp * 2}"
    return text, tail


def _gpu_slug(machine: _Machine) -> str | None:
    found = gpu_for_nvml_name(machine.gpus[0].name) if machine.gpus else None
    return found.slug if found is not None else None


def _ignored(env: Mapping[str, str], name: str, why: str, where: _Where) -> Verdict:
    return Verdict(
        code="nccl-env-ignored",
        severity=Severity.WARNING,
        title=f"{name}={env[name]} does nothing: {why}",
        evidence=[where(env, name)],
        meaning=(
            "NCCL ignores the value and keeps its default: the launch does not do what it says."
        ),
        action=f"Give {name} a value NCCL reads, or remove it.",
        subjects=["host"],
    )


def _int(value: str) -> int | None:
    try:
        return int(value.strip(), 0)
    except ValueError:
        return None


def _pairs(pairs: list[tuple[int, int]]) -> str:
    shown = ", ".join(f"{a}-{b}" for a, b in pairs[:6])
    return shown + (f" and {len(pairs) - 6} more" if len(pairs) > 6 else "")
