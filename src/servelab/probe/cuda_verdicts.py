"""Verdicts on the CUDA driver check: why CUDA will not start, or the facts when it does.

Each known cause is a rule on the evidence, not on the result code alone: the same
CUDA_ERROR_NOT_INITIALIZED comes from the open module's HMM on some kernels and from a
missing unified-memory module, and only the facts tell them apart. Causes that match
are all listed, most specific first; with none, the generic next steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.probe.cuda_init import CudaInit
from servelab.probe.verdict import Severity, Verdict

__all__ = ["cuda_verdicts"]

_MEANINGS = {
    "CUDA_ERROR_NOT_INITIALIZED": (
        "the driver refused to initialise CUDA, though the kernel module answers NVML"
    ),
    "CUDA_ERROR_NO_DEVICE": "the driver initialised but this process may use no GPU",
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH": (
        "the user-space driver (libcuda) and the kernel module are of different versions"
    ),
    "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE": (
        "a CUDA forward-compatibility libcuda was loaded on a GPU that does not support it"
    ),
    "CUDA_ERROR_STUB_LIBRARY": "the CUDA toolkit's link-time stub was loaded, not the driver",
    "CUDA_ERROR_DEVICE_UNAVAILABLE": "the GPUs are busy or in exclusive-process mode elsewhere",
    "CUDA_ERROR_OPERATING_SYSTEM": "an operating-system call of the driver failed",
    "CUDA_ERROR_SYSTEM_NOT_READY": "the system is not ready (fabric manager not running?)",
    "CUDA_ERROR_UNKNOWN": "the driver failed without saying why",
}


_HMM_RESULTS = frozenset({"CUDA_ERROR_NOT_INITIALIZED", "CUDA_ERROR_UNKNOWN"})
"""What cuInit returns when the open module's HMM cannot start (CUDA's known issue, and
open-gpu-kernel-modules issues 797, 901, 947). HMM on alone is no cause: it is the x86_64
default since driver 535, and CUDA starts with it on most kernels."""


@dataclass(frozen=True)
class _Cause:
    evidence: str
    action: str


def cuda_verdicts(cuda: CudaInit, *, nvml_count: int | None, in_container: bool) -> list[Verdict]:
    """cuda-init-failed (critical) with its causes, or cuda-ok and a count check."""
    if not cuda.ok:
        return [_failed(cuda, in_container)]
    verdicts = [
        Verdict(
            code="cuda-ok",
            severity=Severity.OK,
            title=(
                f"CUDA initialises: driver API {cuda.driver_api_version or '?'},"
                f" {cuda.device_count} device(s)"
            ),
            evidence=_facts(cuda),
            meaning="Engines can create CUDA contexts on this machine.",
            action="Nothing to do.",
            subjects=["host"],
        )
    ]
    if nvml_count is not None and cuda.device_count != nvml_count:
        hidden = (
            f"CUDA_VISIBLE_DEVICES={cuda.visible_devices}"
            if cuda.visible_devices is not None
            else "CUDA_VISIBLE_DEVICES is not set"
        )
        verdicts.append(
            Verdict(
                code="cuda-count-differs",
                severity=Severity.WARNING,
                title=f"CUDA sees {cuda.device_count} GPU(s), NVML sees {nvml_count}",
                evidence=[f"cuDeviceGetCount: {cuda.device_count}", f"NVML: {nvml_count}", hidden],
                meaning=(
                    "An engine started from here uses only the GPUs CUDA sees: a layout sized "
                    "for all of them will not fit, or runs on fewer than planned."
                ),
                action=(
                    "Check CUDA_VISIBLE_DEVICES (and MIG mode, where a GPU shows as instances); "
                    "unset it to use every GPU."
                ),
                subjects=["host"],
            )
        )
    return verdicts


def _failed(cuda: CudaInit, in_container: bool) -> Verdict:
    if cuda.load_error is not None:
        what = f"libcuda could not be loaded: {cuda.load_error}"
    elif cuda.timed_out:
        what = "cuInit(0) did not return: the driver hangs"
    elif cuda.child_error is not None:
        what = f"cuInit(0) crashed its process ({cuda.child_error})"
    elif cuda.init_result not in (None, 0):
        what = f"cuInit(0) returned {cuda.init_result} ({cuda.init_result_name})"
    else:
        what = "cuDeviceGetCount failed after cuInit"
    causes = _causes(cuda, in_container)
    meaning = _MEANINGS.get(cuda.init_result_name or "", "CUDA cannot be used")
    if causes:
        action = " ".join(f"{i}. {cause.action}" for i, cause in enumerate(causes, 1))
    else:
        action = (
            "Read the kernel log (dmesg | grep -i -E 'NVRM|Xid|nvidia-uvm'); after a driver "
            "update, reboot so the loaded module matches the installed libcuda; check that "
            "nvidia-smi and `nvidia-modprobe -u -c=0` succeed as root."
        )
    return Verdict(
        code="cuda-init-failed",
        severity=Severity.CRITICAL,
        title=f"CUDA will not start: {what}",
        evidence=[what, *(cause.evidence for cause in causes), *_facts(cuda)],
        meaning=(
            f"{meaning[0].upper()}{meaning[1:]}: no engine can use the GPUs here, whatever "
            "nvidia-smi shows (NVML talks to the kernel module without CUDA)."
        ),
        action=action,
        subjects=["host"],
    )


def _causes(cuda: CudaInit, in_container: bool) -> list[_Cause]:
    causes: list[_Cause] = []
    if cuda.init_result_name == "CUDA_ERROR_NO_DEVICE" and cuda.visible_devices is not None:
        causes.append(
            _Cause(
                f"CUDA_VISIBLE_DEVICES={cuda.visible_devices!r}",
                "Unset CUDA_VISIBLE_DEVICES or name GPUs that exist (indexes or GPU- UUIDs).",
            )
        )
    if cuda.load_error is not None and cuda.module_version is not None:
        causes.append(
            _Cause(
                "the kernel module is loaded but no libcuda.so.1 is on the loader's path",
                "Install the driver's user-space libraries of the same version "
                f"({cuda.module_version}); in a container, run it with the NVIDIA container "
                "toolkit (--gpus all, or CDI) so they are mounted in.",
            )
        )
    if (
        (cuda.init_result_name in _HMM_RESULTS or cuda.timed_out)
        and cuda.module_flavour == "open"
        and (cuda.uvm_disable_hmm or "").upper() in ("N", "0")
    ):
        causes.append(
            _Cause(
                "the open kernel module with HMM on (nvidia_uvm uvm_disable_hmm="
                f"{cuda.uvm_disable_hmm}): on some kernels (KASLR, Proxmox's) its memory "
                "region cannot be reserved and cuInit fails",
                "On the host: echo 'options nvidia_uvm uvm_disable_hmm=1' > "
                "/etc/modprobe.d/nvidia-uvm.conf, stop every GPU process, then "
                "rmmod nvidia_uvm && modprobe nvidia_uvm (or reboot); a container sees the "
                "host's module, so this is done on the host.",
            )
        )
    if not cuda.uvm_loaded and cuda.module_version is not None and not in_container:
        causes.append(
            _Cause(
                "the nvidia_uvm module is not loaded (/sys/module/nvidia_uvm is missing)",
                "Load it: modprobe nvidia_uvm (or nvidia-modprobe -u -c=0 as root).",
            )
        )
    if not cuda.dev_nvidia_uvm or not cuda.dev_nvidia_uvm_tools:
        missing = [
            name
            for name, present in (
                ("/dev/nvidia-uvm", cuda.dev_nvidia_uvm),
                ("/dev/nvidia-uvm-tools", cuda.dev_nvidia_uvm_tools),
            )
            if not present
        ]
        where = "inside this container" if in_container else "on this machine"
        fix = (
            "Pass them into the container (docker --device /dev/nvidia-uvm --device "
            "/dev/nvidia-uvm-tools; for LXC, lxc.cgroup2.devices.allow and lxc.mount.entry "
            "lines for both), after the host has created them (nvidia-modprobe -u -c=0)."
            if in_container
            else "Create them: nvidia-modprobe -u -c=0 as root (it also loads nvidia_uvm)."
        )
        causes.append(_Cause(f"{' and '.join(missing)} missing {where}", fix))
    if (
        cuda.library_version is not None
        and cuda.module_version is not None
        and cuda.library_version != cuda.module_version
    ):
        causes.append(
            _Cause(
                f"libcuda {cuda.library_version} ({cuda.library_path}) against kernel module "
                f"{cuda.module_version}",
                "Make them one version: reboot after a driver update, or in a container let "
                "the NVIDIA container toolkit mount the host's libcuda instead of one baked "
                "into the image.",
            )
        )
    if cuda.init_result_name == "CUDA_ERROR_STUB_LIBRARY" or "stubs" in (cuda.library_path or ""):
        causes.append(
            _Cause(
                f"the loaded libcuda is the toolkit's stub ({cuda.library_path})",
                "Remove the CUDA toolkit's lib64/stubs folder from LD_LIBRARY_PATH.",
            )
        )
    return causes


def _facts(cuda: CudaInit) -> list[str]:
    facts = []
    if cuda.module_version_line:
        facts.append(f"/proc/driver/nvidia/version: {cuda.module_version_line}")
    else:
        facts.append("/proc/driver/nvidia/version: missing (no NVIDIA kernel module visible)")
    if cuda.library_path:
        facts.append(f"libcuda: {cuda.library_path}")
    if cuda.driver_api_version:
        facts.append(f"driver API version: {cuda.driver_api_version}")
    hmm = cuda.uvm_disable_hmm or "not readable"
    facts.append(
        f"nvidia_uvm: {'loaded' if cuda.uvm_loaded else 'not loaded'}; uvm_disable_hmm={hmm}"
    )
    nodes = ", ".join(
        f"{name} {'present' if present else 'missing'}"
        for name, present in (
            ("/dev/nvidia-uvm", cuda.dev_nvidia_uvm),
            ("/dev/nvidia-uvm-tools", cuda.dev_nvidia_uvm_tools),
        )
    )
    facts.append(nodes)
    if cuda.kernel_release:
        facts.append(f"kernel: {cuda.kernel_release}")
    return facts
