"""The options that `bench`, `run` and `tune` (`tune run` and `tune join`) all take,
declared once as one option group.

An option these commands should all take is one field here: the commands show it in
their --help, and read its value as `shared.<field>`.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.bench.cluster import ClusterSpec, OnNodeLoss
from servelab.bench.cost_results import HourlyPrice
from servelab.cli.cluster_options import Cluster, DriverNode, NodeLoss, WorkersPerNode, cluster_spec
from servelab.cli.option_groups import OptionGroup
from servelab.cli.options import GpuHourPrice, Gpus, MachineHourPrice, RunsDir, hourly_price
from servelab.store.rundir import DEFAULT_RUNS_DIR
from servelab.telemetry import resolve_gpus

__all__ = ["SharedOptions"]


@dataclass(frozen=True)
class SharedOptions(OptionGroup):
    """Where the load comes from (this host or a Ray cluster), which GPUs are sampled, what
    the deployment costs an hour, and where the run directories go."""

    cluster: Cluster = None
    workers_per_node: WorkersPerNode = None
    driver_node: DriverNode = True
    on_node_loss: NodeLoss = OnNodeLoss.CONTINUE
    gpus: Gpus = None
    gpu_hour_price: GpuHourPrice = None
    machine_hour_price: MachineHourPrice = None
    runs_dir: RunsDir = DEFAULT_RUNS_DIR

    def cluster_spec(self, *, workers: int | None = None) -> ClusterSpec | None:
        """The cluster the client's workers run on, its options checked; None without
        --cluster. `workers` is bench's --workers, the total over the nodes."""
        return cluster_spec(
            self.cluster,
            workers=workers,
            workers_per_node=self.workers_per_node,
            driver_node=self.driver_node,
            on_node_loss=self.on_node_loss,
        )

    def telemetry_gpus(self) -> list[int]:
        """The NVML indices of --gpus; none without it."""
        return resolve_gpus(self.gpus) if self.gpus else []

    def price(self, command: str) -> HourlyPrice | None:
        """The price given to `command` (e.g. 'servelab bench'), checked; None without one."""
        return hourly_price(self.gpu_hour_price, self.machine_hour_price, command=command)
