"""Following an attached engine's log (engines.follow): only the lines written after it
began, across rotation and truncation, read as the engine's own lines decide."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servelab.core.errors import ConfigError
from servelab.engines.follow import AttachedLog, LogFollower, check_followable
from servelab.engines.signatures import SIGNATURES, EventKind

# Real lines: tests/engines/test_enginelog.py's stats lines and the signatures' examples.
VLLM_LINE = (
    "(APIServer pid=5938) INFO 12-01 09:45:45 [loggers.py:335] Engine 000: Avg prompt "
    "throughput: 13.0 tokens/s, Avg generation throughput: 32.0 tokens/s, Running: 3 reqs, "
    "Waiting: 1 reqs, CPU KV cache usage: 40.0%, Prefix cache hit rate: 0.0%"
)
SGLANG_LINE = (
    "[2026-03-04 15:13:22] Decode batch, #running-req: 2, #token: 84, token usage: 0.00, cuda "
    "graph: True, gen throughput (token/s): 3.62, #queue-req: 1"
)
UVICORN = "INFO:     Application startup complete."
POLL_S = 0.01


def example(engine: str, name: str) -> str:
    return next(sig.example for sig in SIGNATURES[engine] if sig.name == name)


def append(path: Path, *lines: str) -> None:
    with path.open("a") as log:
        log.writelines(f"{line}\n" for line in lines)


def followed(path: Path) -> tuple[LogFollower, list[str]]:
    seen: list[str] = []
    follower = LogFollower(path, seen.append, poll_s=POLL_S)
    follower.start()
    return follower, seen


def test_only_lines_written_after_it_began_are_read(tmp_path: Path):
    path = tmp_path / "engine.log"
    path.write_text("old one\nold two\nhalf of a li")
    follower, seen = followed(path)
    assert follower.lines_before == 3
    with path.open("a") as log:
        log.write("ne\nnew one\r\nnew two without an end")
    follower.stop()
    assert seen == ["new one", "new two without an end"]


def test_a_rotated_log_is_read_to_its_end_then_the_new_one_from_its_start(tmp_path: Path):
    path = tmp_path / "engine.log"
    path.write_text("before\n")
    follower, seen = followed(path)
    append(path, "last of the old file")
    os.rename(path, tmp_path / "engine.log.1")
    path.write_text("first of the new file\n")
    append(path, "second of the new file")
    follower.stop()
    assert seen == ["last of the old file", "first of the new file", "second of the new file"]
    assert follower.rotations == 1


def test_a_truncated_log_is_read_again_from_its_start(tmp_path: Path):
    path = tmp_path / "engine.log"
    path.write_text("a long line written before following began\n")
    follower, seen = followed(path)
    with path.open("r+") as log:  # logrotate's copytruncate
        log.truncate(0)
    append(path, "after")
    follower.stop()
    assert seen == ["after"] and follower.rotations == 1


def test_the_first_line_only_one_engine_knows_names_it(tmp_path: Path):
    path = tmp_path / "engine.log"
    path.write_text("started\n")
    log = AttachedLog(path, poll_s=POLL_S)
    log.start()
    oom = example("vllm", "torch.cuda_out_of_memory")  # shared: decides nothing
    append(path, UVICORN, oom, VLLM_LINE, SGLANG_LINE, VLLM_LINE)
    log.stop()
    assert (log.engine, log.decided_by) == ("vllm", "its log")
    scan = log.scan()
    assert scan is not None and scan.engine == "vllm"
    # Read before the decision, by vLLM's readers too: uvicorn's ready line and the OOM.
    assert [(e.kind, e.line_no) for e in scan.events] == [
        (EventKind.ENGINE_READY, 2),
        (EventKind.OUT_OF_MEMORY, 3),
    ]
    samples = log.trace().samples
    assert [(s.running, s.queued, s.kv_usage, s.source) for s in samples] == [
        (3, 1, 0.4, "log")
    ] * 2
    assert all(event.t_mono_ns is not None for event in scan.events)
    assert log.describe() == (
        f"engine log {path}: 5 new lines, read as vllm's (its log): 2 event lines, 2 stats lines"
    )


def test_a_given_engine_reads_only_its_lines(tmp_path: Path):
    path = tmp_path / "engine.log"
    path.touch()
    log = AttachedLog(path, engine="sglang", poll_s=POLL_S)
    log.start()
    append(path, VLLM_LINE, SGLANG_LINE, example("sglang", "sglang.kv_cache_pool_full_retract"))
    log.stop()
    assert (log.engine, log.decided_by) == ("sglang", "given")
    assert [s.running for s in log.trace().samples] == [2]
    scan = log.scan()
    assert scan is not None and [e.kind for e in scan.events] == [EventKind.KV_CACHE_FULL]


def test_a_log_no_line_of_which_decides_is_settled_by_the_endpoint(tmp_path: Path):
    path = tmp_path / "engine.log"
    path.touch()
    log = AttachedLog(path, poll_s=POLL_S)
    log.start()
    append(path, example("sglang", "torch.cuda_out_of_memory"))
    log.stop()
    assert log.engine is None and log.scan() is None
    assert log.trace().samples == [] and log.trace().reason is not None
    assert log.describe().endswith(
        "none recognised as sglang or vllm's (name it with --engine-log-format)"
    )
    log.settle("sglang", "its /server_info")
    scan = log.scan()
    assert scan is not None and [e.kind for e in scan.events] == [EventKind.OUT_OF_MEMORY]
    assert log.decided_by == "its /server_info"


def test_what_cannot_be_followed_is_refused_before_anything_runs(tmp_path: Path):
    with pytest.raises(ConfigError, match="no such file"):
        check_followable(tmp_path / "missing.log")
    packed = tmp_path / "engine.log.gz"
    packed.write_bytes(b"\x1f\x8b")
    with pytest.raises(ConfigError, match=r"compressed: a \.gz log cannot grow"):
        AttachedLog(packed)
    with pytest.raises(ConfigError, match="is not a file"):
        AttachedLog(tmp_path)
    with pytest.raises(ConfigError, match="no log reader for engine 'transformers'"):
        AttachedLog(packed, engine="transformers")
