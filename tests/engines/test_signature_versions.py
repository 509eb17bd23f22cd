"""Log signatures across engine releases: each message in every format its sources printed.

Each case in fixtures/engine_logs/events/<kind>.json is one line built from a format string
read in an engine's (or NCCL's) source at a release, cited with its file, function and the
format itself; prefixes, stamps and values are filled in. Every line must scan to exactly
one event of the file's kind, with exactly the listed fields; with any of the stamps a
launcher or docker puts in front, it must scan to the same event.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.signatures import (
    SIGNATURES,
    EventKind,
    EventSeverity,
    Signature,
    SignatureMatcher,
    scan_text,
)
from servelab.probe.comm.nccl_log import parse_connection, parse_nccl_log

EVENTS = Path(__file__).parents[1] / "fixtures" / "engine_logs" / "events"
NEW_KINDS = (
    EventKind.ENGINE_HANG,
    EventKind.CUSTOM_ALLREDUCE_OFF,
    EventKind.NCCL_TRANSPORT,
    EventKind.RUNNING_CAP_LOWERED,
    EventKind.KV_SIZE_NEGATIVE,
)

LAUNCHER = "2026-11-29T15:00:02.113482Z 884.075387 "
DOCKER = "2025-01-02T10:00:00.123456789Z "
LAUNCHER_T = datetime.fromisoformat("2026-11-29T15:00:02.113482+00:00").timestamp()
DOCKER_T = datetime.fromisoformat("2025-01-02T10:00:00.123456+00:00").timestamp()


def _cases() -> list[Any]:
    return [
        pytest.param(path.stem, case, id=f"{path.stem}-{case['engine']}-{case['version']}-{i}")
        for path in sorted(EVENTS.glob("*.json"))
        for i, case in enumerate(json.loads(path.read_text(encoding="utf-8")))
    ]


CASES = _cases()


def _signature(engine: str, name: str) -> Signature:
    return next(sig for sig in SIGNATURES[engine] if sig.name == name)


@pytest.mark.parametrize(("kind", "case"), CASES)
def test_each_line_is_exactly_its_event(kind: str, case: dict[str, Any]):
    events = scan_text(case["engine"], case["line"])

    got = [(e.kind, e.signature, e.fields) for e in events]
    assert got == [(EventKind(kind), case["signature"], case["fields"])]
    (event,) = events
    assert event.severity is _signature(case["engine"], case["signature"]).severity
    assert "\x1b" not in event.text
    if "t_unix" in case:
        assert event.t_unix == pytest.approx(case["t_unix"])


@pytest.mark.parametrize(
    ("prefix", "t_unix"),
    [
        (DOCKER, DOCKER_T),
        (LAUNCHER, LAUNCHER_T),
        (LAUNCHER + DOCKER, LAUNCHER_T),
        ("2025-01-02T10:00:00+01:00 ", DOCKER_T - 3600 - 0.123456),
    ],
    ids=["docker", "launcher", "launcher-then-docker", "offset"],
)
def test_leading_stamps_are_dropped_and_date_the_event(prefix: str, t_unix: float):
    for _kind, case in (param.values for param in CASES):
        plain = scan_text(case["engine"], case["line"])
        (event,) = scan_text(case["engine"], prefix + case["line"])

        assert (event.signature, event.fields) == (plain[0].signature, plain[0].fields)
        assert event.text == plain[0].text
        assert event.t_unix == pytest.approx(t_unix)


def test_every_new_kind_is_read_in_two_releases_or_more():
    for kind in NEW_KINDS:
        cases = json.loads((EVENTS / f"{kind.value}.json").read_text(encoding="utf-8"))
        for engine in {case["engine"] for case in cases}:
            versions = {case["version"] for case in cases if case["engine"] == engine}
            assert len(versions) >= 2, (kind, engine)


def test_every_new_signature_has_a_fixture():
    covered = {(case["engine"], case["signature"]) for _kind, case in (p.values for p in CASES)}
    new = {
        (engine, sig.name)
        for engine in ("sglang", "vllm")
        for sig in SIGNATURES[engine]
        if sig.kind in NEW_KINDS
    }

    assert new <= covered


# Two ranks connect over P2P on four channels each way, then over shared memory: NCCL 2.21.
def _nccl_setup() -> list[str]:
    p2p = [
        f"h200-node:41522:416{rank}1 [{rank}] NCCL INFO Channel {channel:02d}/0 : "
        f"{rank}[{rank}] -> {1 - rank}[{1 - rank}] via P2P/CUMEM/read"
        for rank in (0, 1)
        for channel in range(4)
    ]
    shm = [
        f"h200-node:41522:41701 [0] NCCL INFO Channel {channel:02d} : 0[0] -> 1[1] via "
        "SHM/direct/direct"
        for channel in range(2)
    ]
    return [
        "h200-node:41522:41522 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "h200-node:41522:41601 [0] NCCL INFO Channel 00/02 :    0   1",
        *p2p,
        *shm,
    ]


def test_nccl_channels_collapse_to_one_event_per_transport():
    matcher = SignatureMatcher("sglang")
    for line in _nccl_setup():
        matcher.feed(DOCKER + line)

    got = [(e.fields["transport"], e.count, e.line_no, e.last_line_no) for e in matcher.events]
    assert got == [("P2P", 8, 3, 10), ("SHM", 2, 11, 12)]
    assert matcher.events[0].fields == {
        "transport": "P2P",
        "via": "P2P/CUMEM/read",
        "channel": 0,
        "from_rank": 0,
        "to_rank": 1,
    }
    assert matcher.counts == {EventKind.NCCL_TRANSPORT: 10}


def test_the_engine_events_and_the_probe_read_the_same_transports():
    lines = _nccl_setup()
    events = scan_text("vllm", "\n".join(lines))

    assert [e.fields["via"] for e in events] == ["P2P/CUMEM/read", "SHM/direct/direct"]
    assert parse_nccl_log(lines).transports == ["P2P/CUMEM", "SHM"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "box:1:2 [0] NCCL INFO Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM/read",
            (0, 0, 1, "P2P/CUMEM/read", "P2P"),
        ),
        ("Channel 01 : 1[1] -> 0[0] via SHM/direct", (1, 1, 0, "SHM/direct", "SHM")),
        (
            "box:1:2 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/IB/0(1)/GDRDMA",
            (0, 3, 4, "NET/IB/0(1)/GDRDMA", "NET"),
        ),
        (
            "box:1:2 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0",
            (0, 0, None, "COLLNET/SHARP/0", "COLLNET"),
        ),
    ],
)
def test_parse_connection(line: str, expected: tuple[object, ...]):
    connection = parse_connection(line)

    assert connection is not None
    got = (
        connection.channel,
        connection.from_rank,
        connection.to_rank,
        connection.via,
        connection.transport,
    )
    assert got == expected


@pytest.mark.parametrize(
    ("engine", "line"),
    [
        # NCCL's ring order (src/graph/rings.cc dumpLine): a channel, but no transport.
        ("sglang", "box:4121:4433 [0] NCCL INFO Channel 00/02 :    0   1   2   3"),
        # vLLM v0.11 quick_all_reduce.py (ROCm): not the custom all-reduce.
        (
            "vllm",
            "(Worker_TP0 pid=404) WARNING 10-14 09:18:22 [quick_all_reduce.py:106] Custom quick "
            "allreduce is disabled because this process group spans across nodes.",
        ),
        # SGLang v0.5.10 utils/watchdog.py: f"Watchdog {self._raw.debug_name} initialized."
        ("sglang", "[2026-03-05 08:01:02 TP0] Watchdog Scheduler initialized."),
        # SGLang v0.5.23 deepseek_v4_hook.py: a default set where none was configured.
        (
            "sglang",
            "[2026-09-21 17:00:03] Setting max_running_requests to 256 for DeepseekV4ForCausalLM.",
        ),
    ],
)
def test_near_misses_yield_nothing(engine: str, line: str):
    assert scan_text(engine, line) == []


def test_kv_memory_left_is_a_size_until_it_is_negative():
    prefix = "(EngineCore_DP0 pid=311) INFO 10-14 09:20:02 [gpu_worker.py:298] "
    (kept,) = scan_text("vllm", prefix + "Available KV cache memory: 33.31 GiB")
    (negative,) = scan_text("vllm", prefix + "Available KV cache memory: -2.35 GiB")

    assert (kept.kind, kept.fields) == (EventKind.KV_CACHE_MEMORY, {"available_gib": 33.31})
    assert (negative.kind, negative.fields) == (EventKind.KV_SIZE_NEGATIVE, {"kv_gib": -2.35})
    assert negative.severity is EventSeverity.ERROR


def test_an_engine_s_own_clock_is_kept_in_the_text_but_names_no_zone():
    line = "[2025-01-02 10:00:00 DP0 TP0] Watchdog timeout (self.watchdog_timeout=300)"

    (event,) = scan_text("sglang", line)

    assert event.text == line
    assert event.t_unix is None


def test_what_the_log_says_after_servelab_stops_the_engine_is_its_shutdown():
    """vLLM's API server reports its engine core dead as a stop takes it down: a line read
    after the stop is counted, not an event of the run."""
    dead = (
        "(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered "
        "an issue. See stack trace (above) for the root cause."
    )
    serving = SignatureMatcher("vllm")
    assert [e.kind.value for e in serving.feed(dead)] == ["engine_error"]
    stopped = SignatureMatcher("vllm")
    stopped.stopping()
    assert stopped.feed(dead) == []
    scan = stopped.summary()
    assert scan.events == [] and scan.after_stop == 1
