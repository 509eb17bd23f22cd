"""The client's Ray actors over a whole run: join the cluster, check every node, place
the workers, measure the clocks before each level, forget lost nodes, leave nothing.

Ray itself is started by whoever runs the cluster (`ray start`, KubeRay), with an
explicit `--object-store-memory`: this only joins it, as `auto` (the cluster this
machine is a node of) or through Ray Client (`ray://HOST:PORT`). Each worker is an
actor holding one CPU, pinned to its node; nodes without a whole CPU (a head node
started with `--num-cpus 0`) get none.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from servelab import __version__
from servelab.bench.cluster.actor import ClientWorkerHost
from servelab.bench.cluster.clock import ClockOffset, measure_offset
from servelab.bench.cluster.errors import ClusterError, first_line
from servelab.bench.cluster.hosts import refuse_loopback, this_host
from servelab.bench.cluster.nodes import Node, spread
from servelab.bench.cluster.pool import Member, RayPool
from servelab.bench.cluster.probe import NodeFacts, node_facts
from servelab.bench.cluster.signals import deferred_signals
from servelab.bench.cluster.spec import ClusterSpec, OnNodeLoss
from servelab.bench.endpoint import EndpointConfig
from servelab.bench.load import LevelSpec
from servelab.bench.results import LevelSummary, SweepStop
from servelab.bench.runner import default_workers
from servelab.core.errors import EndpointUnreachable

__all__ = ["ClientFleet", "open_fleet"]

_READY_TIMEOUT_S = 120.0
"""A worker's actor starts a Python process that imports servelab: seconds, more on a
busy node."""
_EXIT_WAIT_S = 5.0
_GONE_TIMEOUT_S = 15.0
_GONE_POLL_S = 0.2
_WORKER_CONCURRENCY = 4
"""Calls an actor serves at once: a long-polled drain must not hold up a stop."""

_Host = ray.remote(ClientWorkerHost)
_facts = ray.remote(node_facts)


@contextmanager
def open_fleet(spec: ClusterSpec, endpoint: EndpointConfig) -> Iterator[ClientFleet]:
    """Join the cluster and check its nodes; on the way out, stop every worker and check
    that none is left (ClusterError when one is)."""
    fleet = ClientFleet(spec, endpoint)
    try:
        fleet.open()
        yield fleet
    finally:
        left = fleet.close()
    if left:
        raise ClusterError(f"client workers still running after the run on {', '.join(left)}")


class ClientFleet:
    """The run's nodes and worker actors; each level borrows `count` of them (`pool`)."""

    def __init__(self, spec: ClusterSpec, endpoint: EndpointConfig) -> None:
        self.spec = spec
        self.endpoint = endpoint
        self.nodes: list[Node] = []
        self.lost: set[str] = set()
        """Node ids lost during the run; later levels run without them."""
        self.actors: dict[str, list[Member]] = {}
        self.next_worker = 0
        self.joined = False

    # --- the run ----------------------------------------------------------------------

    def open(self) -> None:
        self.joined = _join(self.spec.address)
        nodes = _alive_nodes()
        facts = _facts_of(nodes, self.endpoint)
        if not self.spec.driver_node:
            nodes = [n for n in nodes if n.node_id not in _driver_nodes(facts)]
        if not nodes:
            raise ClusterError(
                f"the Ray cluster at {self.spec.address} has no node with a CPU for client"
                " workers" + ("" if self.spec.driver_node else " but the driver's")
            )
        for node in nodes:
            theirs = facts[node.node_id].servelab_version
            if theirs != __version__:
                raise ClusterError(
                    f"node {node.label} runs servelab {theirs}, this is {__version__}:"
                    " install the same on every node"
                )
        refuse_loopback(
            self.endpoint.base_url, this_host(), {n.label: facts[n.node_id].host for n in nodes}
        )
        for node in nodes:
            why = facts[node.node_id].unreachable
            if why is not None:
                raise EndpointUnreachable(
                    f"client node {node.label} cannot reach {self.endpoint.base_url}: {why}",
                    url=self.endpoint.base_url,
                )
        self.nodes = nodes

    def close(self) -> list[str]:
        """Stop and kill every worker; the nodes where one still answers afterwards. A signal
        meanwhile waits for the end (signals): cut short, Ray Client could hang instead."""
        members = [m for ms in self.actors.values() for m in ms]
        with deferred_signals():
            try:
                if members:
                    exits = [m.actor.exit.remote() for m in members]
                    ray.wait(exits, num_returns=len(exits), timeout=_EXIT_WAIT_S)
                    for m in members:
                        ray.kill(m.actor, no_restart=True)
                return _still_running(members)
            finally:
                self.actors.clear()
                if self.joined:
                    ray.shutdown()

    # --- each level -------------------------------------------------------------------

    def worker_count(self, level: LevelSpec, workers: int | None) -> int:
        """--workers-per-node on every node; else --workers; else the one-host default
        against the nodes' CPUs, at least one worker per node."""
        nodes = self._usable()
        if self.spec.workers_per_node is not None:
            return self.spec.workers_per_node * len(nodes)
        if workers is not None:
            return workers
        return max(len(nodes), default_workers(level, cpus=sum(n.cpus for n in nodes)))

    @contextmanager
    def pool(self, count: int) -> Iterator[RayPool]:
        """`count` workers spread over the usable nodes, their clocks just measured."""
        nodes = self._usable()
        members = self._members(count, nodes)
        used = {m.node.node_id: m for m in reversed(members)}
        clocks = {node_id: _clock(m.actor) for node_id, m in used.items()}
        pool = RayPool(members, clocks)
        try:
            yield pool
        finally:
            self.lost |= pool.lost_nodes
            for node_id in pool.lost_nodes:
                self.actors.pop(node_id, None)

    def sweep_stop(self, level: LevelSummary) -> SweepStop | None:
        """The sweep's end after a level that lost a node, when asked to stop there."""
        client = level.client
        if self.spec.on_node_loss is OnNodeLoss.CONTINUE or client is None:
            return None
        if not client.degraded:
            return None
        lost = [f"{n.address} ({n.node})" for n in client.nodes or [] if n.lost]
        return SweepStop(
            reason="client_lost",
            level=level.level,
            explanation=f"client node {', '.join(lost)} was lost (--on-node-loss stop)",
        )

    def _usable(self) -> list[Node]:
        nodes = [n for n in self.nodes if n.node_id not in self.lost]
        if not nodes:
            raise ClusterError("every client node was lost; no level can run")
        return nodes

    def _members(self, count: int, nodes: list[Node]) -> list[Member]:
        """The workers for one level, in order: started where a node has too few."""
        wanted = spread(count, len(nodes))
        started: list[Member] = []
        for node_index, k in wanted:
            node = nodes[node_index]
            mine = self.actors.setdefault(node.node_id, [])
            if k >= len(mine):
                member = Member(self.next_worker, self._start_actor(node), node)
                self.next_worker += 1
                mine.append(member)
                started.append(member)
        _wait_ready(started)
        return [self.actors[nodes[i].node_id][k] for i, k in wanted]

    def _start_actor(self, node: Node) -> Any:
        return _Host.options(
            num_cpus=1,
            max_concurrency=_WORKER_CONCURRENCY,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
        ).remote(self.next_worker, self.endpoint)


def _join(address: str) -> bool:
    """Connect this process to the cluster; False when it already was (a library caller's
    own ray.init), so that leaving is theirs too. Ray's SIGTERM handler (an exit) is put
    back to servelab's, which keeps partial results."""
    if ray.is_initialized():
        return False
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        _init(address)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    return True


_SERVER_START_FAILED = "Initialization failure from server"
"""Ray Client's proxy could not start this client's own server process on the head. Ray
forks that server from one of its gRPC threads with PR_SET_PDEATHSIG, so it is killed
when that thread ends; its log stays empty and the proxy reports a zombie or a channel it
never got. The next connection to the same proxy usually starts one."""
_JOIN_ATTEMPTS = 3
_JOIN_RETRY_S = 2.0


def _init(address: str) -> None:
    """ray.init, tried again (up to _JOIN_ATTEMPTS in all) when Ray Client's proxy failed to
    start its server."""
    for attempt in range(1, _JOIN_ATTEMPTS + 1):
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            return
        except (ConnectionError, RuntimeError, ValueError) as exc:
            if attempt < _JOIN_ATTEMPTS and _SERVER_START_FAILED in str(exc):
                time.sleep(_JOIN_RETRY_S)
                continue
            tries = f" ({attempt} tries)" if attempt > 1 else ""
            raise ClusterError(
                f"cannot join the Ray cluster at {address}{tries}: {first_line(exc)}"
            ) from None


def _alive_nodes() -> list[Node]:
    nodes = []
    for info in ray.nodes():
        cpus = int(info.get("Resources", {}).get("CPU", 0))
        if info.get("Alive") and cpus >= 1:
            nodes.append(Node(info["NodeID"], info["NodeManagerAddress"], cpus))
    return nodes


def _facts_of(nodes: list[Node], endpoint: EndpointConfig) -> dict[str, NodeFacts]:
    """Every node's facts, asked of a task pinned to it (it needs no CPU)."""
    refs = [
        _facts.options(
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
        ).remote(endpoint.base_url, endpoint.headers)
        for node in nodes
    ]
    try:
        answers = ray.get(refs, timeout=_READY_TIMEOUT_S)
    except GetTimeoutError:
        raise ClusterError(
            f"the cluster's nodes did not answer within {_READY_TIMEOUT_S:g} s"
        ) from None
    except RayError as exc:
        raise ClusterError(f"a node could not be asked about itself: {first_line(exc)}") from None
    return {node.node_id: facts for node, facts in zip(nodes, answers, strict=True)}


def _driver_nodes(facts: dict[str, NodeFacts]) -> set[str]:
    """The node this process is attached to; through Ray Client, any node on its host."""
    if not ray.util.client.ray.is_connected():
        return {ray.get_runtime_context().get_node_id()}
    here = this_host()
    return {node_id for node_id, f in facts.items() if f.host == here}


def _wait_ready(members: list[Member]) -> None:
    if not members:
        return
    try:
        ray.get([m.actor.ready.remote() for m in members], timeout=_READY_TIMEOUT_S)
    except GetTimeoutError:
        labels = sorted({m.node.label for m in members})
        raise ClusterError(
            f"client workers did not start within {_READY_TIMEOUT_S:g} s on {', '.join(labels)}:"
            " each needs one free CPU there (fewer --workers-per-node?)"
        ) from None
    except RayError as exc:
        raise ClusterError(f"a client worker failed to start: {first_line(exc)}") from None


def _clock(actor: Any) -> ClockOffset:
    return measure_offset(lambda: ray.get(actor.clock.remote()))


def _still_running(members: list[Member]) -> list[str]:
    """The nodes where a killed worker still answers, or has not said it is gone, after a
    grace. A kill takes effect a little later: a worker answering is asked again."""
    waiting = list(members)
    deadline = time.monotonic() + _GONE_TIMEOUT_S
    while waiting and time.monotonic() < deadline:
        refs = {m.actor.ready.remote(): m for m in waiting}
        ray.wait(list(refs), num_returns=len(refs), timeout=max(deadline - time.monotonic(), 0))
        waiting = []
        for ref, member in refs.items():
            try:
                ray.get(ref, timeout=0)
            except RayActorError:
                continue
            except GetTimeoutError:
                pass
            waiting.append(member)
        if waiting:
            time.sleep(_GONE_POLL_S)
    return sorted({m.node.label for m in waiting})
