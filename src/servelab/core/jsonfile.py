"""Reading a JSON document a user points at, with one clear error for each way it fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servelab.core.errors import ConfigError

__all__ = ["read_json_object"]


def read_json_object(path: Path, *, what: str) -> dict[str, Any]:
    """The JSON object in `path`; `what` names it in errors ("probe file", "model config")."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no {what} at {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path} is not a JSON object")
    return document
