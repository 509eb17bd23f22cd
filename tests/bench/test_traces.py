"""Traces are read as their projects write them, windows select, speed divides the gaps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from servelab.bench.traces import (
    MOONCAKE_BLOCK_TOKENS,
    TraceRequest,
    load_replay,
    parse_window,
    read_trace,
    shared_block_prefix,
)
from servelab.core.errors import ConfigError
from tests.traces import MOONCAKE, TRACES

MOONCAKE_HEAD = TRACES / "mooncake_conversation_head.jsonl"
BURSTGPT_1 = TRACES / "burstgpt_1.csv"
BURSTGPT_3 = TRACES / "burstgpt_3.csv"
S = 1_000_000_000
HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"

SMALL_SHARED_BLOCKS = [0, 1, 0, 1, 1, 0, 2, 1, 1, 2, 0, 1, 0, 2, 3, 3, 2, 3, 4, 4]
"""Worked out from the conversations mooncake_small.jsonl was written from (its README)."""


def _write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _line(timestamp: float, input_length: int, hash_ids: list[int], output: int = 4) -> str:
    return json.dumps(
        {
            "timestamp": timestamp,
            "input_length": input_length,
            "output_length": output,
            "hash_ids": hash_ids,
        }
    )


def test_real_mooncake_lines_read_with_ms_as_seconds():
    raw = [json.loads(line) for line in MOONCAKE_HEAD.read_text().splitlines()]
    trace = read_trace(MOONCAKE_HEAD)
    assert (trace.format, trace.skipped, len(trace.requests)) == ("mooncake", 0, len(raw))
    for request, row in zip(trace.requests, raw, strict=True):
        assert request.arrival_s == row["timestamp"] / 1000
        assert (request.input_len, request.output_len) == (
            row["input_length"],
            row["output_length"],
        )
        assert request.hash_ids == tuple(row["hash_ids"])
    assert trace.span_s == (0.0, raw[-1]["timestamp"] / 1000) == (0.0, 3.0)
    # Every conversation request of the real trace opens with the same block, id 0.
    assert shared_block_prefix(trace.requests) == [0] + [1] * (len(raw) - 1)


def test_small_mooncake_fixture_keeps_the_real_files_rules():
    trace = read_trace(MOONCAKE)
    size: dict[int, int] = {}
    for request in trace.requests:
        ids = request.hash_ids
        assert len(ids) == math.ceil(request.input_len / MOONCAKE_BLOCK_TOKENS)
        for i, hash_id in enumerate(ids):
            block = min(MOONCAKE_BLOCK_TOKENS, request.input_len - i * MOONCAKE_BLOCK_TOKENS)
            assert size.setdefault(hash_id, block) == block
    assert shared_block_prefix(trace.requests) == SMALL_SHARED_BLOCKS


def test_burstgpt_1_reads_by_column_name_and_skips_failed_requests():
    rows = [line.split(",") for line in BURSTGPT_1.read_text().splitlines()[1:]]
    failed = [row for row in rows if row[3] == "0"]
    trace = read_trace(BURSTGPT_1)
    assert (trace.format, trace.skipped) == ("burstgpt", len(failed)) == ("burstgpt", 2)
    assert len(trace.requests) == len(rows) - 2
    assert trace.requests[0] == TraceRequest(5.0, 472, 18)
    assert trace.requests[2] == TraceRequest(118.0, 417, 276)
    assert trace.span_s == (5.0, 196.0)


def test_burstgpt_3_has_two_columns_more_before_the_lengths():
    trace = read_trace(BURSTGPT_3)
    assert trace.format == "burstgpt" and trace.skipped == 1
    assert trace.requests[0] == TraceRequest(19440110.0, 906, 446)
    assert trace.requests[4] == TraceRequest(19440260.0, 517, 88)  # an API row: no session


def test_format_is_told_by_content_not_by_name(tmp_path):
    mooncake = _write(tmp_path, "trace.csv", "", _line(0, 100, [1]))
    assert read_trace(mooncake).format == "mooncake"
    burstgpt = _write(tmp_path, "trace.jsonl", HEADER, "1,ChatGPT,10,5,15,API log")
    assert read_trace(burstgpt).format == "burstgpt"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ((), "is empty"),
        (("", "  "), "is empty"),
        (("time,prompt,reply", "1,2,3"), "unknown format"),
        (("[1, 2, 3]",), "unknown format"),
        ((HEADER,), "holds no request"),
    ],
)
def test_empty_or_unknown_content_is_one_config_error(tmp_path, lines, message):
    path = tmp_path / "t"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        read_trace(path)


def test_a_missing_or_binary_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        read_trace(tmp_path / "absent.jsonl")
    binary = tmp_path / "t.jsonl"
    binary.write_bytes(b'{"timestamp": 0}\n\xff\xfe\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_trace(binary)


def test_out_of_order_arrivals_are_sorted_and_equal_ones_keep_file_order(tmp_path):
    path = _write(
        tmp_path, "t.jsonl", _line(2000, 10, [1]), _line(500, 10, [2]), _line(500, 10, [3])
    )
    requests = read_trace(path).requests
    assert [(r.arrival_s, r.hash_ids) for r in requests] == [(0.5, (2,)), (0.5, (3,)), (2, (1,))]


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        ("{not json", "Expecting"),
        ("[0, 10, 4]", "not a JSON object"),
        (_line(-5, 10, [1]), "timestamp -5"),
        (
            '{"timestamp": true, "input_length": 5, "output_length": 1, "hash_ids": [1]}',
            "timestamp True",
        ),
        (_line(10, -1, []), "input_length -1"),
        (_line(10, 513, [1, 2, 3]), "3 hash_ids for 513 input tokens"),
        (_line(10, 1025, [1, 2]), "2 hash_ids for 1025 input tokens"),
        ('{"timestamp": 10, "input_length": 5, "output_length": 1}', "hash_ids None"),
        (_line(10, 5, ["a"]), "hash_ids ['a']"),
    ],
)
def test_a_bad_mooncake_line_is_named_by_file_and_line(tmp_path, bad_line, reason):
    path = _write(tmp_path, "t.jsonl", _line(0, 10, [1]), "", bad_line)
    with pytest.raises(ConfigError, match=r"t\.jsonl:3: ") as error:
        read_trace(path)
    assert reason in str(error.value)


@pytest.mark.parametrize(
    ("bad_row", "reason"),
    [
        ("x,ChatGPT,10,5,15,API log", "Timestamp 'x'"),
        ("-2,ChatGPT,10,5,15,API log", "Timestamp '-2'"),
        ("2,ChatGPT,-3,5,2,API log", "Request tokens -3"),
        ("2,ChatGPT,10,4.5,14.5,API log", "Response tokens '4.5'"),
        ("2,ChatGPT,10", "3 columns"),
    ],
)
def test_a_bad_burstgpt_row_is_named_by_file_and_line(tmp_path, bad_row, reason):
    path = _write(tmp_path, "t.csv", HEADER, "1,ChatGPT,10,5,15,API log", "", bad_row)
    with pytest.raises(ConfigError, match=r"t\.csv:4: ") as error:
        read_trace(path)
    assert reason in str(error.value)


def test_the_window_is_half_open_on_the_trace_clock():
    def arrivals(start: float | None, end: float | None) -> list[float]:
        return [r.arrival_s for r in read_trace(BURSTGPT_1, window=(start, end)).requests]

    assert arrivals(45, 131) == [45, 118]
    assert arrivals(131, None) == [131, 131, 142, 157, 163, 188, 196]
    assert arrivals(None, 6) == [5]
    # The window's failures are counted, those outside it are not.
    assert read_trace(BURSTGPT_1, window=(160, None)).skipped == 1


def test_an_empty_window_says_what_the_trace_spans():
    with pytest.raises(ConfigError, match=r"window \[200, 300\) s.*spans 5–196 s"):
        read_trace(BURSTGPT_1, window=(200, 300))
    with pytest.raises(ConfigError, match=r"the 1 requests .* all have 0 input or 0 output"):
        read_trace(BURSTGPT_1, window=(126, 127))


def test_replay_starts_at_the_first_request_and_divides_the_gaps_by_speed():
    real_time = load_replay(BURSTGPT_1, window=(40, 150))
    assert real_time.arrivals_ns == (0, 73 * S, 86 * S, 86 * S, 97 * S)
    twice = load_replay(BURSTGPT_1, speed=2.0, window=(40, 150))
    assert twice.arrivals_ns == tuple(t // 2 for t in real_time.arrivals_ns)
    assert real_time.rate == pytest.approx(4 / 97) and twice.rate == pytest.approx(8 / 97)
    assert twice.describe() == {
        "trace_format": "burstgpt",
        "trace_speed": 2.0,
        "trace_window_start_s": 40,
        "trace_window_end_s": 150,
        "trace_requests": 5,
        "trace_skipped": 1,
        "trace_first_s": 5.0,
        "trace_last_s": 196.0,
    }


def test_a_replay_all_at_one_instant_has_a_rate_of_its_count(tmp_path):
    path = _write(tmp_path, "t.jsonl", _line(7, 10, [1]), _line(7, 10, [2]), _line(7, 10, [3]))
    replay = load_replay(path)
    assert replay.arrivals_ns == (0, 0, 0) and replay.rate == 3.0


@pytest.mark.parametrize("speed", [0.0, -1.0, math.nan, math.inf])
def test_a_speed_that_is_not_a_positive_number_is_refused(speed):
    with pytest.raises(ConfigError, match="trace speed"):
        load_replay(MOONCAKE, speed=speed)


@pytest.mark.parametrize(
    ("text", "window"),
    [
        ("10m:20m", (600.0, 1200.0)),
        ("0:90s", (0.0, 90.0)),
        ("0.0ms:1h", (0.0, 3600.0)),
        (":300s", (None, 300.0)),
        ("1.5s:", (1.5, None)),
        (":", (None, None)),
    ],
)
def test_parse_window(text, window):
    assert parse_window(text) == window


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("60s", "no ':'"),
        ("60:120", "not a duration"),
        ("a:b", "not a duration"),
        ("9s:3s", "ends before it starts"),
        ("5s:5s", "ends before it starts"),
        ("-1s:5s", "not a duration"),
    ],
)
def test_parse_window_refuses_what_is_not_a_window(text, reason):
    with pytest.raises(ConfigError, match=reason):
        parse_window(text)


def test_shared_block_prefix_counts_leading_blocks_only():
    def request(*hash_ids: int) -> TraceRequest:
        return TraceRequest(0.0, 512 * len(hash_ids), 8, hash_ids)

    requests = [
        request(1, 2, 3),
        request(1, 5),  # the first's first block
        request(7, 8),
        request(1, 5, 9),  # the second's two blocks
        request(2, 3),  # blocks seen before, but not as a prefix
        request(1, 2, 3),  # the whole first
        request(1, 6, 3),  # block 3 after a new one is new too
    ]
    assert shared_block_prefix(requests) == [0, 1, 0, 2, 0, 3, 1]
