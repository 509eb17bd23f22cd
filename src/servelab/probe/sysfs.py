"""Reading procfs and sysfs under a root directory, so probes run on synthetic trees in tests.

Every path is written as on the live system ("/proc/cpuinfo") and resolved under `root`.
Missing or unreadable files are normal (containers hide them, other kernels lack them):
the readers return None or an empty result instead of raising.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["format_cpulist", "list_dir", "parse_cpulist", "read_text", "resolve"]


def resolve(root: Path, path: str) -> Path:
    """`path` ("/proc/cpuinfo") as seen from `root` (/tmp/t): /tmp/t/proc/cpuinfo."""
    return root / path.lstrip("/")


def read_text(root: Path, path: str) -> str | None:
    """The file's text, stripped; None when it is missing or unreadable.

    Undecodable bytes are replaced rather than fatal: DMI strings and environ files are not
    guaranteed UTF-8.
    """
    try:
        return resolve(root, path).read_text(encoding="utf-8", errors="replace").strip()
    except (OSError, ValueError):
        return None


def list_dir(root: Path, path: str) -> list[str] | None:
    """The sorted entry names of a directory; None when it is missing or unreadable."""
    try:
        return sorted(entry.name for entry in resolve(root, path).iterdir())
    except OSError:
        return None


def parse_cpulist(text: str) -> list[int]:
    """The CPUs of a kernel cpulist ("0-3,8,10-11"), sorted and unique.

    Raises ValueError on anything that is not comma-separated numbers and ranges.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition("-")
        lo = int(first)
        hi = int(last) if sep else lo
        if hi < lo or lo < 0:
            raise ValueError(f"bad cpulist range {part!r}")
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def format_cpulist(cpus: list[int]) -> str:
    """The kernel's compact form of a CPU set: [0, 1, 2, 3, 8, 10, 11] -> "0-3,8,10-11"."""
    ranges: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)
