"""A run directory: the one place a run's results go, written as they are measured.

JSON Lines files are appended and flushed per batch, so a crash or Ctrl-C keeps every
finished request; JSON documents are replaced atomically, so a reader never sees half
of one. Everything written is scrubbed of the secrets servelab was handed (core.redact).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from servelab.core.errors import ConfigError
from servelab.core.redact import scrub_bytes

__all__ = ["DEFAULT_RUNS_DIR", "RunDir", "default_run_name"]

DEFAULT_RUNS_DIR = Path("servelab-runs")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def default_run_name(target: str) -> str:
    """A folder-safe name from a target such as 'http://127.0.0.1:8000' -> '127.0.0.1-8000'."""
    name = re.sub(r"^[a-z]+://", "", target).strip("/")
    return _UNSAFE.sub("-", name).strip("-")[:60] or "run"


class RunDir:
    """The folder of one run, and its open JSON Lines files."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._files: dict[str, IO[bytes]] = {}

    @classmethod
    def create(cls, *, name: str, out: Path | None = None, root: Path | None = None) -> RunDir:
        """`out` exactly, else `<root>/<UTC time>-<name>/`; refuses a non-empty `out`."""
        if out is None:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            out = (root or DEFAULT_RUNS_DIR) / f"{stamp}-{_UNSAFE.sub('-', name)}"
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ConfigError(f"output folder {out} exists and is not empty", hint="pick another")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create output folder {out}: {exc.strerror}") from None
        return cls(out)

    @property
    def runs_root(self) -> Path:
        """The folder holding this run and the catalogue."""
        return self.path.parent

    def append_jsonl(self, filename: str, rows: Iterable[dict[str, Any]]) -> None:
        """Append rows and flush them to the OS."""
        handle = self._files.get(filename)
        if handle is None:
            handle = self._files[filename] = (self.path / filename).open("ab")
        handle.write(scrub_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows)))
        handle.flush()

    def write_json(self, filename: str, document: Any) -> Path:
        """Replace `filename` atomically with `document` (a dict or a pydantic model)."""
        payload = (
            document.model_dump(mode="json", by_alias=True)
            if hasattr(document, "model_dump")
            else document
        )
        return self.write_bytes(filename, orjson.dumps(payload, option=orjson.OPT_INDENT_2))

    def write_text(self, filename: str, text: str) -> Path:
        return self.write_bytes(filename, text.encode())

    def write_bytes(self, filename: str, data: bytes) -> Path:
        target = self.path / filename
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(scrub_bytes(data))
        os.replace(tmp, target)
        return target

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()
