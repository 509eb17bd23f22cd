"""The interpreter behind a program on PATH, for every `#!` form pip and people write."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from servelab.engines.vllm import script_interpreter


def _script(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_a_plain_shebang_names_the_interpreter(on_path: Path):
    _script(on_path, "vllm", f"#!{sys.executable}\nprint('x')\n")
    assert script_interpreter("vllm") == sys.executable


def test_env_names_the_interpreter_it_finds_on_path(on_path: Path):
    _script(on_path, "python-here", "#!/bin/sh\n")
    _script(on_path, "vllm", "#!/usr/bin/env -S python-here -u\nprint('x')\n")
    assert script_interpreter("vllm") == str(on_path / "python-here")


def test_pips_shell_launcher_for_long_paths_names_the_interpreter(on_path: Path):
    long = "/opt/" + "deep/" * 40 + "venv/bin/python3"
    _script(on_path, "vllm", f"#!/bin/sh\n'''exec' \"{long}\" \"$0\" \"$@\"\n' '''\nimport x\n")
    assert script_interpreter("vllm") == long
    _script(on_path, "other", f"#!/bin/sh\n'''exec' {long} \"$0\" \"$@\"\n' '''\n")
    assert script_interpreter("other") == long


def test_no_script_or_no_interpreter_is_none(on_path: Path):
    _script(on_path, "binary", "\x7fELF...")
    _script(on_path, "shell", "#!/bin/sh\necho hi\n")
    assert script_interpreter("binary") is None
    assert script_interpreter("shell") is None
    assert script_interpreter("no-such-program-here") is None
