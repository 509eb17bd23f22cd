"""The cluster client's parts that need no cluster: the clock estimate, the spread, the
loopback rule, the per-node judgement, and the CLI's refusals."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from typer.testing import CliRunner

from servelab.bench.cluster import ClusterSpec, OnNodeLoss, parse_cluster_address
from servelab.bench.cluster.clock import best_offset, measure_offset
from servelab.bench.cluster.errors import ClusterError, first_line
from servelab.bench.cluster.hosts import HostId, is_loopback_url, refuse_loopback, this_host
from servelab.bench.cluster.nodes import spread
from servelab.bench.cluster.signals import deferred_signals
from servelab.bench.load import LevelSpec, LoadMode
from servelab.bench.metrics import NodeClock, WorkerStats, compute_level
from servelab.bench.records import ErrorKind, RequestRecord
from servelab.cli import app
from servelab.core.clock import now_ns
from servelab.core.errors import ConfigError
from tests.ci import require_module

MS = 1_000_000


def test_the_shortest_round_trip_sets_the_offset_and_its_bound():
    samples = [(0, 5_000, 4_000), (10_000, 16_000, 11_000), (20_000, 30_000, 29_000)]
    got = best_offset(samples)
    assert (got.offset_ns, got.error_ns) == (16_000 - 10_500, 500)


def test_a_shifted_clock_is_found_within_its_bound():
    shift = 3_000 * MS
    rng = random.Random(0)

    def read_node() -> int:
        busy_until = now_ns() + rng.randrange(0, 200_000)  # an uneven way there and back
        while now_ns() < busy_until:
            pass
        return now_ns() + shift

    got = measure_offset(read_node)
    assert abs(got.offset_ns - shift) <= got.error_ns
    assert got.error_ns < 200_000


def test_a_signal_waits_for_the_next_delivery():
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with deferred_signals() as deliver:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # handled by now: noted, not raised
            with pytest.raises(KeyboardInterrupt):
                deliver()
            deliver()  # nothing more was noted
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_ray_errors_become_one_line():
    assert first_line(RuntimeError("Init failed:\nTraceback ...\n  x\nValueError: no")) == (
        "Init failed: ValueError: no"
    )
    assert first_line(RuntimeError("gone\nmore")) == "gone"
    assert first_line(RuntimeError()) == "RuntimeError"


def test_workers_spread_evenly_and_alternate_nodes():
    assert spread(5, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]
    assert spread(1, 3) == [(0, 0)]


def test_a_loopback_endpoint_is_refused_with_a_node_on_another_host():
    here = this_host()
    away = HostId("gpu-7", "another-boot", 4026531840)
    assert is_loopback_url("http://127.0.0.1:8000") and is_loopback_url("http://localhost")
    assert is_loopback_url("http://[::1]:80") and not is_loopback_url("http://10.0.0.5:8000")
    refuse_loopback("http://127.0.0.1:8000", here, {"127.0.0.1 (a)": here})
    refuse_loopback("http://10.0.0.5:8000", here, {"10.0.0.7 (b)": away})
    with pytest.raises(ConfigError, match=r"client node 10\.0\.0\.7 \(b\) is on another host"):
        refuse_loopback("http://127.0.0.1:8000", here, {"a": here, "10.0.0.7 (b)": away})


def test_cluster_addresses():
    assert parse_cluster_address("auto") == "auto"
    assert parse_cluster_address("ray://head:10001") == "ray://head:10001"
    for bad in ("head:10001", "ray://head", "ray://:1", "http://head:10001"):
        with pytest.raises(ConfigError, match="is not a Ray address"):
            parse_cluster_address(bad)


def _record(worker: int, index: int, **fields) -> RequestRecord:
    t = 10 * MS * index
    base = {
        "index": index,
        "level": 0,
        "warmup": False,
        "worker": worker,
        "t_send_ns": t,
        "t_scheduled_ns": t,
        "t_end_ns": t + 100 * MS,
        "ok": True,
        "max_tokens": 3,
        "chunk_offsets_ns": [20 * MS, 40 * MS, 60 * MS],
        "output_tokens": 3,
    }
    return RequestRecord(**(base | fields))


def _worker(worker: int, node: str, *, loop_ms: float = 0.1, error_ms: float = 0.2, lost=False):
    clock = NodeClock(node, f"10.0.0.{worker}", 5 * MS, int(error_ms * MS), lost=lost)
    lag = int(loop_ms * MS)
    return WorkerStats(worker, lag, lag, 0.1, 1.0, node=clock)


LEVEL = LevelSpec(
    index=0, mode=LoadMode.CONCURRENCY, value=4, num_requests=8, duration_s=None, warmup=0
)


def test_each_node_is_judged_and_named():
    records = [_record(i % 2, i) for i in range(8)]
    workers = [_worker(0, "aaaa0000"), _worker(1, "bbbb1111", loop_ms=5.0, error_ms=3.0)]
    client = compute_level(records, level=LEVEL, workers=workers).client
    assert client is not None and client.client_bound and not client.degraded
    assert [(n.node, n.workers, n.requests) for n in client.nodes or []] == [
        ("aaaa0000", 1, 4),
        ("bbbb1111", 1, 4),
    ]
    assert client.nodes[1].clock_offset_ms == 5.0 and client.nodes[1].clock_error_ms == 3.0
    reason = client.client_bound_reason or ""
    assert "node 10.0.0.1 (bbbb1111): p99 loop lag 5.0 ms > 10% of median ITL 20.0 ms" in reason
    assert "node 10.0.0.1 (bbbb1111): clock offset known to ±3.00 ms > 10%" in reason
    assert "aaaa0000" not in reason


def test_a_lost_node_degrades_the_level_and_can_stop_the_sweep():
    require_module("ray")
    from servelab.bench.cluster.fleet import ClientFleet
    from servelab.bench.endpoint import EndpointConfig

    records = [_record(0, 0), _record(1, 1, ok=False, error_kind=ErrorKind.CLIENT_LOST)]
    workers = [_worker(0, "aaaa0000"), _worker(1, "bbbb1111", lost=True)]
    level = compute_level(records, level=LEVEL, workers=workers)
    assert level.client is not None and level.client.degraded
    assert level.errors == {"client_lost": 1}
    endpoint = EndpointConfig(base_url="http://10.0.0.9:8000", model="m")
    go_on = ClientFleet(ClusterSpec(address="auto"), endpoint)
    assert go_on.sweep_stop(level) is None
    stop = ClientFleet(ClusterSpec(address="auto", on_node_loss=OnNodeLoss.STOP), endpoint)
    ended = stop.sweep_stop(level)
    assert ended is not None and ended.reason == "client_lost"
    assert ended.explanation == "client node 10.0.0.1 (bbbb1111) was lost (--on-node-loss stop)"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--workers-per-node", "2"], "--workers-per-node, --no-driver-node and --on-node-loss"),
        (["--cluster", "head:6379"], "--cluster 'head:6379' is not a Ray address"),
        (["--cluster", "auto", "--workers", "4", "--workers-per-node", "2"], "not both"),
        (["--cluster", "auto", "--workers-per-node", "0"], "--workers-per-node"),
    ],
)
def test_cli_refuses_bad_cluster_options_in_one_line(args, line):
    result = CliRunner().invoke(app, ["bench", "--url", "http://127.0.0.1:9", *args])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert line in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("command", "args", "line"),
    [
        (["run", "--url", "http://127.0.0.1:9"], ["--no-driver-node"], "apply to --cluster"),
        (["run", "--url", "http://127.0.0.1:9"], ["--cluster", "x"], "is not a Ray address"),
        (["tune", "run", "space.yaml"], ["--on-node-loss", "stop"], "apply to --cluster"),
        (["tune", "join", "s", "--storage", "sqlite://"], ["--cluster", "ray://h"], "not a Ray"),
    ],
)
def test_run_and_tune_refuse_bad_cluster_options_in_one_line(command, args, line):
    """`run` and `tune` check the same options the same way, before anything starts."""
    result = CliRunner().invoke(app, [*command, *args])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert line in result.stderr and "Traceback" not in result.stderr


def _failing_init(failures: list[Exception]) -> tuple[list[str], object]:
    calls: list[str] = []

    def init(address: str, **_: object) -> None:
        calls.append(address)
        if failures:
            raise failures.pop(0)

    return calls, init


def test_a_client_server_that_failed_to_start_is_asked_for_again(monkeypatch):
    require_module("ray")
    from servelab.bench.cluster import fleet

    failed = ConnectionAbortedError("Initialization failure from server:\nRuntimeError: ...")
    calls, init = _failing_init([failed])
    monkeypatch.setattr(fleet.ray, "init", init)
    monkeypatch.setattr(fleet, "_JOIN_RETRY_S", 0.0)
    fleet._init("ray://127.0.0.1:1")
    assert calls == ["ray://127.0.0.1:1"] * 2

    calls, init = _failing_init([failed] * fleet._JOIN_ATTEMPTS)
    monkeypatch.setattr(fleet.ray, "init", init)
    with pytest.raises(ClusterError) as every:
        fleet._init("ray://127.0.0.1:1")
    assert len(calls) == fleet._JOIN_ATTEMPTS == 3 and str(every.value).startswith(
        "cannot join the Ray cluster at ray://127.0.0.1:1 (3 tries): Initialization failure"
    )


def test_a_cluster_that_is_not_there_is_not_asked_twice(monkeypatch):
    require_module("ray")
    from servelab.bench.cluster import fleet

    calls, init = _failing_init([ConnectionError("could not find any running Ray instance")])
    monkeypatch.setattr(fleet.ray, "init", init)
    with pytest.raises(ClusterError, match=r"^cannot join the Ray cluster at auto: could not"):
        fleet._init("auto")
    assert calls == ["auto"]
