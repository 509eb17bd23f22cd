"""Virtualization and containers, in the spirit of systemd-detect-virt: a verdict and its evidence.

A VM can cost GPU peer-to-peer DMA (the motivating box's KVM guest showed P2P "NS" everywhere)
and a container can hide or fake topology, so the probe must say where it runs. Nothing here
can execute CPUID, so the hypervisor is named from what the kernel exposes: DMI strings,
paravirtual clocksources and buses, the device tree, the kernel command line. Each marker
seen goes into `evidence` as read; a verdict that rests only on weak markers says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servelab.probe.sysfs import list_dir, read_text

__all__ = ["VirtFacts", "detect_virtualization"]

_DMI_DIR = "/sys/class/dmi/id"
# systemd's order: the product says most, the BIOS vendor least.
_DMI_FIELDS = ("product_name", "sys_vendor", "board_vendor", "bios_vendor", "product_version")
# DMI prefixes that only a hypervisor reports.
_DMI_HYPERVISORS = (
    ("KVM", "kvm"),
    ("OpenStack", "kvm"),
    ("KubeVirt", "kvm"),
    ("QEMU", "qemu"),
    ("VMware", "vmware"),
    ("VMW", "vmware"),
    ("innotek GmbH", "oracle"),
    ("VirtualBox", "oracle"),
    ("Xen", "xen"),
    ("Bochs", "bochs"),
    ("Parallels", "parallels"),
    ("BHYVE", "bhyve"),
    ("Hyper-V", "microsoft"),
    ("Apple Virtualization", "apple"),
)
# DMI prefixes of vendors that also sell bare metal under the same strings (EC2 *.metal,
# Surface laptops, Oracle servers): a VM only when the CPU's hypervisor flag agrees.
_DMI_CLOUDS = (
    ("Amazon EC2", "amazon"),
    ("Google", "google"),
    ("Microsoft Corporation", "microsoft"),
    ("Oracle Corporation", "oracle"),
    ("Alibaba Cloud", "alibaba"),
)
# /proc/device-tree/hypervisor/compatible ("linux,kvm", "xen,xen"), as systemd reads it.
_DT_HYPERVISORS = (("kvm", "kvm"), ("xen", "xen"), ("vmware", "vmware"))
_CLOCKSOURCES = (("kvm-clock", "kvm"), ("hyperv", "microsoft"), ("xen", "xen"))
# Path components of a cgroup that a container runtime creates (host daemons' own
# "*.service" units are skipped, so a host running dockerd is not taken for a container).
_CGROUP_MARKERS = (
    ("kubepods", "kubernetes"),
    ("libpod", "podman"),
    ("docker", "docker"),
    ("lxc", "lxc"),
    ("containerd", "containerd"),
)
# Substrings of the mounts a runtime sets up for a container's /, /etc/hosts and friends.
_MOUNT_MARKERS = (
    ("/kubelet/pods/", "kubernetes"),
    ("/containers/storage/", "podman"),
    ("/docker/", "docker"),
    ("containerd", "containerd"),
    ("lxcfs", "lxc"),
    ("/lxc/", "lxc"),
)
_CONTAINER_MOUNTPOINTS = frozenset({"/", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf"})
# gVisor's syscall table reports this fixed build string whatever kernel it claims.
_GVISOR_VERSION = "#1 SMP Sun Jan 10 15:06:54 PST 2016"
_GUEST_GPU_MODES = frozenset({"passthrough", "vgpu"})


class VirtFacts(BaseModel):
    """Where this process runs: the hypervisor, the container, the GPU's virtualization mode."""

    model_config = ConfigDict(extra="forbid")

    vm: str | None = Field(
        description="Hypervisor ('kvm', 'microsoft', 'amazon', ...); 'vm' when only "
        "unspecific markers say VM; None when nothing does."
    )
    container: str | None = Field(
        description="Container kind ('docker', 'lxc', 'kubernetes', 'gvisor', 'wsl', ...)."
    )
    gpu_virtualization: str | None = Field(
        description="NVML's GPU virtualization mode as given ('bare metal', 'passthrough', ...)."
    )
    summary: str = Field(
        description="One line, e.g. 'container (docker) in a VM (kvm)'; 'bare metal' only when "
        "the CPU flags show no hypervisor, 'no virtualization markers found' when nothing "
        "could be read either way."
    )
    evidence: list[str] = Field(description="Every marker seen, as read, in order of checking.")


@dataclass(frozen=True)
class _Marker:
    name: str
    line: str
    weak: bool
    rank: int = 0


@dataclass
class _Seen:
    """Markers in order of precedence, and every line of evidence once."""

    evidence: list[str] = field(default_factory=list)
    vm: list[_Marker] = field(default_factory=list)
    container: list[_Marker] = field(default_factory=list)
    bare_metal: bool = False

    def note(self, line: str) -> None:
        if line not in self.evidence:
            self.evidence.append(line)

    def vm_marker(self, name: str, line: str, *, weak: bool = False) -> None:
        self.note(line)
        self.vm.append(_Marker(name, line, weak))

    def container_marker(
        self, name: str, line: str, *, explicit: bool = False, weak: bool = False
    ) -> None:
        """Record a container marker, ranked by how telling it is (lowest first).

        Explicit names (systemd's file, init's environment) and foreign kernels (gVisor,
        WSL) rank first; then Kubernetes, whose pods run on any runtime; then runtimes.
        """
        rank = 0 if explicit else 1 if name == "kubernetes" else 3 if weak else 2
        self.note(line)
        self.container.append(_Marker(name, line, weak, rank))


def detect_virtualization(root: Path = Path("/"), *, nvml_mode: str | None = None) -> VirtFacts:
    """Detect the hypervisor and the container under `root`, with the evidence for each.

    `nvml_mode` is the GPU virtualization mode NVML reported, if any; "passthrough" or
    "vgpu" means the GPU driver sees a guest, which counts as a VM marker.
    """
    seen = _Seen()
    flags = _cpu_flags(root)
    hypervisor_flag = None if flags is None else "hypervisor" in flags
    _check_dmi(root, seen, hypervisor_flag)
    _check_microvm(root, seen)
    _check_hypervisor_files(root, seen)
    if hypervisor_flag:
        seen.vm_marker("vm", "cpu flag 'hypervisor' present", weak=True)
    elif hypervisor_flag is False:
        seen.note("cpu flags listed without 'hypervisor'")
        seen.bare_metal = True
    if nvml_mode is not None:
        line = f"NVML GPU virtualization mode = {nvml_mode}"
        if nvml_mode.lower() in _GUEST_GPU_MODES:
            seen.vm_marker("vm", line)
        else:
            seen.note(line)

    _check_container_files(root, seen)
    _check_kernel(root, seen)
    _check_cgroups(root, seen)
    _check_mounts(root, seen)
    seen.container.sort(key=lambda marker: marker.rank)

    vm = _pick_vm(seen)
    container = seen.container[0].name if seen.container else None
    for kind, markers in (("a VM", seen.vm), ("a container", seen.container)):
        if markers and all(m.weak for m in markers):
            seen.note(f"weak evidence for {kind}: only {'; '.join(m.line for m in markers)}")
    return VirtFacts(
        vm=vm,
        container=container,
        gpu_virtualization=nvml_mode,
        summary=_summary(seen, vm, container, nvml_mode),
        evidence=seen.evidence,
    )


def _cpu_flags(root: Path) -> set[str] | None:
    """The x86 flags of the first processor; None when cpuinfo has no flags line (ARM)."""
    match = re.search(r"^flags\s*:(.*)$", read_text(root, "/proc/cpuinfo") or "", re.MULTILINE)
    return set(match.group(1).split()) if match else None


def _dmi_line(name: str, value: str) -> str:
    return f"{_DMI_DIR}/{name} = {value}"


def _check_dmi(root: Path, seen: _Seen, hypervisor_flag: bool | None) -> None:
    values = {name: read_text(root, f"{_DMI_DIR}/{name}") for name in _DMI_FIELDS}
    present = {name: value for name, value in values.items() if value}
    for name in ("sys_vendor", "product_name"):
        if name in present:
            seen.note(_dmi_line(name, present[name]))
    for name, value in present.items():
        for prefix, vm in _DMI_HYPERVISORS:
            if value.startswith(prefix):
                seen.vm_marker(vm, _dmi_line(name, value))
                return
    product = present.get("product_name", "")
    for name, value in present.items():
        for prefix, vm in _DMI_CLOUDS:
            if not value.startswith(prefix):
                continue
            line = _dmi_line(name, value)
            if hypervisor_flag or (vm == "microsoft" and product == "Virtual Machine"):
                seen.vm_marker(vm, line)
            elif hypervisor_flag is False:
                seen.note(f"{line}, but no 'hypervisor' cpu flag: a bare-metal instance")
                seen.bare_metal = True
            elif "metal" in product.lower():
                seen.note(f"{line}, product_name {product}: a bare-metal instance")
                seen.bare_metal = True
            else:
                seen.vm_marker(vm, f"{line} (no cpu flags to tell a VM from bare metal)", weak=True)
            return


def _check_microvm(root: Path, seen: _Seen) -> None:
    """Firecracker: no DMI, no PCI, devices declared as virtio-mmio on the command line."""
    cmdline = read_text(root, "/proc/cmdline") or ""
    if "firecracker" in cmdline.lower():
        seen.vm_marker("firecracker", "/proc/cmdline mentions 'firecracker'")
    mmio = re.search(r"virtio_mmio\.device=\S+", cmdline)
    if mmio is None or list_dir(root, _DMI_DIR):
        return
    pci = list_dir(root, "/sys/bus/pci/devices")
    if pci:
        seen.note(f"/proc/cmdline has {mmio.group(0)}, but PCI devices exist")
        return
    seen.vm_marker(
        "firecracker",
        f"/proc/cmdline has {mmio.group(0)}, with no DMI tables and no PCI devices: a microVM, "
        "most likely Firecracker (QEMU's microvm machine looks the same)",
    )


def _check_hypervisor_files(root: Path, seen: _Seen) -> None:
    """Markers a guest kernel exposes for its hypervisor: device tree, Xen, VMBus, clocks."""
    compatible = read_text(root, "/proc/device-tree/hypervisor/compatible")
    if compatible:
        names = [c for c in compatible.split("\0") if c]
        line = f"/proc/device-tree/hypervisor/compatible = {', '.join(names)}"
        text = compatible.lower()
        seen.vm_marker(next((vm for key, vm in _DT_HYPERVISORS if key in text), "vm"), line)
    board = read_text(root, "/proc/device-tree/compatible") or ""
    for key in ("linux,dummy-virt", "qemu,pseries"):
        if key in board:
            seen.vm_marker("qemu", f"/proc/device-tree/compatible has {key}")
    xen = read_text(root, "/sys/hypervisor/type")
    if xen:
        capabilities = read_text(root, "/proc/xen/capabilities") or ""
        if "control_d" in capabilities:
            seen.note(
                f"/sys/hypervisor/type = {xen}, but /proc/xen/capabilities has control_d: dom0"
            )
        else:
            seen.vm_marker(xen.lower(), f"/sys/hypervisor/type = {xen}")
    if list_dir(root, "/sys/bus/vmbus/devices"):
        seen.vm_marker("microsoft", "/sys/bus/vmbus has devices (Hyper-V VMBus)")
    clocks = read_text(root, "/sys/devices/system/clocksource/clocksource0/available_clocksource")
    for clock in (clocks or "").split():
        for prefix, vm in _CLOCKSOURCES:
            if clock.startswith(prefix):
                seen.vm_marker(vm, f"clocksource {clock} available (paravirtual clock)")


def _check_container_files(root: Path, seen: _Seen) -> None:
    """Files a container manager leaves for its payload."""
    manager = read_text(root, "/run/systemd/container")
    if manager:
        seen.container_marker(manager.lower(), f"/run/systemd/container = {manager}", explicit=True)
    environ = read_text(root, "/proc/1/environ")
    for entry in (environ or "").split("\0"):
        if entry.startswith("container=") and entry != "container=":
            value = entry.removeprefix("container=")
            seen.container_marker(value.lower(), f"/proc/1/environ {entry}", explicit=True)
    if read_text(root, "/run/.containerenv") is not None:
        seen.container_marker("podman", "/run/.containerenv exists (podman, or CRI-O)")
    if read_text(root, "/.dockerenv") is not None:
        # Weak: the file survives in images turned into VM disks or chroots.
        seen.container_marker("docker", "/.dockerenv exists", weak=True)


def _check_kernel(root: Path, seen: _Seen) -> None:
    """Kernels that are not the host's: gVisor's user-space kernel, WSL's."""
    release = read_text(root, "/proc/sys/kernel/osrelease") or ""
    version = read_text(root, "/proc/version") or ""
    if "gvisor" in release.lower():
        seen.container_marker(
            "gvisor", f"kernel release contains 'gvisor': {release}", explicit=True
        )
    if _GVISOR_VERSION in version:
        seen.container_marker(
            "gvisor", f"/proc/version = {version} (gVisor's fixed build string)", explicit=True
        )
    if "microsoft" in release.lower() or "wsl" in release.lower():
        seen.container_marker("wsl", f"kernel release is WSL's: {release}", explicit=True)


def _check_cgroups(root: Path, seen: _Seen) -> None:
    for path in ("/proc/1/cgroup", "/proc/self/cgroup"):
        found: set[str] = set()
        for line in (read_text(root, path) or "").splitlines():
            components = line.partition(":")[2].partition(":")[2].lower().split("/")
            for component in components:
                if component.endswith(".service"):
                    continue
                for key, name in _CGROUP_MARKERS:
                    if key in component and key not in found:
                        found.add(key)
                        seen.container_marker(name, f"{path} mentions {key}: {_clip(line)}")


def _check_mounts(root: Path, seen: _Seen) -> None:
    found: set[str] = set()
    for line in (read_text(root, "/proc/self/mountinfo") or "").splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        fstype = line.partition(" - ")[2].split()[:1]
        if fields[4] not in _CONTAINER_MOUNTPOINTS and fstype != ["fuse.lxcfs"]:
            continue
        for key, name in _MOUNT_MARKERS:
            if key in line.lower() and key not in found:
                found.add(key)
                seen.container_marker(name, f"/proc/self/mountinfo mentions {key}: {_clip(line)}")


def _pick_vm(seen: _Seen) -> str | None:
    """The first named hypervisor; a QEMU machine with a KVM marker is KVM, and says so."""
    named = [m.name for m in seen.vm if m.name != "vm"]
    if not named:
        return "vm" if seen.vm else None
    if named[0] == "qemu" and "kvm" in named:
        seen.note("QEMU machine with KVM acceleration")
        return "kvm"
    return named[0]


def _summary(seen: _Seen, vm: str | None, container: str | None, gpu: str | None) -> str:
    vm_text: str | None = None
    container_text: str | None = None
    if vm is not None:
        label = "hypervisor not identified" if vm == "vm" else vm
        if vm != "vm" and all(m.weak for m in seen.vm):
            label += ", weak evidence"
        vm_text = f"VM ({label})"
    if container is not None:
        weak = ", weak evidence" if all(m.weak for m in seen.container) else ""
        container_text = f"container ({container}{weak})"
    bare = seen.bare_metal and not seen.vm
    if container_text and vm_text:
        text = f"{container_text} in a {vm_text}"
    elif container_text:
        text = f"{container_text} on bare metal" if bare else container_text
    elif vm_text:
        text = vm_text
    else:
        text = "bare metal" if bare else "no virtualization markers found"
    if gpu is not None and gpu.lower() not in {"bare metal", "none"}:
        text += f", GPU {gpu}"
    return text


def _clip(line: str, limit: int = 160) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."
