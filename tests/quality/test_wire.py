"""The engines' wire formats, read from hand-written bodies."""

from __future__ import annotations

import json
import math

import pytest

from servelab.bench.quality.wire import (
    Answer,
    Malformed,
    parse_echo,
    parse_prompt_logprobs,
    parse_sglang_generate,
)


def _sse(answer: Answer, *events: str) -> None:
    for event in events:
        answer.take_event(event.encode())


def _completion_chunk(text: str, tokens: list[str], logprobs: list[str]) -> str:
    lps = ", ".join(logprobs)
    toks = json.dumps(tokens)
    return (
        f'{{"choices": [{{"index": 0, "text": {json.dumps(text)}, "finish_reason": null, '
        f'"logprobs": {{"tokens": {toks}, "token_logprobs": [{lps}]}}}}]}}'
    )


FINISH = '{"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}'


def _usage(n: int) -> str:
    return f'{{"choices": [], "usage": {{"prompt_tokens": 5, "completion_tokens": {n}}}}}'


def test_vllm_completions_stream_with_token_ids() -> None:
    answer = Answer(chat=False)
    _sse(
        answer,
        _completion_chunk(" the", ["token_id:11"], ["-0.5"]),
        _completion_chunk(" cat sat", ["token_id:12", "token_id:13"], ["-1.25", "-0.0"]),
        FINISH,
        _usage(3),
        "[DONE]",
    )
    reading = answer.reading("p0", 12.0)
    assert reading.ok and reading.error_kind is None
    assert reading.token_ids == [11, 12, 13]
    assert reading.token_source == "ids"
    assert reading.logprobs == [-0.5, -1.25, -0.0]
    assert reading.tokens == [" the", " cat sat", ""]
    assert reading.text == " the cat sat"
    assert reading.finish_reason == "length" and reading.completion_tokens == 3


def test_text_tokens_without_ids() -> None:
    answer = Answer(chat=False)
    _sse(answer, _completion_chunk(" a", [" a"], ["-0.1"]), FINISH, _usage(1))
    reading = answer.reading("p0", 1.0)
    assert reading.token_ids is None
    assert reading.token_source == "logprobs" and reading.tokens == [" a"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "null"])
def test_non_finite_logprob_is_a_quality_error(literal: str) -> None:
    answer = Answer(chat=False)
    _sse(
        answer,
        _completion_chunk(" a", ["token_id:1"], ["-0.1"]),
        _completion_chunk(" b", ["token_id:2"], [literal]),
        FINISH,
        _usage(2),
    )
    reading = answer.reading("p0", 1.0)
    assert not reading.ok
    assert reading.error_kind == "nan_logprob"
    assert "first at token 1" in (reading.error or "")


def test_chat_stream_with_logprobs_content() -> None:
    answer = Answer(chat=True)
    _sse(
        answer,
        '{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}',
        '{"choices": [{"index": 0, "delta": {"content": "Hi"}, "logprobs": {"content": '
        '[{"token": "token_id:7", "logprob": -0.25, "bytes": [72, 105], "top_logprobs": []}]}}]}',
        '{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}',
        _usage(1),
    )
    reading = answer.reading("p0", 1.0)
    assert reading.ok
    assert reading.token_ids == [7] and reading.logprobs == [-0.25] and reading.text == "Hi"


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_empty_content_with_reasoning_is_reasoning_only(field: str) -> None:
    answer = Answer(chat=True)
    _sse(
        answer,
        f'{{"choices": [{{"index": 0, "delta": {{"{field}": "Let me think"}}}}]}}',
        f'{{"choices": [{{"index": 0, "delta": {{"{field}": " more"}}, '
        '"finish_reason": "length"}]}',
        _usage(2),
    )
    reading = answer.reading("p0", 1.0)
    assert reading.error_kind == "reasoning_only"
    assert reading.reasoning_chars == len("Let me think more")


def test_reasoning_beside_content_is_fine() -> None:
    answer = Answer(chat=True)
    _sse(
        answer,
        '{"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}',
        '{"choices": [{"index": 0, "delta": {"content": "yes"}, "finish_reason": "stop"}]}',
    )
    assert answer.reading("p0", 1.0).ok


def test_stream_without_finish_reason() -> None:
    answer = Answer(chat=False)
    _sse(answer, _completion_chunk(" a", ["token_id:1"], ["-0.1"]), _usage(1), "[DONE]")
    reading = answer.reading("p0", 1.0)
    assert reading.error_kind == "no_finish_reason"


def test_fewer_tokens_than_usage_says() -> None:
    answer = Answer(chat=False)
    _sse(answer, _completion_chunk(" a", ["token_id:1"], ["-0.1"]), FINISH, _usage(4))
    reading = answer.reading("p0", 1.0)
    assert reading.error_kind == "short_stream"
    assert "1 tokens streamed" in (reading.error or "") and "says 4" in (reading.error or "")


def test_without_logprobs_the_token_count_is_not_checked() -> None:
    """transformers serve: chunks are not tokens, so usage cannot be held against them."""
    answer = Answer(chat=True)
    _sse(
        answer,
        '{"choices": [{"index": 0, "delta": {"content": "a b"}}]}',
        '{"choices": [{"index": 0, "delta": {"content": " c"}, "finish_reason": "length"}]}',
        _usage(9),
    )
    reading = answer.reading("p0", 1.0)
    assert reading.ok and reading.logprobs is None
    assert reading.token_source == "chunks" and reading.tokens == ["a b", " c"]


def test_error_object_in_stream() -> None:
    answer = Answer(chat=False)
    _sse(answer, '{"error": {"message": "boom", "code": 500}}')
    assert answer.reading("p0", 1.0).error_kind == "http"


def test_malformed_event() -> None:
    with pytest.raises(Malformed):
        Answer(chat=False).take_event(b"{not json")


def test_vllm_prompt_logprobs() -> None:
    body = json.loads(
        '{"choices": [{"text": "x", "prompt_logprobs": [null, '
        '{"5": {"logprob": -3.0, "rank": 4, "decoded_token": "a"}, '
        '"9": {"logprob": -0.1, "rank": 1, "decoded_token": "b"}}, '
        '{"11": {"logprob": -0.5, "rank": 1, "decoded_token": " the"}}, '
        '{"12": {"logprob": -2.0, "rank": 2, "decoded_token": " cat"}, '
        '"40": {"logprob": -0.2, "rank": 1, "decoded_token": " dog"}}]}]}'
    )
    parsed = parse_prompt_logprobs(body, [11, 12])
    assert parsed.logprobs == [-0.5, -2.0]
    assert parsed.top1 == [True, False]


def test_vllm_prompt_logprobs_nan() -> None:
    body = json.loads(
        '{"choices": [{"prompt_logprobs": [null, {"3": {"logprob": NaN, "rank": 1}}]}]}'
    )
    assert math.isnan(parse_prompt_logprobs(body, [3]).logprobs[0])


def test_vllm_prompt_logprobs_missing_token() -> None:
    body = {"choices": [{"prompt_logprobs": [None, {"4": {"logprob": -1.0, "rank": 1}}]}]}
    with pytest.raises(Malformed):
        parse_prompt_logprobs(body, [3])


def test_sglang_generate() -> None:
    body = {
        "text": "x",
        "meta_info": {
            "prompt_tokens": 5,
            "input_token_logprobs": [[-1.5, 3, None], [-0.25, 11, None], [-0.75, 12, None]],
            "input_top_logprobs": [
                [[-1.0, 8, None]],
                [[-0.25, 11, None]],
                [[-0.5, 40, None]],
            ],
        },
    }
    parsed = parse_sglang_generate(body, [11, 12])
    assert parsed.logprobs == [-0.25, -0.75]
    assert parsed.top1 == [True, False]


def test_sglang_generate_wrong_token() -> None:
    body = {"meta_info": {"input_token_logprobs": [[-0.25, 99, None]]}}
    with pytest.raises(Malformed):
        parse_sglang_generate(body, [11])


def test_echo_with_logprobs() -> None:
    prompt, continuation = "Q: hi?\nA:", " yes no"
    body = {
        "choices": [
            {
                "text": prompt + continuation + " ok",
                "logprobs": {
                    "tokens": ["Q", ":", " hi", "?", "\n", "A", ":", " yes", " no", " ok"],
                    "token_logprobs": [None, -1, -2, -1, -1, -1, -1, -0.5, -0.75, -0.1],
                    "top_logprobs": [
                        None,
                        {":": -1},
                        {" hi": -2},
                        {"?": -1},
                        {"\n": -1},
                        {"A": -1},
                        {":": -1},
                        {" yes": -0.5, " no": -1.5},
                        {" maybe": -0.5, " no": -0.75},
                        {" ok": -0.1},
                    ],
                    "text_offset": [0, 1, 2, 5, 6, 7, 8, 9, 13, 16],
                },
            }
        ]
    }
    parsed = parse_echo(body, prompt_chars=len(prompt), continuation_chars=len(continuation))
    assert parsed.logprobs == [-0.5, -0.75]
    assert parsed.top1 == [True, False]
    assert parsed.tokens == [" yes", " no"]
