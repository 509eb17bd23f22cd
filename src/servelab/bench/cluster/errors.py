"""The one error of the cluster client: a Ray cluster that cannot carry the load."""

from __future__ import annotations

from servelab.core.errors import ServelabError

__all__ = ["ClusterError", "first_line"]


class ClusterError(ServelabError):
    """No cluster at the address, Ray missing, workers that cannot be placed, or every
    client node lost; the message says which, in one line."""


def first_line(exc: BaseException) -> str:
    """An exception's first line (Ray's run to many), or its class's name; a first line
    that only introduces what follows (Ray Client's "failure from server:", then a
    traceback) gets the last line too, where the traceback says what went wrong."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[-1]}"
    return lines[0]
