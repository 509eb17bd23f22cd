"""Checking a command's flags against the flags the engine really accepts.

The accepted flags come from the engine itself when it is installed (its `--help`,
parsed), otherwise from a list recorded in the repository for a named version
(`servelab/engines/flags/<engine>-<version>.txt`, made by `tools/extract_engine_flags.py`
from that version's argparse definitions). An unknown flag gets the closest valid name.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, Field

from servelab.core.errors import ConfigError

__all__ = [
    "HELP_TIMEOUT_S",
    "CliFlags",
    "FlagProblem",
    "FlagSet",
    "flags_from_help",
    "installed_flags",
    "recorded_flags",
    "unknown_flags",
]

HELP_TIMEOUT_S = 180.0
"""An engine's --help imports its whole stack (torch, CUDA libraries): allow for it."""

_FLAG = re.compile(r"--?[A-Za-z][\w.-]*")
_NUMBER = re.compile(r"-?\d")
_NO_MODULE = re.compile(r"No module named '?(\w+)")
_BOX = "│┃║|╭╰ \t"
_SEPARATORS = frozenset({"/", "*", "|", ","})


@dataclass(frozen=True, slots=True)
class CliFlags:
    """How an engine spells its flags and where its recorded list lives."""

    recorded: str | None
    """File name under servelab/engines/flags/, `<engine>-<version>.txt`."""
    help_args: tuple[str, ...] = ("--help",)
    """Appended to the adapter's `program(spec)` to print every flag."""
    underscores: bool = False
    """`--max_num_seqs` means `--max-num-seqs` (vLLM's FlexibleArgumentParser)."""
    dotted: bool = False
    """`--compilation-config.mode=3` sets a field of `--compilation-config` (vLLM)."""
    negation: bool = False
    """`--no-X` is accepted wherever `--X` is (vLLM hides these from its help)."""


@dataclass(frozen=True, slots=True)
class FlagSet:
    """The flags an engine accepts, and where that list came from."""

    flags: frozenset[str]
    source: str


class FlagProblem(BaseModel):
    """A flag the engine does not accept."""

    flag: str = Field(description="As written in the command.")
    suggestion: str | None = Field(default=None, description="The closest valid flag.")


def recorded_flags(name: str) -> FlagSet:
    """The flag list recorded in the repository under `name` (`sglang-0.5.23.txt`)."""
    try:
        text = resources.files("servelab.engines.flags").joinpath(name).read_text("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no recorded flag list {name!r}") from None
    flags = frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )
    return FlagSet(flags, f"recorded list {name.removesuffix('.txt')} (servelab/engines/flags)")


def installed_flags(
    argv: list[str], *, env: dict[str, str] | None = None
) -> tuple[FlagSet | None, str | None]:
    """The flags in the help that `argv` prints, or None and why it could not be read."""
    environ = {**os.environ, **(env or {}), "COLUMNS": "250", "NO_COLOR": "1", "TERM": "dumb"}
    shown = " ".join([Path(argv[0]).name, *argv[1:]])
    try:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=HELP_TIMEOUT_S,
            env=environ,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        return None, f"{argv[0]} is not installed (not found)"
    except subprocess.TimeoutExpired:
        return None, f"`{shown}` did not finish in {HELP_TIMEOUT_S:g} s"
    flags = flags_from_help(result.stdout)
    if result.returncode != 0 or len(flags) < 3:
        output = (result.stderr or result.stdout).strip()
        missing = _NO_MODULE.search(output)
        if missing:
            return None, f"{missing.group(1)} is not installed for {argv[0]}"
        why = output.splitlines()[-1] if output else f"exit code {result.returncode}"
        return None, f"`{shown}` failed: {why}"
    return FlagSet(flags, f"`{shown}` (installed)"), None


def flags_from_help(text: str) -> frozenset[str]:
    """The flags an argparse, click or Typer (Rich) help text lists.

    A line lists options when it starts with a flag; its flags run until the first word
    that is neither a flag, a metavar (`MODEL_PATH`, `TEXT`, `<int>`, `{a,b}`, `[a|b]`)
    nor a separator: that word starts the help text, whose prose is not read.
    """
    flags: set[str] = set()
    for line in text.splitlines():
        words = line.strip(_BOX).split()
        if not words or not _FLAG.fullmatch(words[0].split("=", 1)[0].rstrip(",")):
            continue
        for word in words:
            name = word.rstrip(",;").split("=", 1)[0]
            if _FLAG.fullmatch(name):
                flags.add(name)
            elif not (word in _SEPARATORS or word[0] in "<[{(" or word.rstrip(",").isupper()):
                break
    return frozenset(flags)


def unknown_flags(args: list[str], accepted: FlagSet, cli: CliFlags) -> list[FlagProblem]:
    """The flags in `args` that `accepted` lacks, each with the closest valid name."""
    problems: list[FlagProblem] = []
    for token in args:
        if not token.startswith("-") or token in ("-", "--") or _NUMBER.match(token):
            continue
        name = _normalize(token.split("=", 1)[0], cli)
        if _known(name, accepted.flags, cli):
            continue
        close = difflib.get_close_matches(name, accepted.flags, n=1, cutoff=0.6)
        problems.append(FlagProblem(flag=token, suggestion=close[0] if close else None))
    return problems


def _normalize(name: str, cli: CliFlags) -> str:
    if cli.dotted and name.startswith("--"):
        name = name.split(".", 1)[0]
    if cli.underscores and name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name


def _known(name: str, flags: frozenset[str], cli: CliFlags) -> bool:
    if name in flags:
        return True
    return cli.negation and name.startswith("--no-") and "--" + name[5:] in flags
