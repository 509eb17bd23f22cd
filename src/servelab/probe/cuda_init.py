"""Whether CUDA initialises, read without torch, and the evidence for why it does not.

`nvidia-smi` and NVML can see every GPU while CUDA refuses to start: NVML talks to the
kernel module directly, CUDA also needs the unified-memory module (`nvidia_uvm`), its
device nodes, and a user-space driver of the module's own version. The check loads
libcuda with ctypes in a child process (`cuda_child`) with a timeout, since a broken
driver can hang in cuInit; the evidence is read under `root`, so tests use synthetic
/proc, /sys and /dev trees and a stand-in libcuda.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servelab.probe.sysfs import read_text, resolve

__all__ = ["CUDA_RESULT_NAMES", "CudaInit", "check_cuda", "result_name"]

CUDA_TIMEOUT_S = 30.0
LIBRARY_ENV = "SERVELAB_LIBCUDA"
"""Names the libcuda to load instead of libcuda.so.1 (a stand-in in tests)."""

CUDA_RESULT_NAMES = {
    0: "CUDA_SUCCESS",
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    34: "CUDA_ERROR_STUB_LIBRARY",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    800: "CUDA_ERROR_NOT_PERMITTED",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    805: "CUDA_ERROR_MPS_CONNECTION_FAILED",
    999: "CUDA_ERROR_UNKNOWN",
}
"""CUresult values of cuda.h that cuInit and cuDeviceGetCount return."""

_MODULE_VERSION = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")
_LIBRARY_VERSION = re.compile(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")


class CudaInit(BaseModel):
    """What cuInit said, and the facts that explain it."""

    model_config = ConfigDict(extra="forbid")

    library: str = Field(description="The name loaded: libcuda.so.1 unless overridden.")
    library_path: str | None = Field(description="The file the loader picked, resolved.")
    library_version: str | None = Field(description="From the file's name: libcuda.so.570.1.2.")
    load_error: str | None = Field(default=None, description="Why libcuda could not be loaded.")
    timed_out: bool = Field(default=False, description="cuInit did not return in time.")
    child_error: str | None = Field(default=None, description="The child died or said nothing.")
    init_result: int | None = None
    init_result_name: str | None = None
    device_count: int | None = Field(default=None, description="cuDeviceGetCount, when it ran.")
    driver_api_version: str | None = Field(
        default=None, description="cuDriverGetVersion: the newest CUDA the driver runs, '12.8'."
    )
    module_flavour: str | None = Field(description="'open' or 'proprietary' kernel module.")
    module_version: str | None = Field(description="From /proc/driver/nvidia/version.")
    module_version_line: str | None
    uvm_loaded: bool = Field(description="/sys/module/nvidia_uvm exists.")
    uvm_disable_hmm: str | None = Field(description="The nvidia_uvm parameter as read: Y or N.")
    dev_nvidia_uvm: bool
    dev_nvidia_uvm_tools: bool
    visible_devices: str | None = Field(description="CUDA_VISIBLE_DEVICES as the child got it.")
    kernel_release: str | None = Field(description="/proc/sys/kernel/osrelease (uname -r).")

    @property
    def ok(self) -> bool:
        return self.init_result == 0 and self.device_count is not None


def result_name(code: int, reported: str | None = None) -> str:
    """cuda.h's name for a CUresult; the driver's own name for a code the table lacks."""
    return CUDA_RESULT_NAMES.get(code) or reported or f"CUresult {code}"


def check_cuda(
    root: Path = Path("/"),
    *,
    library: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = CUDA_TIMEOUT_S,
) -> CudaInit | None:
    """Run cuInit in a child and read the evidence; None where no NVIDIA driver is installed.

    "Not installed" means libcuda cannot be loaded and no kernel module is loaded: a CPU
    machine, where saying nothing is right.
    """
    environment = dict(os.environ if env is None else env)
    name = library or environment.get(LIBRARY_ENV) or "libcuda.so.1"
    child = _run_child(name, environment, timeout_s)
    line = read_text(root, "/proc/driver/nvidia/version")
    first = line.splitlines()[0] if line else None
    match = _MODULE_VERSION.search(first or "")
    path = child.get("path")
    version = _LIBRARY_VERSION.search(str(path or ""))
    result = CudaInit(
        library=name,
        library_path=str(path) if path else None,
        library_version=version.group(1) if version else None,
        load_error=_str(child.get("load_error")),
        timed_out=bool(child.get("timed_out")),
        child_error=_str(child.get("child_error")),
        init_result=_int(child.get("init_result")),
        init_result_name=None,
        device_count=_int(child.get("device_count")),
        driver_api_version=_api_version(_int(child.get("driver_api_version"))),
        module_flavour=None if first is None else ("open" if " Open " in first else "proprietary"),
        module_version=match.group(1) if match else None,
        module_version_line=first,
        uvm_loaded=resolve(root, "/sys/module/nvidia_uvm").is_dir(),
        uvm_disable_hmm=read_text(root, "/sys/module/nvidia_uvm/parameters/uvm_disable_hmm"),
        dev_nvidia_uvm=resolve(root, "/dev/nvidia-uvm").exists(),
        dev_nvidia_uvm_tools=resolve(root, "/dev/nvidia-uvm-tools").exists(),
        visible_devices=environment.get("CUDA_VISIBLE_DEVICES"),
        kernel_release=read_text(root, "/proc/sys/kernel/osrelease"),
    )
    if result.init_result is not None:
        reported = _str(child.get("init_result_name"))
        result.init_result_name = result_name(result.init_result, reported)
    if result.load_error is not None and first is None:
        return None
    return result


def _run_child(library: str, env: dict[str, str], timeout_s: float) -> dict[str, object]:
    command = [sys.executable, "-m", "servelab.probe.cuda_child", library]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return {"timed_out": True}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or [""])[-1][:200]
        return {"child_error": f"the check's process exited with {done.returncode}: {tail}"}
    try:
        parsed = json.loads(lines[-1])
    except ValueError:
        return {"child_error": f"the check's process printed {lines[-1][:120]!r}"}
    return parsed if isinstance(parsed, dict) else {"child_error": "the check printed no object"}


def _api_version(value: int | None) -> str | None:
    return None if not value else f"{value // 1000}.{value % 1000 // 10}"


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None
