"""The optional packages the embedded engine needs, checked without importing them."""

from __future__ import annotations

from importlib.util import find_spec

from servelab.core.errors import EngineSetupError

__all__ = ["require_local_extra"]

_BUILD_MODULES = ("torch", "transformers", "safetensors")
_SERVE_MODULES = ("fastapi", "uvicorn", "openai")


def require_local_extra(*, serving: bool = False) -> None:
    """Raise EngineSetupError naming the missing modules unless servelab[local] is installed."""
    wanted = _BUILD_MODULES + (_SERVE_MODULES if serving else ())
    missing = [name for name in wanted if find_spec(name) is None]
    if missing:
        raise EngineSetupError(
            f"the embedded engine needs {', '.join(missing)}: install servelab[local]"
        )
