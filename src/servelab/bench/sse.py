"""An incremental Server-Sent Events decoder for streamed completions.

Bytes arrive in arbitrary pieces; `feed` returns the `data` payload of every event
completed by those bytes. Lines may end in LF or CRLF; `data:` lines of one event are
joined with LF as the SSE specification says; comments and other fields are ignored.
"""

from __future__ import annotations

__all__ = ["SSEDecoder"]


class SSEDecoder:
    """Turns a byte stream into event payloads."""

    __slots__ = ("_buffer", "_data")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the payloads of the events they complete, in order."""
        buffer = self._buffer + chunk
        events: list[bytes] = []
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = buffer[start:end]
            start = end + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        self._buffer = buffer[start:]
        return events

    def close(self) -> list[bytes]:
        """End of stream: an event not terminated by a blank line still counts."""
        tail = self.feed(b"\n\n") if self._buffer.strip() or self._data else []
        self._buffer = b""
        return tail
