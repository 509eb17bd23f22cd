"""Loopback addresses and free ports: where servelab starts the servers it talks to."""

from __future__ import annotations

import socket
import urllib.parse

from servelab.core.errors import ConfigError, EndpointUnreachable

__all__ = [
    "LOCALHOST",
    "check_can_listen",
    "ensure_listening",
    "free_port",
    "port_free",
    "url_host",
]

LOCALHOST = "127.0.0.1"
_WILDCARDS = {"", "0.0.0.0", "::", "[::]"}


def url_host(host: str) -> str:
    """Where to reach a server listening on `host` from this machine."""
    return LOCALHOST if host in _WILDCARDS else host


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port nothing listens on right now, on `host` (IPv4 or IPv6)."""
    return _bind_any_port(host)


def check_can_listen(host: str) -> None:
    """A ConfigError unless a server could listen on `host` at all (on some free port)."""
    _bind_any_port(host)


def _bind_any_port(host: str) -> int:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            url_host(host), 0, type=socket.SOCK_STREAM
        )[0]
        with socket.socket(family, kind, proto) as sock:
            sock.bind(address)
            return int(sock.getsockname()[1])
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}: {exc.strerror or exc}") from None


def port_free(host: str, port: int) -> bool:
    """Whether a server could bind host:port now (SO_REUSEADDR, as servers set it)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM
        )[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except OSError:
        return False
    return True


def ensure_listening(url: str, *, timeout_s: float = 10.0) -> None:
    """Raise EndpointUnreachable unless something accepts a TCP connection at `url`.

    Cheap enough to run before anything is created for a run, so an unreachable URL
    leaves nothing behind.
    """
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"{url!r} has an invalid port") from None
    if not parts.hostname:
        raise ConfigError(f"{url!r} is not a URL such as http://127.0.0.1:8000")
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise EndpointUnreachable(f"nothing answers at {url}: {reason}", url=url) from None
