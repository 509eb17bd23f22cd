"""engine.log's stamps: UTC and the monotonic clock the load generator uses."""

from __future__ import annotations

import io
import time
from pathlib import Path

from servelab.engines.enginelog import LogPump, log_tail, parse_log_line, stamp


def test_a_stamp_reads_back():
    before = time.perf_counter()
    utc, mono, line = parse_log_line(stamp("  indented line"))
    assert utc is not None and utc.endswith("Z") and len(utc) == len("2026-11-29T15:43:01.123456Z")
    assert mono is not None and before - 1e-6 <= mono <= time.perf_counter()
    assert line == "  indented line"
    assert parse_log_line("not stamped\n") == (None, None, "not stamped")


def test_the_pump_splits_on_carriage_returns_and_keeps_bad_bytes(tmp_path: Path):
    path = tmp_path / "engine.log"
    seen: list[str] = []
    stream = io.BytesIO(b"one\r\ntwo\rthree\n\xff bad byte\nno newline at the end")
    pump = LogPump(stream, path, seen.append)
    pump.start()
    pump.close()
    assert seen == ["one", "two", "three", "\ufffd bad byte", "no newline at the end"]
    assert log_tail(path, 2) == ["\ufffd bad byte", "no newline at the end"]
    assert log_tail(tmp_path / "missing.log", 5) == []
