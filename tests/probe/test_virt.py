"""Virtualization and container detection on synthetic trees, and once on this machine."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from servelab.probe.virt import VirtFacts, detect_virtualization
from tests.probe.trees import (
    BARE_METAL,
    DOCKER,
    HOST_MOUNTINFO,
    KERNEL,
    KVM_GUEST,
    Tree,
    cpuinfo_arm64,
    cpuinfo_x86,
    meminfo,
    write_tree,
)

VM_CPUINFO = cpuinfo_x86(sockets=1, cores=4, threads=1, hypervisor=True)
HOST_CPUINFO = cpuinfo_x86(sockets=1, cores=4, threads=2)
CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0/available_clocksource"
DMI = "/sys/class/dmi/id"


def detect(tmp_path: Path, tree: Tree, **kwargs: str) -> VirtFacts:
    return detect_virtualization(write_tree(tmp_path, tree), **kwargs)


def test_bare_metal(tmp_path: Path):
    facts = detect(tmp_path, BARE_METAL)
    assert (facts.vm, facts.container) == (None, None)
    assert facts.summary == "bare metal"
    assert facts.evidence == [
        f"{DMI}/sys_vendor = Supermicro",
        f"{DMI}/product_name = SYS-421GE-TNRT",
        "cpu flags listed without 'hypervisor'",
    ]


def test_kvm_guest_under_qemu(tmp_path: Path):
    facts = detect(tmp_path, KVM_GUEST)
    assert (facts.vm, facts.container) == ("kvm", None)
    assert facts.summary == "VM (kvm)"
    assert f"{DMI}/sys_vendor = QEMU" in facts.evidence
    assert "clocksource kvm-clock available (paravirtual clock)" in facts.evidence
    assert "cpu flag 'hypervisor' present" in facts.evidence
    assert "QEMU machine with KVM acceleration" in facts.evidence


def test_qemu_without_kvm_is_qemu(tmp_path: Path):
    tree = {**KVM_GUEST, CLOCKSOURCE: "tsc hpet acpi_pm\n"}
    facts = detect(tmp_path, tree)
    assert facts.vm == "qemu"
    assert facts.summary == "VM (qemu)"


def test_kvm_hidden_from_the_guest_is_still_found_by_dmi(tmp_path: Path):
    """GPU passthrough set-ups hide the hypervisor CPUID bit (kvm hidden=on) for the driver."""
    tree = {**KVM_GUEST, "/proc/cpuinfo": HOST_CPUINFO}
    facts = detect(tmp_path, tree)
    assert facts.vm == "kvm"
    assert "cpu flags listed without 'hypervisor'" in facts.evidence


def test_hyper_v(tmp_path: Path):
    tree: Tree = {
        **KERNEL,
        "/proc/cpuinfo": VM_CPUINFO,
        "/proc/meminfo": meminfo(32817236),
        CLOCKSOURCE: "hyperv_clocksource_tsc_page acpi_pm \n",
        f"{DMI}/sys_vendor": "Microsoft Corporation\n",
        f"{DMI}/product_name": "Virtual Machine\n",
        f"{DMI}/board_vendor": "Microsoft Corporation\n",
        f"{DMI}/bios_vendor": "Microsoft Corporation\n",
        f"{DMI}/product_version": "7.0\n",
        "/sys/bus/vmbus/devices/f8b3781b-1e82-4818-a1c3-63d806ec15bb": None,
        "/sys/bus/vmbus/devices/58f75a6d-d949-4320-99e1-a2a2576d581c": None,
    }
    facts = detect(tmp_path, tree)
    assert facts.vm == "microsoft"
    assert facts.summary == "VM (microsoft)"
    assert "/sys/bus/vmbus has devices (Hyper-V VMBus)" in facts.evidence
    assert "clocksource hyperv_clocksource_tsc_page available (paravirtual clock)" in (
        facts.evidence
    )


def test_surface_laptop_is_not_hyper_v(tmp_path: Path):
    tree: Tree = {
        "/proc/cpuinfo": HOST_CPUINFO,
        f"{DMI}/sys_vendor": "Microsoft Corporation\n",
        f"{DMI}/product_name": "Surface Laptop 5\n",
    }
    facts = detect(tmp_path, tree)
    assert facts.vm is None
    assert facts.summary == "bare metal"


AWS_NITRO: Tree = {
    **KERNEL,
    "/proc/cpuinfo": cpuinfo_x86(sockets=2, cores=4, threads=2, hypervisor=True),
    CLOCKSOURCE: "kvm-clock tsc acpi_pm \n",
    f"{DMI}/sys_vendor": "Amazon EC2\n",
    f"{DMI}/product_name": "p5.48xlarge\n",
    f"{DMI}/board_vendor": "Amazon EC2\n",
    f"{DMI}/bios_vendor": "Amazon EC2\n",
    f"{DMI}/product_version": "\n",
}


def test_aws_nitro_instance(tmp_path: Path):
    facts = detect(tmp_path, AWS_NITRO)
    assert facts.vm == "amazon"
    assert facts.summary == "VM (amazon)"
    assert f"{DMI}/sys_vendor = Amazon EC2" in facts.evidence
    assert "clocksource kvm-clock available (paravirtual clock)" in facts.evidence


def test_aws_metal_instance_is_bare_metal(tmp_path: Path):
    tree = {
        **AWS_NITRO,
        "/proc/cpuinfo": HOST_CPUINFO,
        CLOCKSOURCE: "tsc hpet acpi_pm \n",
        f"{DMI}/product_name": "p4de.metal\n",
    }
    facts = detect(tmp_path, tree)
    assert facts.vm is None
    assert facts.summary == "bare metal"
    assert any("a bare-metal instance" in line for line in facts.evidence)


def test_arm_cloud_vendor_without_cpu_flags(tmp_path: Path):
    vm_tree: Tree = {
        "/proc/cpuinfo": cpuinfo_arm64(),
        f"{DMI}/sys_vendor": "Amazon EC2\n",
        f"{DMI}/product_name": "c7g.2xlarge\n",
    }
    facts = detect(tmp_path / "vm", vm_tree)
    assert facts.vm == "amazon"
    assert facts.summary == "VM (amazon, weak evidence)"
    assert any(line.startswith("weak evidence for a VM") for line in facts.evidence)
    metal = detect(tmp_path / "metal", {**vm_tree, f"{DMI}/product_name": "c7g.metal\n"})
    assert metal.vm is None
    assert metal.summary == "bare metal"


def test_google_compute_engine(tmp_path: Path):
    tree: Tree = {
        "/proc/cpuinfo": VM_CPUINFO,
        CLOCKSOURCE: "kvm-clock tsc acpi_pm \n",
        f"{DMI}/sys_vendor": "Google\n",
        f"{DMI}/product_name": "Google Compute Engine\n",
        f"{DMI}/bios_vendor": "Google\n",
    }
    assert detect(tmp_path, tree).summary == "VM (google)"


@pytest.mark.parametrize(
    ("dmi", "vm"),
    [
        ({"sys_vendor": "VMware, Inc.", "product_name": "VMware Virtual Platform"}, "vmware"),
        ({"sys_vendor": "innotek GmbH", "product_name": "VirtualBox"}, "oracle"),
        ({"sys_vendor": "Xen", "product_name": "HVM domU"}, "xen"),
        ({"sys_vendor": "Parallels Software International Inc."}, "parallels"),
        ({"sys_vendor": "Red Hat", "product_name": "KVM"}, "kvm"),
        ({"sys_vendor": "OpenStack Foundation", "product_name": "OpenStack Nova"}, "kvm"),
        ({"sys_vendor": "Bochs", "product_name": "Bochs"}, "bochs"),
        ({"sys_vendor": "Oracle Corporation", "product_name": "OCI"}, "oracle"),
    ],
)
def test_dmi_vendors(tmp_path: Path, dmi: dict[str, str], vm: str):
    tree: Tree = {"/proc/cpuinfo": VM_CPUINFO}
    tree.update({f"{DMI}/{name}": value + "\n" for name, value in dmi.items()})
    facts = detect(tmp_path, tree)
    assert facts.vm == vm
    assert facts.summary == f"VM ({vm})"


def test_oracle_server_is_bare_metal(tmp_path: Path):
    tree: Tree = {
        "/proc/cpuinfo": HOST_CPUINFO,
        f"{DMI}/sys_vendor": "Oracle Corporation\n",
        f"{DMI}/product_name": "ORACLE SERVER X9-2\n",
    }
    assert detect(tmp_path, tree).summary == "bare metal"


def test_xen_guest_and_dom0(tmp_path: Path):
    guest = detect(tmp_path / "domU", {"/sys/hypervisor/type": "xen\n"})
    assert guest.vm == "xen"
    assert guest.evidence == ["/sys/hypervisor/type = xen"]
    dom0 = detect(
        tmp_path / "dom0",
        {"/sys/hypervisor/type": "xen\n", "/proc/xen/capabilities": "control_d\n"},
    )
    assert dom0.vm is None
    assert any("control_d" in line for line in dom0.evidence)


def test_arm_device_tree_hypervisor(tmp_path: Path):
    tree: Tree = {
        "/proc/cpuinfo": cpuinfo_arm64(),
        "/proc/device-tree/hypervisor/compatible": b"linux,kvm\0",
        "/proc/device-tree/compatible": b"linux,dummy-virt\0",
    }
    facts = detect(tmp_path, tree)
    assert facts.vm == "kvm"
    assert "/proc/device-tree/hypervisor/compatible = linux,kvm" in facts.evidence
    assert "/proc/device-tree/compatible has linux,dummy-virt" in facts.evidence


FIRECRACKER: Tree = {
    "/proc/cpuinfo": VM_CPUINFO,
    "/proc/meminfo": meminfo(2097152),
    "/proc/sys/kernel/osrelease": "6.1.102\n",
    "/proc/cmdline": (
        "console=ttyS0 reboot=k panic=1 pci=off nomodule 8250.nr_uarts=0 i8042.noaux "
        "i8042.nomux i8042.dumbkbd root=/dev/vda rw virtio_mmio.device=4K@0xd0000000:5 "
        "virtio_mmio.device=4K@0xd0001000:6\n"
    ),
    CLOCKSOURCE: "kvm-clock tsc \n",
    "/sys/bus/virtio/devices/virtio0": None,
}


def test_firecracker(tmp_path: Path):
    facts = detect(tmp_path, FIRECRACKER)
    assert facts.vm == "firecracker"
    assert facts.summary == "VM (firecracker)"
    (line,) = [line for line in facts.evidence if "virtio_mmio" in line]
    assert line.startswith("/proc/cmdline has virtio_mmio.device=4K@0xd0000000:5, with no DMI")
    assert "most likely Firecracker" in line


def test_virtio_mmio_with_a_pci_bus_is_not_called_firecracker(tmp_path: Path):
    tree = {**FIRECRACKER, "/sys/bus/pci/devices/0000:00:00.0": None}
    facts = detect(tmp_path, tree)
    assert facts.vm == "kvm"
    assert any(line.endswith("but PCI devices exist") for line in facts.evidence)


def test_firecracker_named_on_the_command_line(tmp_path: Path):
    tree = {
        **FIRECRACKER,
        "/proc/cmdline": "console=ttyS0 reboot=k panic=1 rdinit=/init -- --firecracker-init\n",
        "/sys/bus/pci/devices/0000:00:00.0": None,
    }
    facts = detect(tmp_path, tree)
    assert facts.vm == "firecracker"
    assert "/proc/cmdline mentions 'firecracker'" in facts.evidence


def test_hypervisor_flag_alone_is_an_unidentified_vm(tmp_path: Path):
    facts = detect(tmp_path, {"/proc/cpuinfo": VM_CPUINFO})
    assert facts.vm == "vm"
    assert facts.summary == "VM (hypervisor not identified)"
    assert facts.evidence == [
        "cpu flag 'hypervisor' present",
        "weak evidence for a VM: only cpu flag 'hypervisor' present",
    ]


LXC: Tree = {
    **KERNEL,
    "/proc/cpuinfo": HOST_CPUINFO,
    "/run/systemd/container": "lxc\n",
    "/proc/1/environ": b"container=lxc\0container_ttys=\0HOME=/\0TERM=linux\0",
    "/proc/1/cgroup": "0::/init.scope\n",
    "/proc/self/cgroup": "0::/user.slice/user-0.slice/session-c1.scope\n",
    "/proc/self/mountinfo": (
        "1045 994 0:70 / / rw,relatime shared:574 - zfs rpool/data/subvol-101-disk-0 rw,xattr\n"
        "1050 1047 0:69 /proc/cpuinfo /proc/cpuinfo rw,nosuid,nodev,relatime shared:590 - "
        "fuse.lxcfs lxcfs rw,user_id=0,group_id=0,allow_other\n"
    ),
}


def test_lxc(tmp_path: Path):
    facts = detect(tmp_path, LXC)
    assert (facts.vm, facts.container) == (None, "lxc")
    assert facts.summary == "container (lxc) on bare metal"
    assert "/run/systemd/container = lxc" in facts.evidence
    assert "/proc/1/environ container=lxc" in facts.evidence
    assert any(line.startswith("/proc/self/mountinfo mentions lxcfs") for line in facts.evidence)


def test_docker(tmp_path: Path):
    facts = detect(tmp_path, {"/proc/cpuinfo": HOST_CPUINFO, **DOCKER})
    assert facts.container == "docker"
    assert facts.summary == "container (docker) on bare metal"
    assert "/.dockerenv exists" in facts.evidence
    cgroup_line = "/proc/1/cgroup mentions docker: 12:blkio:/docker/"
    assert any(line.startswith(cgroup_line) for line in facts.evidence)
    assert any(line.startswith("/proc/self/mountinfo mentions /docker/") for line in facts.evidence)
    assert not any(line.startswith("weak evidence") for line in facts.evidence)


def test_dockerenv_alone_is_weak(tmp_path: Path):
    facts = detect(tmp_path, {"/.dockerenv": ""})
    assert facts.container == "docker"
    assert facts.summary == "container (docker, weak evidence)"
    assert "weak evidence for a container: only /.dockerenv exists" in facts.evidence


def test_docker_in_a_kvm_guest(tmp_path: Path):
    facts = detect(tmp_path, {**KVM_GUEST, **DOCKER})
    assert (facts.vm, facts.container) == ("kvm", "docker")
    assert facts.summary == "container (docker) in a VM (kvm)"


def test_podman(tmp_path: Path):
    tree: Tree = {
        "/proc/cpuinfo": HOST_CPUINFO,
        "/run/.containerenv": (
            'engine="podman-4.9.3"\nname="vllm"\nid="8a1c2e"\nimage="docker.io/vllm/vllm-openai"\n'
            "rootless=1\n"
        ),
        "/proc/1/environ": b"PATH=/usr/bin\0container=podman\0HOME=/root\0",
        "/proc/1/cgroup": "0::/\n",
        "/proc/self/cgroup": "0::/\n",
        "/proc/self/mountinfo": (
            "530 480 0:48 / / rw,relatime - overlay overlay rw,lowerdir=/home/u/.local/share/"
            "containers/storage/overlay/l/ZQ3:/home/u/.local/share/containers/storage/overlay/"
            "l/7RT,upperdir=/home/u/.local/share/containers/storage/overlay/1f2/diff\n"
        ),
    }
    facts = detect(tmp_path, tree)
    assert facts.container == "podman"
    assert facts.summary == "container (podman) on bare metal"
    assert "/proc/1/environ container=podman" in facts.evidence
    assert "/run/.containerenv exists (podman, or CRI-O)" in facts.evidence


def test_kubernetes_pod_on_containerd(tmp_path: Path):
    cgroup = (
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2c1e5b7a.slice/"
        "cri-containerd-9f2d4c6b8a.scope\n"
    )
    tree: Tree = {
        "/proc/cpuinfo": VM_CPUINFO,
        "/proc/1/cgroup": cgroup,
        "/proc/self/cgroup": cgroup,
        "/proc/self/mountinfo": (
            "700 650 0:60 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/containerd/"
            "io.containerd.snapshotter.v1.overlayfs/snapshots/41/fs\n"
            "720 700 259:1 /var/lib/kubelet/pods/2c1e5b7a/etc-hosts /etc/hosts rw,relatime - "
            "ext4 /dev/nvme0n1p1 rw\n"
        ),
    }
    facts = detect(tmp_path, tree)
    assert facts.container == "kubernetes"
    assert facts.summary == "container (kubernetes) in a VM (hypervisor not identified)"
    assert any(line.startswith("/proc/1/cgroup mentions containerd") for line in facts.evidence)


def test_host_running_docker_is_not_a_container(tmp_path: Path):
    """The host sees its containers' mounts and dockerd's own cgroup; neither is a marker."""
    tree = {
        **BARE_METAL,
        "/proc/self/cgroup": "0::/system.slice/docker.service\n",
        "/proc/self/mountinfo": HOST_MOUNTINFO
        + "900 28 0:90 / /var/lib/docker/overlay2/9c1d0e2f/merged rw,relatime - overlay "
        "overlay rw,lowerdir=/var/lib/docker/overlay2/l/3QW\n",
    }
    facts = detect(tmp_path, tree)
    assert facts.container is None
    assert facts.summary == "bare metal"


def test_gvisor(tmp_path: Path):
    tree: Tree = {
        "/proc/cpuinfo": VM_CPUINFO,
        "/proc/sys/kernel/osrelease": "4.4.0\n",
        "/proc/version": "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016\n",
        "/.dockerenv": "",
    }
    facts = detect(tmp_path, tree)
    assert facts.container == "gvisor"
    assert facts.summary == "container (gvisor) in a VM (hypervisor not identified)"
    assert (
        "/proc/version = Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016 "
        "(gVisor's fixed build string)"
    ) in facts.evidence


def test_gvisor_named_in_the_release(tmp_path: Path):
    tree: Tree = {
        "/proc/sys/kernel/osrelease": "4.19.0-gvisor\n",
        "/proc/version": "Linux version 4.19.0-gvisor #1 SMP Sun Jan 10 15:06:54 PST 2016\n",
    }
    facts = detect(tmp_path, tree)
    assert facts.container == "gvisor"
    assert "kernel release contains 'gvisor': 4.19.0-gvisor" in facts.evidence


def test_wsl2(tmp_path: Path):
    tree: Tree = {
        "/proc/cpuinfo": VM_CPUINFO,
        "/proc/sys/kernel/osrelease": "5.15.153.1-microsoft-standard-WSL2\n",
        "/proc/version": (
            "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@941d701f84f1) (gcc (GCC) "
            "11.2.0, GNU ld (GNU Binutils) 2.37) #1 SMP Fri Mar 29 23:14:13 UTC 2024\n"
        ),
        "/sys/bus/vmbus/devices/00000000-0000-8899-0000-000000000000": None,
    }
    facts = detect(tmp_path, tree)
    assert (facts.vm, facts.container) == ("microsoft", "wsl")
    assert facts.summary == "container (wsl) in a VM (microsoft)"


def test_unreadable_environ_is_skipped(tmp_path: Path):
    # A directory stands in for a file this user may not read (tests may run as root).
    facts = detect(tmp_path, {"/proc/1/environ": None, "/run/systemd/container": "docker\n"})
    assert facts.container == "docker"
    assert facts.evidence == ["/run/systemd/container = docker"]


def test_nvml_mode(tmp_path: Path):
    passthrough = detect(tmp_path / "a", BARE_METAL, nvml_mode="passthrough")
    assert passthrough.vm == "vm"
    assert passthrough.gpu_virtualization == "passthrough"
    assert passthrough.summary == "VM (hypervisor not identified), GPU passthrough"
    assert "NVML GPU virtualization mode = passthrough" in passthrough.evidence
    metal = detect(tmp_path / "b", BARE_METAL, nvml_mode="bare metal")
    assert metal.summary == "bare metal"
    assert metal.gpu_virtualization == "bare metal"
    assert "NVML GPU virtualization mode = bare metal" in metal.evidence
    kvm = detect(tmp_path / "c", KVM_GUEST, nvml_mode="vgpu")
    assert kvm.summary == "VM (kvm), GPU vgpu"


def test_empty_tree_finds_no_markers(tmp_path: Path):
    facts = detect_virtualization(tmp_path)
    assert facts == VirtFacts(
        vm=None,
        container=None,
        gpu_virtualization=None,
        summary="no virtualization markers found",
        evidence=[],
    )


def test_arm_without_markers_is_not_called_bare_metal(tmp_path: Path):
    """No cpu flags means the absence of a hypervisor flag proves nothing."""
    facts = detect(tmp_path, {"/proc/cpuinfo": cpuinfo_arm64()})
    assert facts.summary == "no virtualization markers found"


def test_long_marker_lines_are_clipped(tmp_path: Path):
    cgroup = "0::/docker/" + "a" * 400 + "\n"
    facts = detect(tmp_path, {"/proc/1/cgroup": cgroup})
    (line,) = facts.evidence
    assert len(line) < 200
    assert line.endswith("...")


@pytest.mark.timing
def test_this_machine_is_read_quickly():
    start = time.perf_counter()
    facts = detect_virtualization()
    assert time.perf_counter() - start < 1.0
    assert facts.summary
    VirtFacts.model_validate_json(facts.model_dump_json())
