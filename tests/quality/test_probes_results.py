"""The probe set's determinism and JSONL round trip; quality.json and the summary block."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.bench.quality.evaluate import evaluate_quality
from servelab.bench.quality.probes import (
    KIND_SHAPES,
    make_probes,
    probe_set_digest,
    read_probes,
    write_probes,
)
from servelab.bench.quality.results import PROBES_FILE, load_quality, quality_block, write_quality
from servelab.core import redact
from tests.quality.helpers import make_pass, reference_logprobs


def test_same_seed_same_probes_other_seed_other_probes() -> None:
    assert make_probes(12, seed=1) == make_probes(12, seed=1)
    assert probe_set_digest(make_probes(12, seed=1)) != probe_set_digest(make_probes(12, seed=2))
    # a longer set starts with the shorter one
    assert make_probes(20, seed=1)[:12] == make_probes(12, seed=1)


def test_lengths_vary_from_questions_to_passages() -> None:
    probes = make_probes(30, seed=3)
    assert {p.kind for p in probes} == set(KIND_SHAPES)
    words = {p.kind: [len(q.prompt.split()) for q in probes if q.kind == p.kind] for p in probes}
    assert max(words["question"]) < min(words["instruction"])
    assert max(words["instruction"]) < min(words["passage"])
    assert len({p.id for p in probes}) == 30
    assert all(p.max_tokens == KIND_SHAPES[p.kind][2] for p in probes)


def test_jsonl_round_trip(tmp_path: Path) -> None:
    probes = make_probes(9, seed=4)
    path = write_probes(tmp_path, probes)
    assert path == tmp_path / PROBES_FILE
    assert read_probes(tmp_path) == probes
    assert read_probes(path) == probes
    assert len(path.read_text().splitlines()) == 9


def test_quality_json_round_trip_keeps_nan(tmp_path: Path) -> None:
    lp = reference_logprobs(4, 3)
    after = make_pass("after", lp)
    after.readings[1].logprobs = [float("nan"), -math.inf, -0.5]
    result = evaluate_quality(
        probes=make_probes(4, seed=1),
        seed=1,
        engine="vllm",
        passes=[make_pass("before", lp), after],
        logprobs_available=True,
        forced_method="prompt_logprobs",
    )
    write_quality(tmp_path, result)
    assert '"NaN"' in (tmp_path / "quality.json").read_text()
    loaded = load_quality(tmp_path)
    assert loaded is not None
    values = loaded.passes[1].readings[1].logprobs or []
    assert math.isnan(values[0]) and values[1] == -math.inf
    assert loaded.comparisons == result.comparisons
    assert load_quality(tmp_path / "elsewhere") is None


def test_a_secret_that_reads_like_digits_leaves_quality_json_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files are scrubbed of every secret servelab was handed; quality.json is JSON, so only
    its strings are: a key of digits found inside a logprob must not turn it into '***'."""
    lp = reference_logprobs(4, 3)
    digits = repr(abs(float(lp[0][0]))).split(".")[1][:6]
    monkeypatch.setattr(redact, "_secrets", set())
    redact.register_secret(digits)
    result = evaluate_quality(
        probes=make_probes(4, seed=1),
        seed=1,
        engine="vllm",
        passes=[make_pass("before", lp), make_pass("after", lp)],
        logprobs_available=True,
        forced_method="prompt_logprobs",
    )
    write_quality(tmp_path, result)
    loaded = load_quality(tmp_path)
    assert loaded is not None
    assert loaded.passes[0].readings[0].logprobs == result.passes[0].readings[0].logprobs


def test_summary_block() -> None:
    lp = reference_logprobs(4, 3)
    result = evaluate_quality(
        probes=make_probes(4, seed=1),
        seed=1,
        engine="vllm",
        passes=[make_pass("before", lp), make_pass("after", lp, error=(0, "nan_logprob"))],
        logprobs_available=True,
    )
    block = quality_block(result)
    assert block.verdicts == {"determinism": "broken"}
    assert block.primary_metric == {"determinism": "mean_abs_dlogprob"}
    assert block.errors == 1 and block.probe_s == 3.0


def test_import_stays_light() -> None:
    """In a fresh interpreter: other tests of the same process may have loaded torch."""
    code = (
        "import sys, servelab.bench.quality; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
