"""Loopback addresses and free ports: where servelab starts the servers it talks to."""

from __future__ import annotations

import socket

from servelab.core.errors import ConfigError

__all__ = ["LOCALHOST", "free_port", "url_host"]

LOCALHOST = "127.0.0.1"
_WILDCARDS = {"", "0.0.0.0", "::", "[::]"}


def url_host(host: str) -> str:
    """Where to reach a server listening on `host` from this machine."""
    return LOCALHOST if host in _WILDCARDS else host


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port nothing listens on right now, on `host` (IPv4 or IPv6)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            url_host(host), 0, type=socket.SOCK_STREAM
        )[0]
        with socket.socket(family, kind, proto) as sock:
            sock.bind(address)
            return int(sock.getsockname()[1])
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}: {exc.strerror or exc}") from None
