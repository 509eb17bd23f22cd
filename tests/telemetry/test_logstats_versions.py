"""Every released format of vLLM's and SGLang's stats lines, with the prefixes, number
formats and terminal wraps they reach servelab with (servelab.telemetry.logstats).

The formats are the fixtures of tests/fixtures/engine_logs/stats/ (README.md there says
where each was read); the property tests draw values and prefixes for them.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.telemetry.logstats import LogStats, StatsLine, parse_stats_line

STATS = Path(__file__).parents[1] / "fixtures" / "engine_logs" / "stats"
FORMATS = {
    engine: json.loads((STATS / f"{engine}.json").read_text())["formats"]
    for engine in ("vllm", "sglang")
}
CASES = [(engine, fmt) for engine, formats in FORMATS.items() for fmt in formats]

# Fields that name an engine rather than count something: never printed with separators.
IDENTITIES = {"rank", "engines", "forward_ct"}
USAGES = ("usage", "full_usage", "swa_usage", "mamba_usage")
DEVICES = ("GPU", "CPU", "XPU", "TPU", "HPU", "NPU")


@pytest.mark.parametrize(("engine", "fmt"), CASES, ids=[fmt["id"] for _, fmt in CASES])
def test_each_released_format_reads_to_its_numbers(engine: str, fmt: dict[str, Any]):
    assert fmt["line"] == fmt["prefix"] + fmt["template"].format(**fmt["values"])
    parsed = parse_stats_line(engine, fmt["line"], prefill=True)
    assert parsed is not None
    assert asdict(parsed) == pytest.approx(asdict(StatsLine(**fmt["expected"])))
    # Without `prefill`, a Prefill line is not a stats line (the periodic lines still are).
    periodic = parse_stats_line(engine, fmt["line"])
    assert periodic == (None if parsed.prefill_seqs is not None else parsed)


@pytest.mark.parametrize(
    ("engine", "line"),
    [
        # vLLM V0's separate prefix-cache line (vllm/engine/metrics.py LoggingStatLogger.log,
        # 0.5.5-0.11.0) and V1's per-iteration details (vllm/v1/metrics/loggers.py
        # LoggingStatLogger._log_iteration_details, 0.27.0-).
        (
            "vllm",
            "INFO 01-02 10:00:00 metrics.py:367] Prefix cache hit rate: GPU: 12.00%, CPU: 0.00%",
        ),
        (
            "vllm",
            "(APIServer pid=1) INFO 01-02 10:00:00 [loggers.py:186] Engine 000: Iteration(9): "
            "2 context requests, 900 context tokens, 5 generation requests, 5 generation "
            "tokens, iteration elapsed time: 31.20 ms, GPU KV cache usage: 4.0%",
        ),
        # Running and waiting inside a longer line are not the 0.7.0 message.
        ("vllm", "Avg generation throughput: 2.0 tokens/s, Running: 5 reqs, Waiting: 3 reqs"),
        # SGLang's flush warning (tp_worker.py ModelTpServer.flush_cache, 0.1.20) has both
        # counts but is no stats line.
        (
            "sglang",
            "Cache not flushed because there are pending requests. #queue-req: 3, #running-req: 1",
        ),
        # A Decode line cut before its queue.
        ("sglang", "[2025-01-02 10:00:00] Decode batch, #running-req: 5, #token: 900, token us"),
    ],
)
def test_lines_that_look_alike_are_not_stats(engine: str, line: str):
    assert parse_stats_line(engine, line, prefill=True) is None


def test_thousands_separators_are_read_and_field_commas_are_not():
    # The vllm-v1-optional-parts and sglang-prefill-comma formats, numbers grouped as a log
    # processor may print them.
    line = (
        "Engine 000: Avg prompt throughput: 12,345.6 tokens/s, Avg generation throughput: "
        "1,234.5 tokens/s, Running: 1,024 reqs, Waiting: 12 reqs, Preemptions: 3, GPU KV "
        "cache usage: 99.9%, Prefix cache hit rate: 0.0%"
    )
    parsed = parse_stats_line("vllm", line)
    assert parsed is not None
    assert asdict(parsed) == pytest.approx(asdict(StatsLine(0, 1024, 12, 0.999, 1234.5)))
    sglang = (
        "Prefill batch, #new-seq: 2, #new-token: 16,384, #cached-token: 1,000, token usage: "
        "0.50, #running-req: 7, #queue-req: 1,200, "
    )
    assert parse_stats_line("sglang", sglang, prefill=True) == StatsLine(
        0, 7, 1200, 0.5, None, prefill_tokens=16384, cached_tokens=1000, prefill_seqs=2
    )


def test_prefill_and_decode_lines_fill_one_sample_per_rank():
    stats = LogStats("sglang")
    decode = stats.feed(
        "[2025-01-02 10:00:00 DP0 TP0] Decode batch, #running-req: 4, #token: 100, token "
        "usage: 0.10, cuda graph: True, gen throughput (token/s): 50.00, #queue-req: 2",
        t_ns=1,
    )
    prefill = stats.feed(
        "[2025-01-02 10:00:01 DP0 TP0] Prefill batch, #new-seq: 3, #new-token: 600, "
        "#cached-token: 40, token usage: 0.20, #running-req: 5, #queue-req: 0, cuda graph: "
        "False, input throughput (token/s): 900.00",
        t_ns=2,
    )
    other_rank = stats.feed(
        "[2025-01-02 10:00:01 DP1 TP1] Decode batch, #running-req: 6, #token: 300, token "
        "usage: 0.30, cuda graph: True, gen throughput (token/s): 70.00, #queue-req: 1",
        t_ns=3,
    )
    assert decode is not None and prefill is not None and other_rank is not None
    assert (decode.prefill_tokens, decode.gen_throughput) == (None, 50.0)
    # The Prefill line updates running, queue and usage; the Decode throughput carries.
    assert (prefill.running, prefill.queued, prefill.kv_usage) == (5, 0, 0.2)
    assert (prefill.gen_throughput, prefill.prefill_tokens, prefill.cached_tokens) == (50, 600, 40)
    assert prefill.prefill_seqs == 3
    # A rank that has not had a prefill yet leaves the prefill sums unknown.
    assert (other_rank.running, other_rank.queued, other_rank.gen_throughput) == (11, 1, 120)
    assert other_rank.kv_usage == pytest.approx(0.25)
    assert other_rank.prefill_tokens is None


def test_a_wrapped_line_is_joined_once_and_a_stray_start_is_dropped():
    stats = LogStats("vllm")
    head = "INFO 01-02 10:00:00 [loggers.py:111] Engine 001: Avg prompt throughput: 0.0 tok"
    tail = (
        "ens/s, Avg generation throughput: 10.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%"
    )
    assert stats.feed(head, t_ns=1) is None
    joined = stats.feed(tail, t_ns=2)
    assert joined is not None and (joined.running, joined.gen_throughput) == (2, 10.0)
    # A start followed by an unrelated line is forgotten, not joined with a later one.
    assert stats.feed(head, t_ns=3) is None
    assert stats.feed("INFO 01-02 10:00:01 an unrelated line", t_ns=4) is None
    assert stats.feed(tail, t_ns=5) is None
    assert [s.t_ns for s in stats.trace().samples] == [2]


# --- property tests: any values, prefixes and number formats ----------------------------


@st.composite
def vllm_prefixes(draw: st.DrawFn) -> str:
    stamp = draw(st.sampled_from(["", "2025-01-02T10:00:00.{ns:09d}Z "]))
    process = draw(
        st.sampled_from(
            [
                "",
                "(APIServer pid={pid}) ",
                "(EngineCore_0 pid={pid}) ",
                "(EngineCore_DP{n} pid={pid}) ",
                "(VllmWorker rank={n} pid={pid}) ",
                "\x1b[36m(APIServer pid={pid})\x1b[0m ",
            ]
        )
    )
    logger = draw(
        st.sampled_from(
            [
                "",
                "INFO 01-02 10:00:00 metrics.py:341] ",
                "INFO 01-02 10:00:00 [loggers.py:123] ",
                "INFO 01-02 10:00:00 [v1/metrics/loggers.py:123] ",
            ]
        )
    )
    numbers = {
        "ns": draw(st.integers(0, 10**9 - 1)),
        "pid": draw(st.integers(1, 4_194_304)),
        "n": draw(st.integers(0, 15)),
    }
    return (stamp + process + logger).format(**numbers)


@st.composite
def sglang_prefixes(draw: st.DrawFn, *, data_parallel: bool) -> tuple[str, int | None]:
    stamp = draw(st.sampled_from(["", "2025-01-02T10:00:00.{ns:09d}Z "]))
    ranks = [
        "",
        " TP{tp}",
        " PP{pp} MOE_DP{moe} TP{tp} EP{tp}",
    ]
    if data_parallel:
        ranks += [" DP{dp} TP{tp}", " DP{dp} PP{pp} ATTN_CP{pp} MOE_DP{moe} TP{tp} EP{tp}"]
    bracket = draw(
        st.sampled_from(
            [
                "",
                "[10:00:00{ranks}] ",
                "[2025-01-02 10:00:00{ranks}] ",
                "[2025-01-02 10:00:00.123{ranks}] ",
            ]
        )
    )
    chosen = draw(st.sampled_from(ranks))
    dp = draw(st.integers(0, 63))
    numbers = {
        "ns": draw(st.integers(0, 10**9 - 1)),
        "dp": dp,
        "tp": draw(st.integers(0, 63)),
        "pp": draw(st.integers(0, 7)),
        "moe": draw(st.integers(0, 7)),
    }
    text = (stamp + bracket.replace("{ranks}", chosen)).format(**numbers)
    return text, dp if bracket and "DP" in chosen.split("MOE_")[0] else None


def _values(draw: st.DrawFn, template: str) -> dict[str, Any]:
    """A value for every field of `template`, in the range and precision its format keeps."""
    values: dict[str, Any] = {}
    for _, name, spec, _ in string.Formatter().parse(template):
        if name is None:
            continue
        if name == "device":
            values[name] = draw(st.sampled_from(DEVICES))
        elif spec == "":
            values[name] = draw(st.booleans())
        elif name in IDENTITIES:
            values[name] = draw(st.integers(1 if name == "engines" else 0, 999))
        elif spec == "d":
            values[name] = draw(st.integers(0, 10**7))
        else:  # ".1f" or ".2f": exact at that precision
            scale = 10 ** int(spec[1])
            top = scale if name in USAGES else 10**7
            values[name] = draw(st.integers(0, top)) / scale
    return values


def _render(template: str, values: dict[str, Any], *, grouped: bool) -> str:
    """`template` filled in, numbers with thousands separators when `grouped`."""
    parts = []
    for literal, name, spec, _ in string.Formatter().parse(template):
        parts.append(literal)
        if name is None:
            continue
        numeric = spec in ("d", ".1f", ".2f") and name not in IDENTITIES
        parts.append(format(values[name], f",{spec}" if grouped and numeric else spec))
    return "".join(parts)


def _expected(engine: str, values: dict[str, Any], dp: int | None) -> StatsLine:
    """What the line must read to, from the values the template was filled with."""
    if engine == "vllm":
        rank = -1 if "engines" in values else values.get("rank", 0)
        kv_usage = values["kv_pct"] / 100 if "kv_pct" in values else None
    else:
        rank = dp if dp is not None else values.get("rank", 0)
        usages = [values[name] for name in USAGES if name in values]
        kv_usage = max(usages) if usages else None
    return StatsLine(
        rank=rank,
        running=values.get("running"),
        queued=values.get("queued"),
        kv_usage=kv_usage,
        gen_throughput=values.get("gen"),
        prefill_tokens=values.get("new_token"),
        cached_tokens=values.get("cached_token"),
        prefill_seqs=values.get("new_seq"),
    )


@st.composite
def generated_lines(draw: st.DrawFn, engine: str) -> tuple[str, str, StatsLine]:
    """(template, line, expected) for one of `engine`'s formats."""
    fmt = draw(st.sampled_from(FORMATS[engine]))
    template = fmt["template"]
    values = _values(draw, template)
    if engine == "vllm":  # the rank is in the message
        prefix, dp = draw(vllm_prefixes()), None
    else:
        prefix, dp = draw(sglang_prefixes(data_parallel="{rank" not in template))
    line = prefix + _render(template, values, grouped=draw(st.booleans()))
    return template, line, _expected(engine, values, dp)


@pytest.mark.parametrize("engine", sorted(FORMATS))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_values_prefixes_and_separators_read_back(engine: str, data: st.DataObject):
    _, line, expected = data.draw(generated_lines(engine))
    assert parse_stats_line(engine, line, prefill=True) == expected


# Where a stats line has begun (the reader keeps such a line) and, for SGLang, where its
# last required field starts: a break inside that number, when the line ends with it,
# cannot be told from a whole line.
STARTS = {
    "vllm": re.compile(r"Avg prompt throughput:"),
    "sglang": re.compile(r"Decode batch|Prefill? batch|new fill batch|#running-req: \d+, #token"),
}
QUEUE = "#queue-req: "


@pytest.mark.parametrize("engine", sorted(FORMATS))
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_line_wrapped_anywhere_after_its_start_reads_the_same(engine: str, data: st.DataObject):
    template, line, expected = data.draw(generated_lines(engine))
    start = STARTS[engine].search(line)
    if start is None:  # vLLM 0.7.0's short line has no start to keep
        return
    end = line.rindex(QUEUE) + len(QUEUE) if QUEUE in template else len(line) - 1
    cut = data.draw(st.integers(start.end(), end))
    first, second = line[:cut], line[cut:]
    if data.draw(st.booleans()):  # a terminal capture that trims trailing blanks
        first = first.rstrip(" ")
    stats = LogStats(engine)
    stats.feed("INFO an unrelated line", t_ns=0)
    stats.feed(first, t_ns=1)
    stats.feed(second, t_ns=2)
    samples = stats.trace().samples
    assert len(samples) == 1
    sample = samples[0]
    assert (sample.running, sample.queued, sample.kv_usage, sample.gen_throughput) == (
        expected.running,
        expected.queued,
        expected.kv_usage,
        expected.gen_throughput,
    )
    assert (sample.prefill_tokens, sample.cached_tokens, sample.prefill_seqs) == (
        expected.prefill_tokens,
        expected.cached_tokens,
        expected.prefill_seqs,
    )
