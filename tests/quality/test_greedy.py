"""The not_greedy check (bench.quality.greedy): a token emitted at temperature 0 below its
position's best top logprob by more than GREEDY_TOLERANCE_NATS, read from the stream."""

from __future__ import annotations

import json

import numpy as np
import pytest

from servelab.bench.quality.greedy import GREEDY_TOLERANCE_NATS, not_greedy
from servelab.bench.quality.wire import Answer

FINISH = '{"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}'


def _completion(token: int, logprob: float, top: dict[int, float]) -> str:
    """One vLLM completions chunk: the sampled token, then the top logprobs."""
    return json.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "text": f" w{token}",
                    "finish_reason": None,
                    "logprobs": {
                        "tokens": [f"token_id:{token}"],
                        "token_logprobs": [logprob],
                        "top_logprobs": [{f"token_id:{t}": v for t, v in top.items()}],
                    },
                }
            ]
        }
    )


def _read(*events: str, chat: bool = False):
    answer = Answer(chat=chat)
    for event in events:
        answer.take_event(event.encode())
    return answer.reading("p0", 1.0)


def test_a_runner_up_emitted_is_not_greedy_and_named() -> None:
    """The simulator's wrong-token: token 1 is the runner-up, listed before the best."""
    reading = _read(
        _completion(11, -0.4, {11: -0.4, 12: -1.9}),
        _completion(13, -1.2, {13: -1.2, 14: -0.7}),
        _completion(15, -0.3, {15: -0.3, 16: -2.0}),
        FINISH,
    )
    assert not reading.ok and reading.error_kind == "not_greedy"
    assert reading.error == (
        "1 tokens emitted at temperature 0 below their position's best top logprob, first "
        "at token 1 (0.5 nats under)"
    )
    assert reading.token_ids == [11, 13, 15]  # the answer is kept for the diff


def test_an_exact_tie_is_greedy() -> None:
    """Two tokens of equal logit: either is an argmax, and the engine reports the same
    float for both."""
    reading = _read(_completion(11, -0.69, {11: -0.69, 12: -0.69}), FINISH)
    assert reading.ok, reading.error


def test_float32_rounding_is_within_the_tolerance() -> None:
    below = -0.5 - GREEDY_TOLERANCE_NATS / 2
    assert _read(_completion(11, below, {11: below, 12: -0.5}), FINISH).ok
    over = -0.5 - 2 * GREEDY_TOLERANCE_NATS
    assert _read(_completion(11, over, {11: over, 12: -0.5}), FINISH).error_kind == "not_greedy"


def test_chat_top_logprobs_are_read() -> None:
    entry = {
        "token": "token_id:7",
        "logprob": -2.0,
        "top_logprobs": [
            {"token": "token_id:7", "logprob": -2.0},
            {"token": "token_id:8", "logprob": -0.2},
        ],
    }
    chunk = {"choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": {"content": [entry]}}]}
    end = '{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}'
    assert _read(json.dumps(chunk), end, chat=True).error_kind == "not_greedy"


def test_without_top_logprobs_nothing_is_judged() -> None:
    """An engine that lists no alternatives (or only the sampled token) cannot show a
    token was not its best: the check needs TOP_LOGPROBS of them."""
    assert not_greedy([-3.0, -2.0], [None, []]) is None
    assert not_greedy([-3.0], [[-3.0]]) is None
    assert not_greedy([-3.0], [[float("nan"), -3.0]]) is None
    found = not_greedy([-3.0, -2.0, -1.0], [[-3.0, -1.0], None, [-1.0, -0.5]])
    assert found is not None and (found.tokens, found.first) == (2, 0)
    assert found.first_gap_nats == pytest.approx(2.0)


def test_the_tolerance_holds_float32_log_softmax_computed_two_ways() -> None:
    """The derivation's premise: the argmax's logprob from one float32 log-softmax sits
    under the best of another (another summation order of the logsumexp) by far less than
    the tolerance, on logits of a real model's spread and a large vocabulary."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        logits = (rng.standard_normal(2**17) * 4).astype(np.float32)
        lse_a = np.float32(np.log(np.sum(np.exp(logits - logits.max(), dtype=np.float32))))
        lse_b = np.float32(np.log(np.sum(np.sort(np.exp(logits - logits.max()))[::-1])))
        a = (logits - logits.max()) - lse_a
        b = (logits - logits.max()) - lse_b
        best = int(np.argmax(logits))
        assert float(b.max() - a[best]) <= GREEDY_TOLERANCE_NATS / 4
