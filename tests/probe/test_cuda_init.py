"""The CUDA driver check on a stand-in libcuda built here from C, and synthetic trees.

The stand-in exports cuInit, cuDeviceGetCount, cuDriverGetVersion and cuGetErrorName;
what they return is chosen per test through the environment the child inherits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from servelab.probe.cuda_init import CudaInit, check_cuda
from servelab.probe.cuda_verdicts import cuda_verdicts
from servelab.probe.verdict import Severity
from tests.ci import missing

STANDIN_C = r"""
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static int env_int(const char *name, int fallback) {
    const char *value = getenv(name);
    return value ? atoi(value) : fallback;
}
int cuDriverGetVersion(int *version) { *version = env_int("STANDIN_VERSION", 12080); return 0; }
int cuInit(unsigned int flags) {
    if (getenv("STANDIN_HANG")) for (;;) sleep(1);
    if (getenv("STANDIN_ABORT")) abort();
    return flags ? 1 : env_int("STANDIN_INIT", 0);
}
int cuDeviceGetCount(int *count) { *count = env_int("STANDIN_COUNT", 8); return 0; }
int cuGetErrorName(int code, const char **name) {
    if (code == 4242) { *name = "CUDA_ERROR_STANDIN_ONLY"; return 0; }
    *name = 0;
    return 1;
}
"""

OPEN_MODULE = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build"
    "  (dvs-builder@U16-I3-B03-4-3)  Fri Mar 14 02:13:18 UTC 2025"
)
PROPRIETARY_MODULE = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  Fri Mar 14 2025"


def _compiler() -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        missing("no C compiler to build the stand-in libcuda")
    return compiler


def build_standin(folder: Path, version: str = "570.133.20") -> Path:
    source = folder / "standin.c"
    source.write_text(STANDIN_C)
    library = folder / f"libcuda.so.{version}"
    subprocess.run(
        [_compiler(), "-shared", "-fPIC", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    return library


def machine(
    root: Path,
    *,
    module: str | None = OPEN_MODULE,
    hmm: str | None = "N",
    uvm_nodes: bool = True,
) -> Path:
    """A synthetic /proc, /sys and /dev: the driver's version line, nvidia_uvm, device nodes."""
    if module is not None:
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text(module + "\nGCC version:  gcc 12\n")
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text("6.8.12-4-pve\n")
    if hmm is not None:
        (root / "sys/module/nvidia_uvm/parameters").mkdir(parents=True)
        (root / "sys/module/nvidia_uvm/parameters/uvm_disable_hmm").write_text(hmm + "\n")
    (root / "dev").mkdir()
    if uvm_nodes:
        (root / "dev/nvidia-uvm").touch()
        (root / "dev/nvidia-uvm-tools").touch()
    return root


def run(tmp_path: Path, library: Path | str, root: Path, **env: str) -> CudaInit | None:
    base = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sys.path)}
    return check_cuda(root, library=str(library), env=base | env, timeout_s=10)


def test_the_story_open_module_with_hmm_gives_the_uvm_disable_hmm_fix(tmp_path: Path) -> None:
    library = build_standin(tmp_path)
    cuda = run(tmp_path, library, machine(tmp_path / "root"), STANDIN_INIT="3")
    assert cuda is not None and not cuda.ok
    assert (cuda.init_result, cuda.init_result_name) == (3, "CUDA_ERROR_NOT_INITIALIZED")
    assert (cuda.module_flavour, cuda.module_version, cuda.library_version) == (
        "open",
        "570.133.20",
        "570.133.20",
    )
    [verdict] = cuda_verdicts(cuda, nvml_count=8, in_container=True)
    assert verdict.code == "cuda-init-failed" and verdict.severity is Severity.CRITICAL
    assert "returned 3 (CUDA_ERROR_NOT_INITIALIZED)" in verdict.title
    assert "options nvidia_uvm uvm_disable_hmm=1" in verdict.action
    assert "modprobe nvidia_uvm" in verdict.action
    assert any("Open Kernel Module" in line for line in verdict.evidence)
    assert any("uvm_disable_hmm=N" in line for line in verdict.evidence)
    assert any("6.8.12-4-pve" in line for line in verdict.evidence)


def test_hmm_already_off_is_not_blamed(tmp_path: Path) -> None:
    library = build_standin(tmp_path)
    cuda = run(tmp_path, library, machine(tmp_path / "root", hmm="Y"), STANDIN_INIT="3")
    assert cuda is not None
    [verdict] = cuda_verdicts(cuda, nvml_count=8, in_container=False)
    assert "uvm_disable_hmm=1" not in verdict.action
    assert "dmesg" in verdict.action  # nothing specific matched: the generic steps


def test_no_device_with_hmm_on_blames_cuda_visible_devices_not_hmm(tmp_path: Path) -> None:
    """As on the H200 (open module, HMM on, CUDA fine) with CUDA_VISIBLE_DEVICES empty."""
    library = build_standin(tmp_path)
    root = machine(tmp_path / "root")
    cuda = run(tmp_path, library, root, STANDIN_INIT="100", CUDA_VISIBLE_DEVICES="")
    assert cuda is not None and cuda.init_result_name == "CUDA_ERROR_NO_DEVICE"
    [verdict] = cuda_verdicts(cuda, nvml_count=1, in_container=False)
    assert verdict.evidence[1] == "CUDA_VISIBLE_DEVICES=''"
    assert verdict.action.startswith("1. Unset CUDA_VISIBLE_DEVICES")
    assert "uvm_disable_hmm=1" not in verdict.action


def test_the_proprietary_module_is_not_blamed_for_hmm(tmp_path: Path) -> None:
    library = build_standin(tmp_path)
    root = machine(tmp_path / "root", module=PROPRIETARY_MODULE)
    cuda = run(tmp_path, library, root, STANDIN_INIT="3")
    assert cuda is not None and cuda.module_flavour == "proprietary"
    [verdict] = cuda_verdicts(cuda, nvml_count=8, in_container=False)
    assert "uvm_disable_hmm=1" not in verdict.action


def test_missing_uvm_device_nodes_in_a_container(tmp_path: Path) -> None:
    library = build_standin(tmp_path)
    root = machine(tmp_path / "root", hmm="Y", uvm_nodes=False)
    cuda = run(tmp_path, library, root, STANDIN_INIT="999")
    assert cuda is not None and cuda.init_result_name == "CUDA_ERROR_UNKNOWN"
    [verdict] = cuda_verdicts(cuda, nvml_count=8, in_container=True)
    assert "/dev/nvidia-uvm and /dev/nvidia-uvm-tools missing inside this container" in (
        verdict.evidence
    )
    assert "--device /dev/nvidia-uvm" in verdict.action


def test_a_libcuda_of_another_version_than_the_module(tmp_path: Path) -> None:
    library = build_standin(tmp_path, version="565.57.01")
    cuda = run(tmp_path, library, machine(tmp_path / "root", hmm="Y"), STANDIN_INIT="803")
    assert cuda is not None and cuda.init_result_name == "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"
    [verdict] = cuda_verdicts(cuda, nvml_count=8, in_container=False)
    assert any("libcuda 565.57.01" in e and "module 570.133.20" in e for e in verdict.evidence)
    assert "different versions" in verdict.meaning


def test_a_code_only_the_driver_names_keeps_the_drivers_name(tmp_path: Path) -> None:
    library = build_standin(tmp_path)
    cuda = run(tmp_path, library, machine(tmp_path / "root"), STANDIN_INIT="4242")
    assert cuda is not None and cuda.init_result_name == "CUDA_ERROR_STANDIN_ONLY"


def test_a_hanging_driver_is_cut_off_and_said(tmp_path: Path) -> None:
    library = build_standin(tmp_path)
    root = machine(tmp_path / "root")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sys.path)}
    cuda = check_cuda(root, library=str(library), env=env | {"STANDIN_HANG": "1"}, timeout_s=2)
    assert cuda is not None and cuda.timed_out and cuda.init_result is None
    [verdict] = cuda_verdicts(cuda, nvml_count=8, in_container=False)
    assert "did not return" in verdict.title
    assert "uvm_disable_hmm=1" in verdict.action  # open module, HMM on: the likely cause


def test_a_crashing_driver_is_a_failed_check_not_a_crashed_probe(tmp_path: Path) -> None:
    library = build_standin(tmp_path)
    cuda = run(tmp_path, library, machine(tmp_path / "root"), STANDIN_ABORT="1")
    assert cuda is not None and cuda.child_error is not None
    [verdict] = cuda_verdicts(cuda, nvml_count=8, in_container=False)
    assert verdict.code == "cuda-init-failed" and "crashed" in verdict.title


def test_cuda_ok_and_a_count_that_differs_from_nvml(tmp_path: Path) -> None:
    library = build_standin(tmp_path)
    root = machine(tmp_path / "root", hmm="Y")
    cuda = run(tmp_path, library, root, STANDIN_COUNT="4", CUDA_VISIBLE_DEVICES="0,1,2,3")
    assert cuda is not None and cuda.ok and cuda.device_count == 4
    assert cuda.driver_api_version == "12.8"
    ok, differs = cuda_verdicts(cuda, nvml_count=8, in_container=False)
    assert ok.code == "cuda-ok" and "driver API 12.8, 4 device(s)" in ok.title
    assert differs.code == "cuda-count-differs" and "CUDA_VISIBLE_DEVICES=0,1,2,3" in (
        differs.evidence
    )
    assert cuda_verdicts(cuda, nvml_count=4, in_container=False) == [ok]


def test_no_driver_at_all_says_nothing_and_a_module_without_libcuda_says_why(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "libcuda.so.1"
    assert run(tmp_path, missing, machine(tmp_path / "bare", module=None, hmm=None)) is None
    cuda = run(tmp_path, missing, machine(tmp_path / "root"))
    assert cuda is not None and cuda.load_error is not None
    [verdict] = cuda_verdicts(cuda, nvml_count=8, in_container=False)
    assert "no libcuda.so.1 is on the loader's path" in " ".join(verdict.evidence)
    assert "570.133.20" in verdict.action


def test_servelab_probe_reports_the_check(tmp_path: Path) -> None:
    library = build_standin(tmp_path)
    env = os.environ | {"SERVELAB_LIBCUDA": str(library), "STANDIN_INIT": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "servelab", "probe", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    document = json.loads(done.stdout)
    assert document["cuda"]["init_result_name"] == "CUDA_ERROR_NO_DEVICE"
    codes = {v["code"]: v for v in document["verdicts"]}
    assert codes["cuda-init-failed"]["severity"] == "critical"
