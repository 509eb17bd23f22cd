"""The load generator on a real two-node Ray cluster (tests/cluster/conftest.py) against
the simulator: the same results as from one host, one clock, the load split, and faults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from servelab.bench.client import request_id
from servelab.bench.cluster import ClusterSpec
from servelab.bench.conversation import ConversationSpec, parse_turns
from servelab.bench.events import LevelStarted
from servelab.bench.load import LoadMode, arrival_offsets_ns
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec
from servelab.core.clock import now_ns
from servelab.sim import read_truth
from tests.cluster.conftest import SHIFT_NS, ray_pids
from tests.conftest import SERVELAB

MS = 1e6
LOOPBACK_V4 = "0100007F"
LOOPBACK_V6 = ("00000000000000000000000001000000", "0000000000000000FFFF00000100007F")
OUTPUT = 16


def bench(url: str, out: Path, **overrides):
    run = overrides.pop("run", {})
    config = BenchConfig(
        url=url,
        out=out,
        runs_root=out.parent / "runs",
        workload=overrides.pop("workload", WorkloadSpec(input_len=32, output_len=OUTPUT)),
        warmup=overrides.pop("warmup", 0),
        **overrides,
    )
    outcome = run_bench(config, **run)
    rows = (outcome.run_dir / "requests.jsonl").read_text().splitlines()
    return outcome.summary, [json.loads(row) for row in rows]


def test_ray_listens_on_loopback_only(ray_cluster):
    inodes = set()
    for pid in [*ray_pids(), os.getpid()]:
        fds = f"/proc/{pid}/fd"
        for fd in os.listdir(fds) if os.path.isdir(fds) else []:
            target = os.readlink(f"{fds}/{fd}") if os.path.islink(f"{fds}/{fd}") else ""
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    listening = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            bound = state == "0A" if table.startswith("tcp") else True  # LISTEN, or any UDP
            if inode in inodes and bound:
                listening.append((table, local))
    assert listening, "found no Ray socket at all"
    others = [
        (table, local)
        for table, local in listening
        if local.split(":")[0] not in (LOOPBACK_V4, *LOOPBACK_V6)
    ]
    assert not others, f"Ray listens beyond loopback: {others}"


@pytest.mark.timing
def test_closed_loop_matches_one_host_and_the_truth(ray_cluster, start_sim, tmp_path):
    truth_path = tmp_path / "truth.jsonl"
    sim = start_sim(ttft_ms=30, itl_ms=10, record=str(truth_path))
    level = {"levels": [8], "num_requests": 48}
    local, _ = bench(sim.url, tmp_path / "local", workers=2, **level)
    spec = ClusterSpec(address="auto")
    remote, records = bench(sim.url, tmp_path / "ray", cluster=spec, **level)
    sim.stop()
    one, spread = local.levels[0], remote.levels[0]
    assert (spread.completed, spread.failed) == (48, 0)
    assert spread.total_output_tokens == one.total_output_tokens == 48 * OUTPUT
    assert spread.mean_ttft_ms == pytest.approx(one.mean_ttft_ms, abs=10)
    assert spread.median_itl_ms == pytest.approx(one.median_itl_ms, abs=2)
    assert spread.output_throughput == pytest.approx(one.output_throughput, rel=0.25)
    assert spread.max_concurrent_requests <= 8
    # Two nodes, one worker each, four streams each; the shifted one measured within bound.
    nodes = spread.client.nodes
    assert [(n.workers, n.requests) for n in nodes] == [(1, 24), (1, 24)]
    offsets = sorted(n.clock_offset_ms for n in nodes)
    assert offsets[0] == pytest.approx(0, abs=nodes[0].clock_error_ms + 0.01)
    shifted = max(nodes, key=lambda n: n.clock_offset_ms)
    assert abs(shifted.clock_offset_ms - SHIFT_NS / MS) <= shifted.clock_error_ms + 0.01
    assert shifted.clock_error_ms < 25
    assert not spread.client.degraded and remote.run.load["cluster"] == "auto"
    # Every stamp on the driver's clock: each send just before the server's receive.
    truth = {t.request_id: t for t in read_truth(truth_path)}
    ttft_true = []
    for r in records:
        t = truth[request_id(r["level"], r["index"], warmup=r["warmup"])]
        assert 0 <= t.t_recv_ns - r["t_send_ns"] < 100 * MS, (r["worker"], t.t_recv_ns)
        ttft_true.append((t.chunk_sent_ns[0] - r["t_send_ns"]) / MS)
    assert spread.mean_ttft_ms == pytest.approx(np.mean(ttft_true), abs=5)


@pytest.mark.timing
def test_open_loop_arrivals_are_drawn_once_and_split(ray_cluster, start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=2)
    spec = ClusterSpec(address="auto", workers_per_node=1)
    summary, records = bench(
        sim.url,
        tmp_path / "run",
        mode=LoadMode.REQUEST_RATE,
        levels=[40],
        num_requests=60,
        cluster=spec,
    )
    level = summary.levels[0]
    assert level.completed == 60
    planned = arrival_offsets_ns(40, burstiness=1.0, seed=0, count=60)
    scheduled = sorted(r["t_scheduled_ns"] for r in records)
    got = [t - scheduled[0] for t in scheduled]
    # One Poisson draw, split: its arrivals on both nodes are the planned ones, each within
    # the shifted node's clock error (and a microsecond of rounding) of its planned time.
    error_ns = max(n.clock_error_ms for n in level.client.nodes) * MS + 1_000
    assert all(abs(g - p) <= 2 * error_ns for g, p in zip(got, planned, strict=True))
    # Dealt in turn: arrival j to worker j mod 2, one worker per node.
    assert len({(r["index"] % 2, r["worker"]) for r in records}) == 2
    for node in level.client.nodes:
        assert node.requests == 30
        assert node.p99_schedule_lag_ms < 100  # on time, give or take a busy 2-core host


def test_a_conversation_stays_on_one_worker(ray_cluster, start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=2)
    conversation = ConversationSpec(turns=parse_turns("3"))
    summary, records = bench(
        sim.url,
        tmp_path / "run",
        levels=[4],
        num_requests=24,
        cluster=ClusterSpec(address="auto"),
        workload=WorkloadSpec(
            dataset="conversation", input_len=16, output_len=4, conversation=conversation
        ),
    )
    assert summary.levels[0].failed == 0 and len(records) == 24
    workers_of: dict[int, set[int]] = {}
    for r in records:
        workers_of.setdefault(r["session"], set()).add(r["worker"])
    assert all(len(workers) == 1 for workers in workers_of.values())
    assert len(set().union(*workers_of.values())) == 2  # both nodes had sessions


def test_a_node_killed_mid_level_is_recorded_and_later_levels_run_without_it(
    ray_cluster, start_sim, tmp_path
):
    victim = ray_cluster.add_node()
    sim = start_sim(ttft_ms=20, itl_ms=20)

    def kill_once_started(event):
        if isinstance(event, LevelStarted) and not event.warmup and event.level.index == 0:
            threading.Timer(1.0, ray_cluster.cluster.remove_node, (victim, False)).start()

    spec = ClusterSpec(address="auto", workers_per_node=1)
    summary, records = bench(
        sim.url,
        tmp_path / "run",
        levels=[6, 4],
        duration_s=3.0,
        cluster=spec,
        run={"on_event": kill_once_started},
    )
    first, second = summary.levels
    assert summary.status == "complete"
    assert first.client.degraded and not second.client.degraded
    lost = [n for n in first.client.nodes if n.lost]
    assert len(lost) == 1 and len(first.client.nodes) == 3
    gone = [r for r in records if r["error_kind"] == "client_lost"]
    assert gone and first.errors == {"client_lost": len(gone)}
    assert all(lost[0].node in r["error"] and r["level"] == 0 for r in gone)
    assert first.completed > 0
    assert len(second.client.nodes) == 2 and second.failed == 0 and second.completed > 0
    assert lost[0].node not in {n.node for n in second.client.nodes}


def test_an_open_loop_node_lost_leaves_no_arrival_it_was_due_to_send_unrecorded(
    ray_cluster, start_sim, tmp_path
):
    """Three workers, one per node, at 120 req/s drawn once; the third node is killed
    mid-level. Every arrival the victim was due to send before it died is a record: sent
    and finished (ok), in flight at its last report, or due after that report (all three
    kinds of client_lost record from the driver's schedule), so its records are its
    share's first arrivals with none missing, up to the kill and past it."""
    victim = ray_cluster.add_node()
    sim = start_sim(ttft_ms=5, itl_ms=2)
    killed: list[int] = []

    def kill():
        killed.append(now_ns())
        ray_cluster.cluster.remove_node(victim, False)

    def kill_once_started(event):
        if isinstance(event, LevelStarted) and not event.warmup:
            threading.Timer(1.5, kill).start()

    count, rate = 480, 120.0
    summary, records = bench(
        sim.url,
        tmp_path / "run",
        mode=LoadMode.REQUEST_RATE,
        levels=[rate],
        num_requests=count,
        cluster=ClusterSpec(address="auto", workers_per_node=1),
        workload=WorkloadSpec(input_len=16, output_len=4),
        run={"on_event": kill_once_started},
    )
    (level,) = summary.levels
    assert level.client.degraded and killed
    gone = [r for r in records if r["error_kind"] == "client_lost"]
    (lost_worker,) = {r["worker"] for r in gone}
    planned = arrival_offsets_ns(rate, burstiness=1.0, seed=0, count=count)
    ok = next(r for r in records if r["ok"])
    t_start = ok["t_scheduled_ns"] - planned[ok["index"]]
    mine = sorted(r["index"] for r in records if r["worker"] == lost_worker)
    share = range(mine[0], count, 3)  # arrival j to worker j mod 3
    assert mine == list(share[: len(mine)])  # a prefix of its share: none skipped
    due_before_kill = [j for j in share if t_start + planned[j] <= killed[0]]
    assert set(due_before_kill) <= set(mine)
    survivors = [r for r in records if r["worker"] != lost_worker]
    assert len(survivors) == count - len(share) and all(r["ok"] for r in survivors)


def test_an_endpoint_a_node_cannot_reach_fails_with_the_node_named(ray_cluster):
    from servelab.bench.cluster.fleet import open_fleet
    from servelab.bench.endpoint import EndpointConfig
    from servelab.core.errors import EndpointUnreachable

    closed = f"http://127.0.0.1:{_closed_port()}"
    with (
        pytest.raises(EndpointUnreachable) as caught,
        open_fleet(ClusterSpec(address="auto"), EndpointConfig(base_url=closed, model="m")),
    ):
        pass
    message = str(caught.value)
    assert message.startswith("client node 127.0.0.1 (") and closed in message
    assert "\n" not in message


@pytest.mark.parametrize("join", ["auto", "client"])
def test_cli_sigterm_stops_every_worker_and_keeps_the_run(ray_cluster, start_sim, tmp_path, join):
    """`auto` joins as a node's driver, `ray://` through Ray Client; SIGTERM ends either
    like Ctrl-C, and no worker is left on any node."""
    sim = start_sim(ttft_ms=20, itl_ms=20)
    address = "auto" if join == "auto" else ray_cluster.client_address
    command = [
        *SERVELAB,
        *("bench", "--url", sim.url, "--cluster", address, "--concurrency", "4"),
        *("--duration", "60s", "--input-len", "16", "--output-len", "64", "--warmup", "0"),
        *("--out", str(tmp_path / "run"), "--runs-dir", str(tmp_path / "runs")),
    ]
    env = {**os.environ, **ray_cluster.env}
    # An earlier test's actor may still be exiting on a busy machine: count this bench's own.
    earlier = set(_workers_running())
    bench = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    requests = tmp_path / "run" / "requests.jsonl"
    try:
        # A join through Ray Client may take up to three tries, a failed one about 30 s.
        started = wait_until(lambda: requests.exists() and requests.stat().st_size > 0, 120)
        running = len(set(_workers_running()) - earlier)
        bench.send_signal(signal.SIGTERM)
        _, stderr = bench.communicate(timeout=60)
    finally:
        bench.kill()
    assert started and running == 2, (running, stderr, ray_cluster.client_server_logs())
    assert bench.returncode == 143, stderr
    assert "partial results are in" in stderr and "INFO" not in stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert len(summary["levels"][0]["client"]["nodes"]) == 2
    assert wait_until(lambda: not set(_workers_running()) - earlier, 20), _workers_running()


def _workers_running() -> list[int]:
    """Live processes of client workers' actors (Ray titles them after the class)."""
    alive = []
    for pid in ray_pids():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if state != "Z" and title.startswith(b"ray::ClientWorkerHost"):
            alive.append(pid)
    return alive


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()
