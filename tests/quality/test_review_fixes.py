"""The quality probe's review fixes: request failures are not broken answers, neutral
sampling and per-pass cache salts on the wire, a 400 that is not about logprobs stays an
http error, why teacher forcing was off, a lazy package, and a session that never ends
the sweep with a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from servelab.bench.endpoint import Api
from servelab.bench.quality.client import QualityClient, QualityTarget, cache_salt
from servelab.bench.quality.compare import compare_passes
from servelab.bench.quality.evaluate import evaluate_quality
from servelab.bench.quality.plan import DEFAULT_PROMPTS, DEFAULT_SEED, QualityPlan
from servelab.bench.quality.probes import DEFAULT_PROBES, make_probes
from servelab.bench.quality.probes import DEFAULT_SEED as PROBES_SEED
from servelab.bench.quality.results import (
    OUTPUT_FAULTS,
    REQUEST_FAILURES,
    QualityPass,
    errors_text,
    load_quality,
    output_faults,
    request_failures,
)
from servelab.bench.quality.session import SGLANG_PREFIX_CACHE_NOTE, QualitySession
from servelab.bench.quality.verdict import judge
from servelab.cli.quality_table import quality_lines
from servelab.store.rundir import RunDir
from tests.quality.helpers import N_PROBES, make_pass, reference_logprobs
from tests.quality.test_client_http import FakeVllm, _serve

NEUTRAL = {
    "top_p": 1,
    "top_k": -1,
    "min_p": 0,
    "repetition_penalty": 1.0,
    "frequency_penalty": 0,
    "presence_penalty": 0,
}


def _judge(before: QualityPass, other: QualityPass):
    return judge(
        compare_passes(before, other),
        kind="determinism",
        reference="before",
        candidate=other.name,
    )


# --- 1. request failures are not broken answers -----------------------------------------


def test_the_error_kinds_split_into_output_faults_and_request_failures() -> None:
    assert {
        "nan_logprob",
        "not_greedy",
        "reasoning_only",
        "no_finish_reason",
        "short_stream",
    } == OUTPUT_FAULTS
    assert {"http", "transport", "malformed"} == REQUEST_FAILURES
    errors = {"http": 2, "nan_logprob": 1, "newer_kind": 1}
    assert request_failures(errors) == {"http": 2}
    assert output_faults(errors) == {"nan_logprob": 1, "newer_kind": 1}  # unknown: a fault
    assert errors_text({"reasoning_only": 1, "http": 3}) == "http x3, reasoning_only x1"
    assert errors_text({}) == "none"


@pytest.mark.parametrize("kind", sorted(REQUEST_FAILURES))
def test_a_request_failure_leaves_its_probe_out_and_is_not_broken(kind: str) -> None:
    lp = reference_logprobs()
    result = _judge(make_pass("before", lp), make_pass("after", lp, error=(4, kind)))
    assert result.verdict == "within_floor"
    assert result.errors == {kind: 1}
    assert result.left_out == ["p004"]
    assert result.metrics.probes == N_PROBES - 1
    assert result.reason.endswith(f"; 1 probe left out for request failures ({kind} x1)")


@pytest.mark.parametrize("kind", sorted(OUTPUT_FAULTS))
def test_an_output_fault_in_either_pass_is_broken(kind: str) -> None:
    lp = reference_logprobs()
    result = _judge(make_pass("before", lp, error=(4, kind)), make_pass("after", lp))
    assert result.verdict == "broken" and result.moved == []
    assert result.reason == f"quality errors: {kind} x1"


def test_a_fault_beside_a_request_failure_names_both() -> None:
    lp = reference_logprobs()
    before = make_pass("before", lp, error=(1, "http"))
    result = _judge(before, make_pass("after", lp, error=(2, "nan_logprob")))
    assert result.verdict == "broken"
    assert result.reason == (
        "quality errors: nan_logprob x1; 1 probe left out for request failures (http x1)"
    )


def test_request_failures_that_leave_nothing_to_compare_are_broken() -> None:
    lp = reference_logprobs(n_probes=1)
    result = _judge(make_pass("before", lp), make_pass("after", lp, error=(0, "transport")))
    assert result.verdict == "broken" and result.metrics.probes == 0
    assert result.reason == "request failures left no probe to compare: transport x1"


# --- 2, 3, 5. what the client sends -------------------------------------------------------


def _two_passes(target: QualityTarget, server: Any) -> QualityClient:
    probes = make_probes(3, seed=2)

    async def work(url: str) -> QualityClient:
        async with QualityClient(
            QualityTarget(
                base_url=url,
                model="m",
                engine=target.engine,
                api=target.api,
                run_id=target.run_id,
            )
        ) as client:
            before = await client.run_pass(probes, name="before")
            await client.run_pass(
                probes, name="after", forced_on={"before": before}, force_own=False
            )
            return client

    return _serve(server.app(), work)


def test_vllm_gets_neutral_sampling_and_a_cache_salt_per_pass() -> None:
    server = FakeVllm()
    client = _two_passes(QualityTarget(base_url="", model="m", engine="vllm", run_id="r1"), server)
    free = [b for path, b in server.bodies if path == "/v1/completions" and b.get("stream")]
    forced = [b for path, b in server.bodies if "prompt_logprobs" in b]
    assert free and forced and client.forced_method == "prompt_logprobs"
    for body in free:
        assert body["temperature"] == 0 and {k: body[k] for k in NEUTRAL} == NEUTRAL
    assert {b["cache_salt"] for b in free} == {
        "servelab-quality-r1-before",
        "servelab-quality-r1-after",
    }
    assert {b["cache_salt"] for b in forced} == {
        "servelab-quality-r1-before-forced0",
        "servelab-quality-r1-after-forced0",
    }
    assert all("cache_salt" not in b for path, b in server.bodies if path == "/tokenize")


class _Recorder:
    """An endpoint that records bodies and answers every completion with one token."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.answer)
        app.router.add_post("/v1/chat/completions", self.answer)
        return app

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        end = {"index": 0, "text": " w", "delta": {"content": " w"}, "finish_reason": "length"}
        await response.write(b"data: " + json.dumps({"choices": [end]}).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response


@pytest.mark.parametrize(
    ("engine", "api", "expected"),
    [
        ("sglang", None, NEUTRAL),
        ("openai", None, {"frequency_penalty": 0, "presence_penalty": 0}),
        ("transformers", None, {}),
    ],
)
def test_each_dialect_gets_only_the_sampling_fields_it_takes(
    engine: str, api: Api | None, expected: dict[str, Any]
) -> None:
    server = _Recorder()
    probes = make_probes(2, seed=2)

    async def work(url: str) -> None:
        target = QualityTarget(base_url=url, model="m", engine=engine, api=api)  # type: ignore[arg-type]
        async with QualityClient(target) as client:
            await client.run_pass(probes, name="before", force_own=False)

    _serve(server.app(), work)
    sampling = set(NEUTRAL)
    for body in server.bodies:
        assert body["temperature"] == 0
        assert {k: v for k, v in body.items() if k in sampling} == expected
        assert "cache_salt" not in body


def test_a_cache_salt_keeps_to_what_vllm_accepts() -> None:
    salt = cache_salt("runs/a@b\\c", "x:before-forced1")
    assert salt == "servelab-quality-runs-a-b-c-x:before-forced1"
    long = cache_salt("r" * 300, "after")
    assert len(long) == 128 and long != cache_salt("r" * 300, "before")


class _Refuses(FakeVllm):
    """vLLM that answers the first free request and the first prompt_logprobs request
    with a 400 and `error` as its body."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__()
        self.error = error
        self.refused: set[str] = set()

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()  # aiohttp keeps the body: the parent reads it again
        kind = "forced" if "prompt_logprobs" in body else "free"
        if kind not in self.refused:
            self.refused.add(kind)
            return web.json_response(self.error, status=400)
        return await super().completions(request)


def _one_pass(server: _Refuses) -> tuple[QualityPass, QualityClient]:
    """One pass of three probes through the client against `server`, and the client."""
    probes = make_probes(3, seed=2)

    async def work(url: str) -> tuple[QualityPass, QualityClient]:
        async with QualityClient(QualityTarget(base_url=url, model="m", engine="vllm")) as client:
            return await client.run_pass(probes, name="before"), client

    return _serve(server.app(), work)


def _vllm_error(message: str) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": "BadRequestError", "code": 400}


def test_a_400_that_is_not_about_logprobs_stays_an_http_error() -> None:
    """A context overflow: that probe's http error, and logprobs and teacher forcing stay on."""
    server = _Refuses(_vllm_error("This model's maximum context length is 2048 tokens."))
    run, client = _one_pass(server)
    assert client.logprobs_available and client.forced_method == "prompt_logprobs"
    assert run.readings[0].error_kind == "http" and all(r.ok for r in run.readings[1:])
    forced = run.forced[0].readings
    assert forced[0].note == "no usable reference answer"
    assert forced[1].error_kind == "http" and forced[2].ok
    assert run.errors == {"http": 2}


def test_a_400_naming_prompt_logprobs_turns_teacher_forcing_off_with_the_reason() -> None:
    server = _Refuses(_vllm_error("prompt_logprobs is not supported; nor are logprobs"))
    run, client = _one_pass(server)
    assert not client.logprobs_available and client.forced_method is None
    assert "prompt_logprobs is not supported" in (client.logprobs_reason or "")
    assert run.errors == {}


def test_an_echoed_request_does_not_count_as_naming_logprobs() -> None:
    """pydantic's `input` echoes every field sent: only the messages are read."""
    server = _Refuses(
        {
            "detail": [
                {
                    "type": "value_error",
                    "loc": ["body", "max_tokens"],
                    "msg": "max_tokens must be positive",
                    "input": {"logprobs": 2, "prompt_logprobs": 1, "echo": False},
                }
            ]
        }
    )
    probes = make_probes(2, seed=2)

    async def work(url: str) -> QualityClient:
        async with QualityClient(QualityTarget(base_url=url, model="m", engine="vllm")) as client:
            await client.run_pass(probes, name="before")
            return client

    assert _serve(server.app(), work).logprobs_available


# --- 4. why teacher forcing was off -------------------------------------------------------


def test_forced_reason_is_recorded_and_shown() -> None:
    lp = reference_logprobs()
    result = evaluate_quality(
        probes=make_probes(N_PROBES, seed=5),
        seed=5,
        engine="openai",
        passes=[make_pass("before", lp), make_pass("after", lp)],
        logprobs_available=True,
        forced_method=None,
        forced_reason="HTTP 400 to a teacher-forced request: echo is not supported",
    )
    assert result.forced_reason is not None
    assert (
        "logprobs: available (teacher-forced by none: HTTP 400 to a teacher-forced request: "
        "echo is not supported)"
    ) in quality_lines(result)


# --- 6. a lazy package --------------------------------------------------------------------


def test_reading_results_loads_neither_aiohttp_nor_numpy() -> None:
    code = (
        "import sys\n"
        "import servelab.bench.quality.results\n"
        "from servelab.bench.quality import QualityResult, load_quality\n"
        "heavy = sorted(m for m in ('aiohttp', 'numpy') if m in sys.modules)\n"
        "print(','.join(heavy) or 'none')\n"
        "from servelab.bench.quality import QualityClient, judge\n"
        "print('aiohttp' in sys.modules, 'numpy' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["none", "True", "True"]


def test_the_package_keeps_its_public_names() -> None:
    import servelab.bench.quality as quality

    assert "QualityClient" in quality.__all__ and "QualityClient" in dir(quality)
    for name in quality.__all__:
        assert getattr(quality, name) is not None
    with pytest.raises(AttributeError):
        _ = quality.no_such_name


def test_the_plan_and_the_probes_share_their_defaults() -> None:
    assert (DEFAULT_PROMPTS, DEFAULT_SEED) == (DEFAULT_PROBES, PROBES_SEED)


# --- 7. the session never ends the sweep --------------------------------------------------


def _session(tmp_path: Path, engine: str = "vllm") -> QualitySession:
    target = QualityTarget(base_url="http://127.0.0.1:9", model="m", engine=engine)  # type: ignore[arg-type]
    run_dir = RunDir(tmp_path)
    return QualitySession(
        QualityPlan(prompts=3), target=target, run_dir=run_dir, reference=None, on_note=print
    )


def test_a_failing_evaluation_writes_a_minimal_result_with_the_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _session(tmp_path)
    try:
        assert session.target.run_id == tmp_path.name
        lp = reference_logprobs(n_probes=3)
        session.passes["before"] = make_pass("before", lp)

        def boom(**_: Any) -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr("servelab.bench.quality.session.evaluate_quality", boom)
        session._write()
    finally:
        session.close()
    written = load_quality(tmp_path)
    assert written is not None and written.comparisons == []
    assert [p.name for p in written.passes] == ["before"]
    assert written.notes == ["not evaluated: RuntimeError: a bug"]


def test_an_sglang_run_notes_the_prefix_cache_confound(tmp_path: Path) -> None:
    session = _session(tmp_path, engine="sglang")
    try:
        lp = reference_logprobs(n_probes=3)
        session.passes["before"] = make_pass("before", lp)
        session.passes["after"] = make_pass("after", lp)
        session._write()
    finally:
        session.close()
    written = load_quality(tmp_path)
    assert written is not None and SGLANG_PREFIX_CACHE_NOTE in written.notes
