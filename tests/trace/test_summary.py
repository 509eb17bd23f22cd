"""Summaries of synthetic traces whose answers are known by hand."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from servelab.core.errors import ConfigError
from servelab.trace import summarize_trace, summarize_traces, trace_files
from tests.trace.builders import (
    DEVICE_PID,
    annotation,
    cpu_op,
    kernel,
    memcpy,
    memset,
    profiler_span,
    thread_name,
    write_trace,
    x,
)


def gpu_events():
    """Two vLLM steps; kernels on two streams; a memset, a memcpy, one long device gap.

    Host (tid 4242): prefill step [1000, 1100) > mm [1010, 1030) > launch [1015, 1020);
    add [1040, 1050); decode step [1200, 1300) > item [1210, 1290) > memcpy call
    [1212, 1288). A second thread (tid 99): copy_ [1100, 1150).
    Device: gemm [1020, 1060) on stream 7 overlaps add [1050, 1070) on stream 20;
    memset [1075, 1080); memcpy [1220, 1230); gemm [1232, 1262).
    Busy = 50 + 5 + 10 + 30 = 95 µs; span 1020..1262 = 242; gaps 5, 140, 2.
    Window 1000..1300 = 300 (the profiler's own span [900, 1500) does not count).
    """
    return [
        thread_name("MainThread"),
        thread_name("worker", tid=99),
        profiler_span(900.0, 600.0),
        annotation("execute_context_1(8)_generation_0(0)", 1000.0, 100.0),
        cpu_op("aten::mm", 1010.0, 20.0),
        x("cudaLaunchKernel", "cuda_runtime", 1015.0, 5.0),
        cpu_op("aten::add", 1040.0, 10.0),
        annotation("execute_context_0(0)_generation_2(2)", 1200.0, 100.0),
        cpu_op("aten::item", 1210.0, 80.0),
        x("cudaMemcpyAsync", "cuda_runtime", 1212.0, 76.0),
        cpu_op("aten::copy_", 1100.0, 50.0, tid=99),
        kernel("gemm", 1020.0, 40.0, stream=7),
        kernel("add", 1050.0, 20.0, stream=20),
        memset(1075.0, 5.0),
        memcpy(1220.0, 10.0),
        kernel("gemm", 1232.0, 30.0, stream=7),
        x("execute", "gpu_user_annotation", 1020.0, 50.0, pid=DEVICE_PID, tid=7),
        x("Stream Sync", "cuda_sync", 1290.0, 1.0, pid=DEVICE_PID, tid=7),
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 4242, "tid": 4242, "ts": 1015},
        {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 1500.0, "s": "g"},
    ]


@pytest.fixture
def gpu_trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "rank0.pt.trace.json", gpu_events())


def test_busy_share_is_the_union_of_kernels_memcpy_and_memset(gpu_trace: Path):
    s = summarize_trace(gpu_trace, long_gap_us=100.0)
    assert s.schema_ == "servelab.trace/1"
    assert s.events_read == len(gpu_events())
    assert s.device and s.busy_basis == "device" and not s.truncated
    assert s.window_us == 300.0
    assert s.busy_us == 95.0
    assert s.busy_share == round(95 / 300, 6)
    assert s.span_us == 242.0
    assert s.span_busy_share == round(95 / 242, 6)
    assert (s.kernels, s.memcpys, s.memsets) == (3, 1, 1)
    assert s.kernel_us == 90.0 and s.mean_kernel_us == 30.0
    assert s.categories["kernel"] == 3 and s.categories["Trace"] == 1
    assert s.complete_events == sum(s.categories.values()) - 1


def test_top_device_ops_and_host_ops_by_exclusive_time(gpu_trace: Path):
    s = summarize_trace(gpu_trace)
    device = [(op.name, op.category, op.count, op.total_us, op.mean_us) for op in s.top_ops]
    assert device == [
        ("gemm", "kernel", 2, 70.0, 35.0),
        ("add", "kernel", 1, 20.0, 20.0),
        ("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", 1, 10.0, 10.0),
        ("Memset (Device)", "gpu_memset", 1, 5.0, 5.0),
    ]
    assert s.top_ops[0].window_share == round(70 / 300, 6)
    host = [(op.name, op.total_us) for op in s.top_host_ops]
    assert host == [
        ("cudaMemcpyAsync", 76.0),
        ("aten::copy_", 50.0),
        ("aten::mm", 15.0),
        ("aten::add", 10.0),
        ("cudaLaunchKernel", 5.0),
        ("aten::item", 4.0),
    ]
    assert [op.name for op in summarize_trace(gpu_trace, top=2).top_host_ops] == [
        "cudaMemcpyAsync",
        "aten::copy_",
    ]


def test_threads_exclusive_sums_are_at_most_the_window(gpu_trace: Path):
    s = summarize_trace(gpu_trace)
    threads = [(t.tid, t.name, t.events, t.exclusive_us) for t in s.threads]
    # 70 + 15 + 5 + 10 (prefill step) + 20 + 4 + 76 (decode step) = the 200 µs covered.
    assert threads == [("4242", "MainThread", 7, 200.0), ("99", "worker", 1, 50.0)]
    assert all(t.exclusive_us <= s.window_us for t in s.threads)
    assert all(t.pid != str(DEVICE_PID) for t in s.threads)


def test_gaps_and_the_host_op_before_each_long_one(gpu_trace: Path):
    s = summarize_trace(gpu_trace, long_gap_us=100.0)
    g = s.gaps
    assert (g.count, g.total_us, g.longest_us) == (3, 147.0, 140.0)
    assert g.total_us == s.span_us - s.busy_us
    assert (g.long_threshold_us, g.long_count, g.long_total_us) == (100.0, 1, 140.0)
    # The device idles from 1080 to 1220; aten::add (1040) is the host op that started
    # last before 1080 (the prefill annotation started at 1000).
    assert [(gap.start_us, gap.dur_us, gap.op_before) for gap in g.longest] == [
        (80.0, 140.0, "aten::add")
    ]

    every = summarize_trace(gpu_trace, long_gap_us=1.0).gaps
    assert [(gap.dur_us, gap.op_before) for gap in every.longest] == [
        (140.0, "aten::add"),
        (5.0, "aten::add"),
        (2.0, "aten::item"),  # runtime calls are not ops: aten::item, not cudaMemcpyAsync
    ]
    assert [(c.op, c.count, c.total_us) for c in every.causes] == [
        ("aten::add", 2, 145.0),
        ("aten::item", 1, 2.0),
    ]


def test_steps_and_per_step_figures(gpu_trace: Path):
    s = summarize_trace(gpu_trace)
    assert s.steps is not None
    assert (s.steps.source, s.steps.count, s.steps.prefill, s.steps.decode) == ("vllm", 2, 1, 1)
    assert s.steps.prefill_mean_us == 100.0
    assert s.per_step is not None
    assert s.per_step.model_dump() == {
        "steps": 2,
        "source": "markers",
        "window_us": 150.0,
        "busy_us": 47.5,
        "kernels": 1.5,
        "kernel_us": 45.0,
        "device_events": 2.5,
    }
    given = summarize_trace(gpu_trace, steps=5)
    assert given.per_step is not None
    assert (given.per_step.source, given.per_step.busy_us) == ("given", 19.0)
    assert any("5 steps given; the trace marks 2" in note for note in given.notes)


def test_cpu_only_trace_says_so_and_summarises_cpu_ops(tmp_path: Path):
    events = [
        cpu_op("aten::mm", 0.0, 10.0),
        cpu_op("aten::add", 20.0, 10.0),
        cpu_op("aten::mm", 5.0, 10.0, tid=2),
        annotation("ProfilerStep#7", 0.0, 30.0, tid=3),
    ]
    s = summarize_trace(write_trace(tmp_path / "cpu.json", events), long_gap_us=5.0)
    assert not s.device and s.busy_basis == "cpu_op"
    assert (s.busy_us, s.window_us, s.span_us) == (25.0, 30.0, 30.0)
    assert s.notes[0].startswith("CPU-only trace: device-busy is not defined")
    assert [(op.name, op.category, op.count, op.total_us) for op in s.top_ops] == [
        ("aten::mm", "cpu_op", 2, 20.0),
        ("aten::add", "cpu_op", 1, 10.0),
    ]
    assert s.top_host_ops == []
    assert (s.gaps.count, s.gaps.longest_us) == (1, 5.0)
    assert s.gaps.longest[0].op_before == "aten::mm"  # tid 2's, started at 5
    assert s.steps is not None and s.steps.source == "profiler"
    assert s.kernels == 0 and s.mean_kernel_us is None


def test_memcpy_alone_makes_a_device_trace(tmp_path: Path):
    s = summarize_trace(write_trace(tmp_path / "m.json", [memcpy(0.0, 4.0), memcpy(2.0, 4.0)]))
    assert s.device and s.busy_us == 6.0 and s.kernels == 0 and s.memcpys == 2


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("bare_array", [False, True])
def test_gzip_plain_object_and_array_read_alike(tmp_path: Path, gz: bool, bare_array: bool):
    path = write_trace(tmp_path / "t.trace.json", gpu_events(), gz=gz, bare_array=bare_array)
    s = summarize_trace(path)
    assert (s.busy_us, s.window_us, s.events_read) == (95.0, 300.0, len(gpu_events()))
    assert not s.truncated


@pytest.mark.parametrize("gz", [False, True])
def test_a_truncated_file_is_summarised_up_to_the_cut(tmp_path: Path, gz: bool):
    full = write_trace(tmp_path / "full.json", gpu_events()).read_bytes()
    cut = full[: full.index(b'"name": "gemm"')]  # inside the first kernel event
    path = tmp_path / "cut.json"
    if gz:
        # A writer killed mid-file: what it flushed is there, the gzip trailer is not.
        with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as packed:
            packed.write(cut)
            packed.flush()
            flushed = raw.tell()
            packed.write(full[len(cut) :])
        path.write_bytes(path.read_bytes()[: flushed + 5])
    else:
        path.write_bytes(cut)
    s = summarize_trace(path)
    assert s.truncated
    assert 0 < s.events_read < len(gpu_events())
    assert any(note.startswith("the file ends early") for note in s.notes)
    assert s.threads and s.threads[0].exclusive_us <= s.window_us


def test_a_folder_gives_one_summary_per_trace_file(tmp_path: Path):
    names = [
        "dp0_pp0_tp0_dcp0_ep0_rank0.1790857026000000000.pt.trace.json.gz",
        "host_123.async_llm.1790857026000000000.pt.trace.json.gz",
        "1790857026-TP-1-decode.trace.json.gz",
        "plain.trace.json",
    ]
    for i, name in enumerate(names):
        write_trace(
            tmp_path / name, [cpu_op("aten::mm", 0.0, float(i + 1))], gz=name.endswith("gz")
        )
    (tmp_path / "notes.txt").write_text("not a trace")
    (tmp_path / "other.json").write_text("{}")
    summaries = summarize_traces(tmp_path)
    assert [Path(s.file).name for s in summaries] == sorted(names)
    assert [p.name for p in trace_files(tmp_path)] == sorted(names)
    assert summarize_traces(tmp_path / "plain.trace.json")[0].busy_us == 4.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"hello", "is not a JSON trace"),
        (b'{"traceEvents": [}', "is not a JSON trace"),
        (b'{"displayTimeUnit": "ms"}', "holds no trace events"),
        (b"", "is empty"),
        (b"   \n", "is empty"),
        (gzip.compress(b"not json", mtime=0), "is not a JSON trace"),
        (b"\x1f\x8b\x08\x00garbage", "is not a readable trace"),
        (b'{"traceEvents": [{"ph": "M", "name": "thread_name", "args": {}}]}', "no complete"),
    ],
)
def test_bad_files_are_config_errors(tmp_path: Path, content: bytes, message: str):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        summarize_trace(path)


def test_bad_paths_and_options(tmp_path: Path):
    with pytest.raises(ConfigError, match="no trace file or folder"):
        summarize_traces(tmp_path / "missing")
    with pytest.raises(ConfigError, match="no trace files in"):
        summarize_traces(tmp_path)
    with pytest.raises(ConfigError, match="no trace file at"):
        summarize_trace(tmp_path / "missing.json")
    path = write_trace(tmp_path / "t.json", gpu_events())
    with pytest.raises(ConfigError, match="not a regular expression"):
        summarize_trace(path, step_marker="[")
    with pytest.raises(ConfigError, match="at least 1"):
        summarize_trace(path, top=0)
