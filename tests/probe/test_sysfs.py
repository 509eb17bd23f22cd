"""Reading files under a root, and the kernel's cpulist format."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.probe.sysfs import format_cpulist, list_dir, parse_cpulist, read_text, resolve
from tests.probe.trees import write_tree


def test_resolve_puts_absolute_paths_under_root(tmp_path: Path):
    assert resolve(tmp_path, "/proc/cpuinfo") == tmp_path / "proc" / "cpuinfo"
    assert resolve(Path("/"), "/proc/cpuinfo") == Path("/proc/cpuinfo")


def test_read_text_strips_and_tolerates_missing_files(tmp_path: Path):
    write_tree(tmp_path, {"/sys/class/dmi/id/sys_vendor": "QEMU\n", "/sys/bus/pci": None})
    assert read_text(tmp_path, "/sys/class/dmi/id/sys_vendor") == "QEMU"
    assert read_text(tmp_path, "/sys/class/dmi/id/product_name") is None
    assert read_text(tmp_path, "/sys/bus/pci") is None  # a directory is not readable text


def test_read_text_replaces_undecodable_bytes(tmp_path: Path):
    write_tree(tmp_path, {"/proc/1/environ": b"container=lxc\0TERM=\xff\0"})
    assert read_text(tmp_path, "/proc/1/environ") == "container=lxc\0TERM=\ufffd\0"


def test_list_dir(tmp_path: Path):
    write_tree(tmp_path, {"/sys/bus/pci/devices/0000:17:00.0": None, "/sys/bus/pci/x": ""})
    write_tree(tmp_path, {"/sys/bus/pci/devices/0000:00:00.0": None})
    assert list_dir(tmp_path, "/sys/bus/pci/devices") == ["0000:00:00.0", "0000:17:00.0"]
    assert list_dir(tmp_path, "/sys/bus/vmbus/devices") is None
    assert list_dir(tmp_path, "/sys/bus/pci/x") is None


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
        ("0-3,8-11\n", [0, 1, 2, 3, 8, 9, 10, 11]),
        ("5", [5]),
        ("", []),
        ("\n", []),
        ("3,1,1-2", [1, 2, 3]),
    ],
)
def test_parse_cpulist(text: str, cpus: list[int]):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a", "3-1", "-1", "0-", "1-2-3", "0-7:2"])
def test_parse_cpulist_rejects_malformed(text: str):
    with pytest.raises(ValueError):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
        ([11, 10, 8, 3, 2, 1, 0, 0], "0-3,8,10-11"),
        ([4], "4"),
        ([], ""),
        ([0, 2, 4], "0,2,4"),
    ],
)
def test_format_cpulist(cpus: list[int], text: str):
    assert format_cpulist(cpus) == text


def test_cpulist_round_trip():
    text = "0-27,56-83"
    assert format_cpulist(parse_cpulist(text)) == text
