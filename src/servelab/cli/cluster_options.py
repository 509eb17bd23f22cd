"""`--cluster` and its companions: the client's workers as Ray actors on a cluster's nodes
(bench.cluster). `bench`, `run` and `tune` take them through `shared_options.SharedOptions`."""

from __future__ import annotations

from typing import Annotated

import typer

from servelab.bench.cluster import ClusterSpec, OnNodeLoss, parse_cluster_address
from servelab.cli.options import check_range
from servelab.core.errors import ConfigError

__all__ = ["Cluster", "DriverNode", "NodeLoss", "WorkersPerNode", "cluster_spec"]

Cluster = Annotated[
    str | None,
    typer.Option(
        metavar="ADDRESS",
        help="Run the client's workers as Ray actors spread over a cluster's nodes:"
        " ray://HOST:PORT (Ray Client) or auto (the cluster this machine is a node of)."
        " Needs servelab\\[cluster] here and on every node; an engine on 127.0.0.1 only"
        " serves nodes of this host. See docs/CLUSTER.md.",
    ),
]
WorkersPerNode = Annotated[
    int | None,
    typer.Option(help="--cluster: client workers on every node, in place of --workers."),
]
DriverNode = Annotated[
    bool, typer.Option(help="--cluster: also run workers on the node of this machine.")
]
NodeLoss = Annotated[
    OnNodeLoss,
    typer.Option(
        help="--cluster: after a level that lost a node (kept, marked degraded), run the"
        " later levels on the nodes left, or stop the sweep."
    ),
]


def cluster_spec(
    address: str | None,
    *,
    workers: int | None = None,
    workers_per_node: int | None,
    driver_node: bool,
    on_node_loss: OnNodeLoss,
) -> ClusterSpec | None:
    """The cluster the workers run on, its options checked; None without --cluster."""
    if address is None:
        if (workers_per_node, driver_node, on_node_loss) != (None, True, OnNodeLoss.CONTINUE):
            raise ConfigError(
                "--workers-per-node, --no-driver-node and --on-node-loss apply to --cluster"
            )
        return None
    if workers is not None and workers_per_node is not None:
        raise ConfigError("give --workers (the total) or --workers-per-node, not both")
    check_range("--workers-per-node", workers_per_node, low=1)
    return ClusterSpec(
        address=parse_cluster_address(address),
        workers_per_node=workers_per_node,
        driver_node=driver_node,
        on_node_loss=on_node_loss,
    )
