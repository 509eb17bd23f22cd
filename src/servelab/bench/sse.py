"""An incremental Server-Sent Events decoder for streamed completions.

Bytes arrive in arbitrary pieces; `feed` returns the `data` payload of every event
completed by those bytes, the same events whatever the split. As the SSE specification
says: lines end in LF, CRLF or a lone CR; one leading byte-order mark is dropped; the
`data` lines of one event are joined with LF; a `data` line with an empty value (or a
bare `data`) makes an event with empty data, which callers treat as a keep-alive;
comments and other fields are ignored. Unlike the specification, an event the stream
ends without terminating still counts (`close`).
"""

from __future__ import annotations

import re

__all__ = ["SSEDecoder"]

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")


class SSEDecoder:
    """Turns a byte stream into event payloads."""

    __slots__ = ("_after_cr", "_buffer", "_data", "_started")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] | None = None
        self._started = False
        self._after_cr = False
        """The last piece ended in CR: an LF opening the next one belongs to that line end."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the payloads of the events they complete, in order."""
        buffer = self._buffer + chunk
        if not self._started:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                self._buffer = buffer
                return []
            self._started = True
            buffer = buffer.removeprefix(_BOM)
        if self._after_cr and buffer:
            self._after_cr = False
            buffer = buffer.removeprefix(b"\n")
        events: list[bytes] = []
        if b"\r" not in buffer:
            *lines, self._buffer = buffer.split(b"\n")
            for line in lines:
                self._take_line(line, events)
            return events
        start = 0
        for end in _LINE_END.finditer(buffer):
            if end.group() == b"\r" and end.end() == len(buffer):
                self._after_cr = True
            self._take_line(buffer[start : end.start()], events)
            start = end.end()
        self._buffer = buffer[start:]
        return events

    def close(self) -> list[bytes]:
        """End of stream: an event not terminated by a blank line still counts."""
        tail = self.feed(b"\n\n") if self._buffer.strip() or self._data is not None else []
        self._buffer = b""
        return tail

    def _take_line(self, line: bytes, events: list[bytes]) -> None:
        """One line: a blank one ends the event; only `data` fields are kept."""
        if not line:
            if self._data is not None:
                events.append(b"\n".join(self._data))
                self._data = None
            return
        name, colon, value = line.partition(b":")
        if name != b"data":
            return
        if colon and value.startswith(b" "):
            value = value[1:]
        if self._data is None:
            self._data = []
        self._data.append(value)
