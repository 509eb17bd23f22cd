"""One rule for "this is CI", and for what the test set-up must have provided there.

Any `CI` other than empty, `0` or `false` is CI (runners set `true`, `1` or their name).
There, a test whose prerequisite is missing fails: the set-up should have installed it.
Elsewhere (the GPU machine, a laptop without the services) it skips and says why.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

__all__ = ["in_ci", "missing", "require_module"]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def missing(why: str) -> None:
    """Fail in CI, skip elsewhere, with the reason; in a test, or at a module's top (the
    whole module then: pytest refuses a module-level skip not marked as one)."""
    if in_ci():
        pytest.fail(f"CI={os.environ.get('CI')} and {why}", pytrace=False)
    pytest.skip(why, allow_module_level=True)


def require_module(name: str) -> ModuleType:
    """The module, imported; missing() when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"{name} is not installed ({exc})")
        raise  # missing() always raises; this keeps the type checker honest
