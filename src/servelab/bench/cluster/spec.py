"""What `--cluster` asks for: which Ray cluster, and how the client spreads over it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from servelab.core.errors import ConfigError

__all__ = ["ClusterSpec", "OnNodeLoss", "parse_cluster_address"]

AUTO = "auto"
_CLIENT_SCHEME = "ray://"


class OnNodeLoss(StrEnum):
    """What a sweep does after a level that lost a client node."""

    CONTINUE = "continue"
    """Later levels run on the nodes that are left."""
    STOP = "stop"
    """The sweep ends after the degraded level (which is kept)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterSpec:
    """A Ray cluster for the client's workers; `workers_per_node` None spreads the run's
    `--workers` (or its default) evenly over the nodes."""

    address: str
    """`auto` (the cluster this process is in) or `ray://HOST:PORT` (Ray Client)."""
    workers_per_node: int | None = None
    driver_node: bool = True
    """Also run workers on the node this process runs on."""
    on_node_loss: OnNodeLoss = OnNodeLoss.CONTINUE


def parse_cluster_address(text: str) -> str:
    """`auto` or `ray://HOST:PORT`, checked; anything else is one clear error."""
    text = text.strip()
    if text == AUTO:
        return text
    host, _, port = text.removeprefix(_CLIENT_SCHEME).rpartition(":")
    if not text.startswith(_CLIENT_SCHEME) or not host or not port.isdigit():
        raise ConfigError(
            f"--cluster {text!r} is not a Ray address",
            hint="give ray://HOST:PORT (Ray Client, port 10001 by default) or auto (the "
            "cluster this machine is a node of)",
        )
    return text
