"""One Ray cluster for every cluster test: two nodes on this host, bound to 127.0.0.1.

Ray picks the machine's own network address for its nodes and for an address given as
127.0.0.1 (which it "resolves" to that one); every process here gets 127.0.0.1 as its
node address instead, and `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` makes Ray's own lookup of
this machine's address answer 127.0.0.1, so nothing is sent anywhere but loopback. The
dashboard and usage reporting are off. The second node's clock reads `SHIFT_NS` ahead
(bench.cluster.actor's injection point), so every test also checks the offset's
correction. This process is the driver, connected once; `servelab bench --cluster auto`
subprocesses join through RAY_ADDRESS.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from servelab.bench.cluster.actor import CLOCK_SHIFT_ENV
from tests.ci import require_module

SHIFT_NS = 7_500_000_000
"""How far ahead the second node's clock reads: far beyond any latency, so an
uncorrected stamp could not pass for a corrected one."""
_MIB = 1024 * 1024
_NODE = {
    "node_ip_address": "127.0.0.1",
    "num_cpus": 2,
    "object_store_memory": 80 * _MIB,
    "include_dashboard": False,
}
_FAST_FAILURE_DETECTION = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
    "health_check_initial_delay_ms": 0,
}
"""A killed node is declared dead in about 1.5 s, not Ray's default of half a minute."""
ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
os.environ.update(ENV)  # read once, when ray is first imported: before any test imports it


@dataclass
class RayCluster:
    cluster: Any
    address: str
    """The GCS address (what RAY_ADDRESS and `auto` join)."""
    client_address: str
    """ray://127.0.0.1:PORT, Ray Client's."""
    env: dict[str, str]
    """What a subprocess needs to join this cluster the same way."""
    temp_dir: str
    """RAY_TMPDIR: the session's logs are under it."""

    def client_server_logs(self) -> str:
        """The last lines of every Ray Client server's stderr: why the proxy could not start
        one for a client, which only the head's logs say."""
        tails = []
        for log in sorted(Path(self.temp_dir).glob("**/logs/ray_client_server*.err")):
            lines = log.read_text(errors="replace").splitlines()[-15:]
            tails.append(f"{log.name}:\n" + "\n".join(lines))
        return "\n".join(tails) or "no Ray Client server logs"

    def add_node(self, **env: str) -> Any:
        """A third node (same settings), its environment extended by `env`."""
        return self.cluster.add_node(**_NODE, env_vars=env or None)


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[RayCluster]:
    """Two nodes on 127.0.0.1, stopped when this folder's tests end: a cluster left idle
    through the rest of the suite takes CPU from every timing test after it (a CI run read
    a 57% wander between two identical runs, and a looser TTFT at vLLM's running cap)."""
    ray = require_module("ray")
    from ray.cluster_utils import Cluster

    temp = tempfile.mkdtemp(prefix="slray", dir="/tmp")  # short: unix socket paths
    env = {**ENV, "RAY_TMPDIR": temp}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_TMPDIR", temp)
        client_port = _free_port()
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                **_NODE,
                "ray_client_server_port": client_port,
                "_system_config": _FAST_FAILURE_DETECTION,
            },
        )
        try:
            cluster.add_node(**_NODE, env_vars={CLOCK_SHIFT_ENV: str(SHIFT_NS)})
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, log_to_driver=False)
            yield RayCluster(
                cluster=cluster,
                address=cluster.address,
                client_address=f"ray://127.0.0.1:{client_port}",
                env={**env, "RAY_ADDRESS": cluster.address},
                temp_dir=temp,
            )
        finally:
            ray.shutdown()
            cluster.shutdown()
            shutil.rmtree(temp, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ray_pids() -> list[int]:
    """Processes of Ray's: its binaries, its Python services and its workers."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith("ray::") or "/ray/" in cmdline:
            pids.append(int(entry))
    return pids
