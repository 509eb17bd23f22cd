"""The probe set fits the engine's context: cut where it must be, the same set where it
need not be, and one clear line where nothing fits."""

from __future__ import annotations

import pytest

from servelab.bench.quality.probes import make_probes, probe_set_digest
from servelab.core.errors import ConfigError


def _worst_case_tokens(prompt: str) -> int:
    """What a byte-level tokenizer could spend: a token per byte."""
    return len(prompt.encode())


def test_a_roomy_engine_gets_the_set_it_would_get_without_a_limit():
    free = make_probes(12, seed=5)
    roomy = make_probes(12, seed=5, max_context=1_000_000)
    assert probe_set_digest(roomy) == probe_set_digest(free)


@pytest.mark.parametrize("max_context", [512, 1024, 2048])
def test_every_probe_and_its_reply_fit_a_small_context_at_the_worst_case(max_context: int):
    probes = make_probes(12, seed=5, max_context=max_context)
    free = make_probes(12, seed=5)
    assert [p.id for p in probes] == [p.id for p in free]
    for probe in probes:
        assert _worst_case_tokens(probe.prompt) + probe.max_tokens <= max_context
    assert any(len(p.prompt) < len(f.prompt) for p, f in zip(probes, free, strict=True))


def test_a_context_that_cannot_hold_a_reply_is_one_clear_error():
    with pytest.raises(ConfigError, match="cannot hold"):
        make_probes(3, seed=5, max_context=40)
