"""The CUDA driver check's child: load libcuda, call cuInit(0), count devices.

Run as `python -m servelab.probe.cuda_child [LIBRARY]`; prints one JSON object. It is a
child process because a broken driver can hang in cuInit or abort the process, and the
parent must survive both. Standard library only, so it starts in milliseconds.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

DEFAULT_LIBRARY = "libcuda.so.1"


def _name(lib: ctypes.CDLL, code: int) -> str | None:
    """The driver's own name for a result code, when it exports cuGetErrorName."""
    try:
        get_name = lib.cuGetErrorName
    except AttributeError:
        return None
    text = ctypes.c_char_p()
    if get_name(ctypes.c_int(code), ctypes.byref(text)) != 0 or not text.value:
        return None
    return text.value.decode("ascii", "replace")


def _loaded_path(library: str) -> str | None:
    """Which file the loader picked: the mapping whose name is the library's."""
    base = os.path.basename(library).split(".so")[0]
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if path.startswith("/") and os.path.basename(path).startswith(base + ".so"):
                    return os.path.realpath(path)
    except OSError:
        return None
    return None


def check(library: str) -> dict[str, object]:
    out: dict[str, object] = {"library": library}
    try:
        lib = ctypes.CDLL(library)
    except OSError as exc:
        out["load_error"] = str(exc)
        return out
    out["path"] = _loaded_path(library)
    version = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
        out["driver_api_version"] = version.value
    code = lib.cuInit(ctypes.c_uint(0))
    out["init_result"] = code
    out["init_result_name"] = _name(lib, code)
    if code == 0:
        count = ctypes.c_int(0)
        count_code = lib.cuDeviceGetCount(ctypes.byref(count))
        out["count_result"] = count_code
        if count_code == 0:
            out["device_count"] = count.value
    return out


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_LIBRARY)), flush=True)
