"""What a node says about itself before the first level: its host, its servelab, and
whether it reaches the endpoint. Run on every node, as a Ray task, by `fleet`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp

from servelab import __version__
from servelab.bench.cluster.hosts import HostId, this_host

__all__ = ["REACH_TIMEOUT_S", "NodeFacts", "node_facts"]

REACH_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class NodeFacts:
    host: HostId
    servelab_version: str
    unreachable: str | None
    """Why the endpoint's /v1/models could not be fetched from the node; None when it
    answered (any status: the driver's preflight has judged the answer already)."""


def node_facts(base_url: str, headers: dict[str, str]) -> NodeFacts:
    """This node's facts (runs on the node)."""
    return NodeFacts(this_host(), __version__, asyncio.run(_reach(base_url, headers)))


async def _reach(base_url: str, headers: dict[str, str]) -> str | None:
    url = base_url.rstrip("/") + "/v1/models"
    timeout = aiohttp.ClientTimeout(total=REACH_TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(headers=headers, timeout=timeout) as session,
            session.get(url) as response,
        ):
            await response.read()
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return str(exc) or type(exc).__name__
    return None
