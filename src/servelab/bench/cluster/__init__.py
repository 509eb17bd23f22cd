"""The load generator's workers as Ray actors spread over a cluster (`bench --cluster`).

Ray is imported by `fleet` and `pool` only, which `open_cluster` loads when a run asks
for a cluster; the rest of this package is plain data and never imports Ray.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from servelab.bench.cluster.errors import ClusterError
from servelab.bench.cluster.spec import ClusterSpec, OnNodeLoss, parse_cluster_address
from servelab.bench.endpoint import EndpointConfig

if TYPE_CHECKING:
    from servelab.bench.cluster.fleet import ClientFleet

__all__ = ["ClusterError", "ClusterSpec", "OnNodeLoss", "open_cluster", "parse_cluster_address"]


def open_cluster(
    spec: ClusterSpec, endpoint: EndpointConfig
) -> AbstractContextManager[ClientFleet]:
    """The run's workers on the cluster (bench.cluster.fleet.open_fleet), Ray loaded now."""
    try:
        from servelab.bench.cluster.fleet import open_fleet
    except ImportError as exc:
        raise ClusterError(
            f"--cluster needs Ray ({exc}): pip install 'servelab[cluster]' here and on every node"
        ) from None
    return open_fleet(spec, endpoint)
