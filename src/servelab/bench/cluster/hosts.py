"""Which host, and which loopback, a process is on: the rule for loopback endpoints.

A URL such as http://127.0.0.1:8000 means "this machine" to whoever connects: a node on
another host (or in another network namespace, as a container is) would reach its own
loopback, not the engine's. Two processes share a loopback when they share the kernel
(its boot id) and the network namespace.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from servelab.core.errors import ConfigError

__all__ = ["HostId", "is_loopback_url", "refuse_loopback", "this_host"]

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_NET_NAMESPACE = Path("/proc/self/ns/net")


@dataclass(frozen=True, slots=True)
class HostId:
    """What tells one host's loopback from another's."""

    hostname: str
    boot_id: str
    """The running kernel's id (Linux); empty elsewhere."""
    net_namespace: int
    """The inode of the process's network namespace (Linux); 0 elsewhere."""


def this_host() -> HostId:
    """The calling process's host."""
    try:
        boot_id = _BOOT_ID.read_text().strip()
        namespace = os.stat(_NET_NAMESPACE).st_ino
    except OSError:
        boot_id, namespace = "", 0
    return HostId(socket.gethostname(), boot_id, namespace)


def is_loopback_url(url: str) -> bool:
    """True when the URL's host is `localhost` or an address of the loopback range."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_loopback(url: str, driver: HostId, nodes: dict[str, HostId]) -> None:
    """A loopback URL with a node (by label) that does not share the driver's loopback."""
    if not is_loopback_url(url):
        return
    away = [label for label, host in nodes.items() if host != driver]
    if away:
        raise ConfigError(
            f"{url} is a loopback address, and client node {away[0]} is on another host",
            hint="give the endpoint an address every node can reach: its host name or IP",
        )
