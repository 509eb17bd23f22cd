"""The /metrics parser on pages of every engine version and shape users meet: vLLM V0 to
V1 and SGLang's two name generations (tests/fixtures/engine_metrics, sources cited in its
README), re-exported with underscores, federated, with extra labels, or declared but empty.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servelab.telemetry.scrape import (
    EngineSample,
    guess_engine,
    parse_metrics,
    sample_from_text,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "engine_metrics"

FIELDS = (
    "running",
    "queued",
    "kv_usage",
    "gen_throughput",
    "prompt_tokens_total",
    "generation_tokens_total",
    "prefix_queries_total",
    "prefix_hits_total",
    "block_tokens",
    "prefix_caching",
)

EXPECTED: dict[str, tuple[str, tuple[object, ...]]] = {
    # file: (engine, the FIELDS in order)
    "vllm_0.6_v0.txt": ("vllm", (4, 7, 0.93, None, 182340, 95120, None, None, 16, True)),
    "vllm_0.6_v0_declared_only.txt": (
        "vllm",
        (None, None, None, None, 0, 0, None, None, None, None),
    ),
    "vllm_0.8_v1.txt": ("vllm", (9, 2, 0.64, None, 65536, 20480, 4096, 1024, 16, True)),
    "vllm_0.10_v1_dp2.txt": ("vllm", (8, 1, 0.375, None, 5250, 1600, 5000, 1536, 64, True)),
    "vllm_0.12_v1.txt": ("vllm", (16, 4, 0.82, None, 72000, 30500, 120000, 48000, 16, True)),
    "vllm_federated_underscore.txt": (
        "vllm",
        (8, 1, 0.375, None, 5250, 1600, 5000, 1536, 16, True),
    ),
    "sglang_0.3.4.txt": (
        "sglang",
        (64, 12, 0.31, 1843.2, 50000, 40000, 50000, None, None, None),
    ),
    "sglang_collector.txt": (
        "sglang",
        (48, 6, 0.52, 2210.5, 96000, 41000, 96000, 24000, None, None),
    ),
    "sglang_dp_attention_extra_labels.txt": (
        "sglang",
        (64, 5, 0.5, 2000.0, 500000, 250000, 500000, 100000, None, None),
    ),
    "sglang_repeated_under_extra_labels.txt": (
        "sglang",
        (64, 4, 0.55, None, 17000, None, 17000, 5000, None, None),
    ),
}


def _page(name: str) -> str:
    return (FIXTURES / name).read_text()


def _fields(sample: EngineSample) -> tuple[object, ...]:
    return tuple(getattr(sample, name) for name in FIELDS)


def test_every_fixture_is_checked_and_cited():
    files = {path.name for path in FIXTURES.glob("*.txt")}
    assert files == set(EXPECTED)
    readme = (FIXTURES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in files)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_version_and_shape_reads_into_the_common_fields(name):
    engine, expected = EXPECTED[name]
    text = _page(name)
    assert guess_engine(text) == engine
    sample = sample_from_text(text, t_ns=123)
    assert sample is not None
    assert (sample.t_ns, sample.engine, sample.source) == (123, engine, "metrics")
    assert _fields(sample) == pytest.approx(expected)


def test_old_and_new_vllm_names_are_one_value_never_a_sum():
    """vLLM 0.10 serves each value under both names: the new one is read, and the old one
    still is where the new is absent."""
    page = _page("vllm_0.10_v1_dp2.txt")
    parsed = parse_metrics(page)
    assert parsed.raw.keys() >= {"vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"}
    assert parsed.value("kv_usage") == pytest.approx(0.375)
    assert parsed.value("prefix_queries_total") == 5000
    # The new names' values changed: only they are read.
    newer = page.replace(
        'vllm:kv_cache_usage_perc{engine="0",model_name="zai-org/GLM-4.5"} 0.5\n', ""
    )
    newer = newer.replace(
        'vllm:prefix_cache_hits_total{engine="1",model_name="zai-org/GLM-4.5"} 1024.0',
        'vllm:prefix_cache_hits_total{engine="1",model_name="zai-org/GLM-4.5"} 2048.0',
    )
    assert newer.count("\n") == page.count("\n") - 1
    assert parse_metrics(newer).value("kv_usage") == pytest.approx(0.25)
    assert parse_metrics(newer).value("prefix_hits_total") == 512 + 2048
    # Without the new names (vLLM 0.8), the deprecated ones are read.
    older = "\n".join(
        line
        for line in page.splitlines()
        if not re.search(r"vllm:(kv_cache_usage_perc|prefix_cache_(queries|hits))", line)
    )
    assert parse_metrics(older).value("kv_usage") == pytest.approx(0.375)
    assert parse_metrics(older).value("prefix_hits_total") == 1536


def test_sglang_old_and_new_names_read_the_same_fields():
    old = sample_from_text('sglang:num_requests_running{model_name="m"} 3.0\n')
    new = sample_from_text('sglang:num_running_reqs{model_name="m"} 3.0\n')
    assert old is not None and new is not None
    assert old.running == new.running == 3
    both = (
        'sglang:num_queue_reqs{model_name="m"} 2.0\n'
        'sglang:num_requests_waiting{model_name="m"} 5.0\n'
    )
    assert parse_metrics(both).value("queued") == 2  # the newer name, not 7


def _underscored(text: str) -> str:
    return re.sub(r"\b(vllm|sglang):", r"\1_", text)


@pytest.mark.parametrize("name", ["vllm_0.10_v1_dp2.txt", "sglang_dp_attention_extra_labels.txt"])
def test_underscore_and_ray_names_read_as_the_engines_own(name):
    text = _page(name)
    assert not re.search(r"\b(vllm|sglang):", _underscored(text))
    own = sample_from_text(text)
    assert sample_from_text(_underscored(text)) == own
    assert sample_from_text(re.sub(r"\b(vllm|sglang):", r"ray_\1:", text)) == own
    assert sample_from_text(re.sub(r"\b(vllm|sglang):", r"ray_\1_", text)) == own
    # The raw rows keep the engine's own names, whatever the page wrote.
    assert parse_metrics(_underscored(text)).raw.keys() == parse_metrics(text).raw.keys()


def test_a_declared_family_without_samples_is_not_an_error():
    """HELP/TYPE and nothing else: gauges stay None; a counter declared before its first
    increment counts 0 (prometheus_client declares labelled counters so)."""
    page = _page("vllm_0.6_v0_declared_only.txt")
    parsed = parse_metrics(page)
    assert parsed.engine == "vllm" and parsed.raw == {}
    assert parsed.value("running") is None and parsed.value("kv_usage") is None
    assert parsed.value("prompt_tokens_total") == 0
    # A declared family never hides a name that has samples.
    sample = sample_from_text(
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries.\n"
        "# TYPE vllm:prefix_cache_queries_total counter\n"
        'vllm:gpu_prefix_cache_queries_total{model_name="m"} 40.0\n'
    )
    assert sample is not None and sample.prefix_queries_total == 40


def _running(*rows: tuple[str, float]) -> float | None:
    """The running field of a page holding these (labels, value) rows of vLLM's gauge."""
    page = "".join(f"vllm:num_requests_running{{{labels}}} {value}\n" for labels, value in rows)
    return parse_metrics(page).value("running")


def test_the_label_rule_sums_workers_and_counts_each_copy_once():
    # different workers: summed
    assert _running(('engine="0"', 3), ('engine="1"', 5)) == 8
    assert _running(('instance="a",engine="0"', 3), ('instance="b",engine="0"', 5)) == 8
    assert _running(('worker_addr="http://a"', 3), ('worker_addr="http://b"', 5)) == 8
    # two Prometheus replicas, or two scrape jobs, copying one series: once, the larger
    replicas = ('engine="0",prometheus_replica="p0"', 3), ('engine="0",prometheus_replica="p1"', 2)
    assert _running(*replicas) == 3
    assert _running(('engine="0",job="a"', 3), ('engine="0",job="b"', 3)) == 3
    # the engine's row beside a federated copy of it with labels added: once
    assert _running(('engine="0"', 3), ('engine="0",instance="a",job="vllm"', 3)) == 3
    # ... and beside the federation's view of two hosts: that view alone
    hosts = ('engine="0",instance="a"', 3), ('engine="0",instance="b"', 5)
    assert _running(('engine="0"', 3), *hosts) == 8
    # a gateway's total beside its per-worker rows: not added to them
    workers = ('model_name="m",worker_addr="a"', 3), ('model_name="m",worker_addr="b"', 5)
    assert _running(('model_name="m"', 8), *workers) == 8


def test_the_engine_a_page_looks_like():
    assert guess_engine("<html>not found</html>\n") is None
    assert guess_engine("python_gc_objects_collected_total 1.0\nup 1\n") is None
    assert sample_from_text("python_gc_objects_collected_total 1.0\n") is None
    # Only families the parser does not map still say whose page it is.
    histograms = 'vllm:e2e_request_latency_seconds_count{model_name="m"} 3.0\n'
    assert guess_engine(histograms) == "vllm"
    sample = sample_from_text(histograms)
    assert sample is not None and sample.engine == "vllm" and sample.running is None


def test_a_page_with_both_engines_is_read_as_the_one_asked_for():
    both = _page("vllm_0.12_v1.txt") + _page("sglang_collector.txt")
    assert guess_engine(both) == "sglang"  # the one named more often
    vllm = sample_from_text(both, engine="vllm")
    sglang = sample_from_text(both, engine="sglang")
    assert vllm is not None and sglang is not None
    assert (vllm.engine, vllm.running, vllm.kv_usage) == ("vllm", 16, 0.82)
    assert (sglang.engine, sglang.running, sglang.kv_usage) == ("sglang", 48, 0.52)
    assert sample_from_text(_page("vllm_0.12_v1.txt"), engine="sglang") is None


def test_federation_timestamps_and_unrelated_families_are_ignored():
    text = _page("vllm_federated_underscore.txt")
    parsed = parse_metrics(text)
    assert all(name.startswith("vllm:") for name in parsed.raw)
    # the lagging replica's copy of a counter is behind: the larger value is read
    assert parsed.value("prompt_tokens_total") == 2100 + 3150
