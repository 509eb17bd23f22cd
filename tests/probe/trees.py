"""Synthetic procfs/sysfs trees: realistic file contents, written under a test's tmp_path."""

from __future__ import annotations

from pathlib import Path

Tree = dict[str, str | bytes | None]
"""Relative path -> contents; None makes an empty directory."""


def write_tree(root: Path, files: Tree) -> Path:
    """Write `files` under `root` ("/proc/cpuinfo" and "proc/cpuinfo" mean the same)."""
    for rel, content in files.items():
        path = root / rel.lstrip("/")
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


# Sapphire Rapids-era flags, as the kernel prints them (abridged only by taste, not format).
_X86_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi "
    "mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon "
    "pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq "
    "dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 "
    "x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch "
    "cpuid_fault epb cat_l3 cat_l2 cdp_l3 invpcid_single intel_ppin cdp_l2 ssbd mba ibrs ibpb "
    "stibp ibrs_enhanced tpr_shadow flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 avx2 "
    "smep bmi2 erms invpcid cqm rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb "
    "intel_pt avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc "
    "cqm_occup_llc cqm_mbm_total cqm_mbm_local split_lock_detect avx_vnni avx512_bf16 wbnoinvd "
    "dtherm ida arat pln pts hfi vnmi avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes "
    "vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid bus_lock_detect "
    "cldemote movdiri movdir64b enqcmd fsrm md_clear serialize tsxldtrk pconfig arch_lbr ibt "
    "amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities"
)


def cpuinfo_x86(
    *,
    sockets: int = 2,
    cores: int = 4,
    threads: int = 2,
    model: str = "Intel(R) Xeon(R) Platinum 8480+",
    hypervisor: bool = False,
) -> str:
    """/proc/cpuinfo of an x86 box; CPUs numbered thread-major, as Linux enumerates them."""
    flags = _X86_FLAGS + (" hypervisor" if hypervisor else "")
    blocks: list[str] = []
    for thread in range(threads):
        for socket in range(sockets):
            for core in range(cores):
                cpu = len(blocks)
                apicid = socket * 128 + core * 2 + thread
                blocks.append(
                    f"processor\t: {cpu}\n"
                    "vendor_id\t: GenuineIntel\n"
                    "cpu family\t: 6\n"
                    "model\t\t: 143\n"
                    f"model name\t: {model}\n"
                    "stepping\t: 8\n"
                    "microcode\t: 0x2b0004b1\n"
                    "cpu MHz\t\t: 2000.000\n"
                    "cache size\t: 107520 KB\n"
                    f"physical id\t: {socket}\n"
                    f"siblings\t: {cores * threads}\n"
                    f"core id\t\t: {core}\n"
                    f"cpu cores\t: {cores}\n"
                    f"apicid\t\t: {apicid}\n"
                    f"initial apicid\t: {apicid}\n"
                    "fpu\t\t: yes\n"
                    "fpu_exception\t: yes\n"
                    "cpuid level\t: 32\n"
                    "wp\t\t: yes\n"
                    f"flags\t\t: {flags}\n"
                    "vmx flags\t: vnmi preemption_timer posted_intr invvpid ept_x_only ept_ad\n"
                    "bugs\t\t: spectre_v1 spectre_v2 spec_store_bypass swapgs eibrs_pbrsb\n"
                    "bogomips\t: 4000.00\n"
                    "clflush size\t: 64\n"
                    "cache_alignment\t: 64\n"
                    "address sizes\t: 46 bits physical, 57 bits virtual\n"
                    "power management:\n"
                )
    return "\n".join(blocks) + "\n"


def cpuinfo_arm64(cpus: int = 4) -> str:
    """/proc/cpuinfo of an arm64 server (Neoverse V2): no model name, no flags, no topology."""
    block = (
        "processor\t: {cpu}\n"
        "BogoMIPS\t: 2000.00\n"
        "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
        "asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat "
        "ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 "
        "flagm2 frint svei8mm svebf16 i8mm bf16 dgh rng bti\n"
        "CPU implementer\t: 0x41\n"
        "CPU architecture: 8\n"
        "CPU variant\t: 0x0\n"
        "CPU part\t: 0xd4f\n"
        "CPU revision\t: 0\n"
    )
    return "\n".join(block.format(cpu=cpu) for cpu in range(cpus)) + "\n"


RASPBERRY_PI_CPUINFO = (
    "processor\t: 0\n"
    "BogoMIPS\t: 108.00\n"
    "Features\t: fp asimd evtstrm crc32 cpuid\n"
    "CPU implementer\t: 0x41\n"
    "CPU architecture: 8\n"
    "CPU variant\t: 0x0\n"
    "CPU part\t: 0xd08\n"
    "CPU revision\t: 3\n"
    "\n"
    "processor\t: 1\n"
    "BogoMIPS\t: 108.00\n"
    "Features\t: fp asimd evtstrm crc32 cpuid\n"
    "CPU implementer\t: 0x41\n"
    "CPU architecture: 8\n"
    "CPU variant\t: 0x0\n"
    "CPU part\t: 0xd08\n"
    "CPU revision\t: 3\n"
    "\n"
    "Hardware\t: BCM2835\n"
    "Revision\t: c03114\n"
    "Serial\t\t: 10000000a1b2c3d4\n"
    "Model\t\t: Raspberry Pi 4 Model B Rev 1.4\n"
)


def meminfo(total_kb: int) -> str:
    """/proc/meminfo, with MemTotal as given and the usual lines around it."""
    return (
        f"MemTotal:       {total_kb} kB\n"
        f"MemFree:        {total_kb * 9 // 10} kB\n"
        f"MemAvailable:   {total_kb * 19 // 20} kB\n"
        "Buffers:         1043688 kB\n"
        "Cached:         18764520 kB\n"
        "SwapCached:            0 kB\n"
        "Active:          9875412 kB\n"
        "Inactive:       14578112 kB\n"
        "SwapTotal:       8388604 kB\n"
        "SwapFree:        8388604 kB\n"
        "Dirty:               212 kB\n"
        "AnonPages:       4623480 kB\n"
        "Shmem:            201780 kB\n"
        "HugePages_Total:       0\n"
        "HugePages_Free:        0\n"
        "Hugepagesize:       2048 kB\n"
        "DirectMap4k:     1048000 kB\n"
        "DirectMap2M:    51339264 kB\n"
        "DirectMap1G:   1020264448 kB\n"
    )


def node_meminfo(node: int, total_kb: int) -> str:
    """/sys/devices/system/node/nodeN/meminfo, as the kernel pads it."""
    lines = [
        ("MemTotal", total_kb),
        ("MemFree", total_kb * 9 // 10),
        ("MemUsed", total_kb - total_kb * 9 // 10),
        ("SwapCached", 0),
        ("Active", 4937706),
        ("Inactive", 7289056),
        ("Dirty", 106),
        ("FilePages", 9892102),
        ("AnonPages", 2311740),
    ]
    text = "".join(f"Node {node} {key + ':':<16}{value:>12} kB\n" for key, value in lines)
    return text + f"Node {node} HugePages_Total:     0\nNode {node} HugePages_Free:      0\n"


KERNEL = {
    "/proc/sys/kernel/osrelease": "6.8.0-45-generic\n",
    "/proc/version": (
        "Linux version 6.8.0-45-generic (buildd@lcy02-amd64-115) (x86_64-linux-gnu-gcc-13 "
        "(Ubuntu 13.2.0-23ubuntu4) 13.2.0, GNU ld (GNU Binutils for Ubuntu) 2.42) "
        "#45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024\n"
    ),
    "/proc/sys/kernel/hostname": "gpu-node-07\n",
    "/proc/cmdline": (
        "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=0f6c1a3e-7b1d-4f4e-9f61-3f0c2a9d5e11 "
        "ro quiet splash iommu=pt vt.handoff=7\n"
    ),
}

HOST_MOUNTINFO = (
    "22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "23 28 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:14 - proc proc rw\n"
    "28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n"
    "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
)

# A 2-socket, 16-thread box with one NUMA node per socket: the motivating machine, scaled down.
BARE_METAL: Tree = {
    **KERNEL,
    "/proc/cpuinfo": cpuinfo_x86(sockets=2, cores=4, threads=2),
    "/proc/meminfo": meminfo(1056760132),
    "/proc/1/cgroup": "0::/init.scope\n",
    "/proc/self/cgroup": "0::/user.slice/user-1000.slice/session-3.scope\n",
    "/proc/self/mountinfo": HOST_MOUNTINFO,
    "/sys/devices/system/cpu/online": "0-15\n",
    "/sys/devices/system/node/online": "0-1\n",
    "/sys/devices/system/node/possible": "0-1\n",
    "/sys/devices/system/node/node0/cpulist": "0-3,8-11\n",
    "/sys/devices/system/node/node0/distance": "10 21\n",
    "/sys/devices/system/node/node0/meminfo": node_meminfo(0, 528327564),
    "/sys/devices/system/node/node1/cpulist": "4-7,12-15\n",
    "/sys/devices/system/node/node1/distance": "21 10\n",
    "/sys/devices/system/node/node1/meminfo": node_meminfo(1, 528432568),
    "/sys/devices/system/clocksource/clocksource0/available_clocksource": "tsc hpet acpi_pm \n",
    "/sys/class/dmi/id/sys_vendor": "Supermicro\n",
    "/sys/class/dmi/id/product_name": "SYS-421GE-TNRT\n",
    "/sys/class/dmi/id/board_vendor": "Supermicro\n",
    "/sys/class/dmi/id/bios_vendor": "American Megatrends International, LLC.\n",
    "/sys/class/dmi/id/product_version": "0123456789\n",
    "/sys/bus/pci/devices/0000:00:00.0": None,
    "/sys/bus/pci/devices/0000:17:00.0": None,
}

# Proxmox/libvirt guest: QEMU's DMI, accelerated by KVM, its paravirtual clock.
KVM_GUEST: Tree = {
    **KERNEL,
    "/proc/cpuinfo": cpuinfo_x86(sockets=1, cores=8, threads=1, hypervisor=True),
    "/proc/meminfo": meminfo(263856484),
    "/proc/1/cgroup": "0::/init.scope\n",
    "/proc/self/cgroup": "0::/user.slice/user-0.slice/session-1.scope\n",
    "/proc/self/mountinfo": HOST_MOUNTINFO,
    "/sys/devices/system/clocksource/clocksource0/available_clocksource": (
        "kvm-clock tsc hpet acpi_pm \n"
    ),
    "/sys/class/dmi/id/sys_vendor": "QEMU\n",
    "/sys/class/dmi/id/product_name": "Standard PC (Q35 + ICH9, 2009)\n",
    "/sys/class/dmi/id/board_vendor": "\n",
    "/sys/class/dmi/id/bios_vendor": "EDK II\n",
    "/sys/class/dmi/id/product_version": "pc-q35-8.1\n",
    "/sys/bus/pci/devices/0000:00:00.0": None,
}

DOCKER_CGROUP_V1 = (
    "".join(
        f"{n}:{c}:/docker/4f1e8a6d2b7c9e0f3a5d8c1b6e2f9a0d7c4b1e8f5a2d9c6b3e0f7a4d1c8b5e2f\n"
        for n, c in (
            (12, "blkio"),
            (11, "cpu,cpuacct"),
            (10, "memory"),
            (9, "devices"),
            (8, "pids"),
            (1, "name=systemd"),
        )
    )
    + "0::/\n"
)

DOCKER_MOUNTINFO = (
    "612 540 0:52 / / rw,relatime master:300 - overlay overlay rw,"
    "lowerdir=/var/lib/docker/overlay2/l/3QWZ7J2KTXVH4BC5X6Q2Y3ZABC:/var/lib/docker/overlay2/l/"
    "H7JKD2Q3WE4R5T6Y7U8I9O0PQR,upperdir=/var/lib/docker/overlay2/9c1d0e2f/diff,"
    "workdir=/var/lib/docker/overlay2/9c1d0e2f/work\n"
    "613 612 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "640 612 259:2 /var/lib/docker/containers/4f1e8a6d2b7c/resolv.conf /etc/resolv.conf "
    "rw,relatime - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n"
    "641 612 259:2 /var/lib/docker/containers/4f1e8a6d2b7c/hostname /etc/hostname "
    "rw,relatime - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n"
)

DOCKER: Tree = {
    "/.dockerenv": "",
    "/proc/1/cgroup": DOCKER_CGROUP_V1,
    "/proc/self/cgroup": DOCKER_CGROUP_V1,
    "/proc/self/mountinfo": DOCKER_MOUNTINFO,
}
