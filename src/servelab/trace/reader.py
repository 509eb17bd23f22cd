"""Reading a Chrome/Kineto trace's events one at a time, gzip or plain, never the whole file.

vLLM's trace of 8 requests of 32 tokens on a tiny CPU model holds 250,000 events (76 MB of
JSON), hundreds of MB as Python dicts; ijson parses `traceEvents` item by item so that
only the event at hand is held.

A file cut short (a profiler killed while writing, a partial copy) still yields every
event before the cut; the reader says where it stopped instead of failing.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servelab.core.errors import ConfigError

__all__ = ["TraceEvents"]

_GZIP_MAGIC = b"\x1f\x8b"
_PEEK_BYTES = 4096


class TraceEvents:
    """The events of one trace file, iterated once; `cut` says why the reading stopped early.

    Both of Chrome's trace formats are read: a JSON object with a `traceEvents` list (what
    torch's profiler writes) and a bare JSON array of events. A file that is missing, not
    JSON, or holds no event raises ConfigError; a file that ends early does not.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.read = 0
        """Events read so far."""
        self.cut: str | None = None
        """Why the file could not be read to its end, once iteration stopped there."""
        if not path.is_file():
            raise ConfigError(f"no trace file at {path}")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import ijson  # type: ignore[import-untyped]

        with _open(self.path) as stream:
            prefix = _items_prefix(stream, self.path)
            try:
                for event in ijson.items(_Chunks(stream), prefix, use_float=True):
                    self.read += 1
                    if isinstance(event, dict):
                        yield event
            except (ijson.JSONError, EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
                if self.read == 0:
                    raise ConfigError(
                        f"{self.path} is not a JSON trace: {_reason(exc)}",
                        hint="a Chrome/Kineto trace, .json or .json.gz",
                    ) from exc
                self.cut = _reason(exc)
        if self.read == 0:
            raise ConfigError(
                f"{self.path} holds no trace events",
                hint="a Chrome/Kineto trace: a JSON object with a traceEvents list",
            )


@contextlib.contextmanager
def _open(path: Path) -> Iterator[gzip.GzipFile | io.BufferedReader]:
    """The file's bytes, decompressed on the fly when it starts with gzip's magic number."""
    with path.open("rb") as raw:
        if raw.peek(2)[:2] != _GZIP_MAGIC:
            yield raw
            return
        with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
            yield unzipped


class _Chunks:
    """`read` as one underlying read: the bytes before a gzip stream's cut still arrive.

    A buffered `read(n)` gathers n bytes over several reads of the decompressor and loses
    them all when one of those raises at the cut; `read1` returns each piece as it comes.
    """

    def __init__(self, stream: gzip.GzipFile | io.BufferedReader) -> None:
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        return self._stream.read1(size)


def _items_prefix(stream: gzip.GzipFile | io.BufferedReader, path: Path) -> str:
    """ijson's prefix of the events: `traceEvents.item` in an object, `item` in an array."""
    try:
        head = stream.peek(_PEEK_BYTES).lstrip()
    except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
        raise ConfigError(f"{path} is not a readable trace: {_reason(exc)}") from exc
    if not head:
        raise ConfigError(f"{path} is empty", hint="a Chrome/Kineto trace, .json or .json.gz")
    if head[:1] == b"[":
        return "item"
    if head[:1] == b"{":
        return "traceEvents.item"
    raise ConfigError(
        f"{path} is not a JSON trace: it starts with {head[:16]!r}",
        hint="a Chrome/Kineto trace, .json or .json.gz",
    )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
