"""Where a result came from: software versions, the servelab commit, the host."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["git_sha", "host_facts", "versions"]

_PACKAGES = ("servelab", "aiohttp", "numpy", "pydantic", "tokenizers", "transformers", "torch")


def versions() -> dict[str, str]:
    """Python and the installed versions of the packages that shape a measurement."""
    found = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def git_sha() -> str | None:
    """The commit servelab runs from, when it runs from a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        result = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = result.stdout.strip()
    return sha if result.returncode == 0 and len(sha) == 40 else None


def host_facts() -> dict[str, str | int]:
    """The machine the client ran on."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count() or 0,
    }
