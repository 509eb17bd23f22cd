"""Conversations: sessions of turns, each resending the history the server gave."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servelab.bench.conversation import (
    ConversationSpec,
    History,
    TurnRange,
    load_sharegpt_sessions,
    next_request,
    parse_turns,
    synthetic_sessions,
)
from servelab.bench.endpoint import Api, EndpointConfig, build_body
from servelab.core.errors import ConfigError


@pytest.mark.parametrize(("text", "low", "high"), [("4", 4, 4), ("2-6", 2, 6), (" 1-1 ", 1, 1)])
def test_turns_are_a_number_or_a_range(text: str, low: int, high: int):
    assert parse_turns(text) == TurnRange(low, high)


@pytest.mark.parametrize("text", ["0", "6-2", "x", "2-", "-3", "1-100000"])
def test_bad_turns_are_one_clear_error(text: str):
    with pytest.raises(ConfigError):
        parse_turns(text)


def test_a_negative_think_time_is_refused():
    with pytest.raises(ConfigError):
        ConversationSpec(think_time_s=-1.0)


def _sessions(spec: ConversationSpec, seed: int = 0):
    texts = [(f"turn {i}", 10 + i) for i in range(40)]
    return synthetic_sessions(
        spec,
        5,
        np.random.default_rng(seed),
        user_turn=texts,
        output_lens=[32],
        system=("be brief", 3),
    )


def test_sessions_draw_their_turns_and_think_times_from_the_seed():
    spec = ConversationSpec(turns=TurnRange(2, 5), think_time_s=0.5)
    sessions = _sessions(spec)
    assert sessions == _sessions(spec)
    assert sessions != _sessions(spec, seed=1)
    assert all(2 <= len(s.turns) <= 5 for s in sessions)
    assert [s.session for s in sessions] == [0, 1, 2, 3, 4]
    assert all(s.turns[0].think_s == 0.0 for s in sessions)
    waits = [t.think_s for s in sessions for t in s.turns[1:]]
    assert all(w > 0 for w in waits)
    # user turns are used in order, none twice
    texts = [t.text for s in sessions for t in s.turns]
    assert len(set(texts)) == len(texts)


def test_each_turn_resends_the_history_and_shares_the_previous_prompt():
    spec = ConversationSpec(turns=TurnRange(3, 3))
    conversation = _sessions(spec)[1]
    history = History.start(conversation)
    first = next_request(history, 0, first_of_run=False)
    assert first.messages == (("system", "be brief"), ("user", conversation.turns[0].text))
    assert first.shared_tokens == 3  # the system prompt, which another session sent first
    assert first.input_tokens == 3 + conversation.turns[0].input_tokens
    assert next_request(history, 0, first_of_run=True).shared_tokens == 0
    history.add_reply(conversation.turns[0], "the reply", prompt_tokens=20, output_tokens=8)
    second = next_request(history, 1, first_of_run=False)
    assert second.messages == (
        ("system", "be brief"),
        ("user", conversation.turns[0].text),
        ("assistant", "the reply"),
        ("user", conversation.turns[1].text),
    )
    assert second.shared_tokens == 28  # the previous prompt and its reply
    assert second.input_tokens == 28 + conversation.turns[1].input_tokens


def test_the_body_carries_the_history_in_either_api():
    conversation = _sessions(ConversationSpec(turns=TurnRange(2, 2)))[0]
    history = History.start(conversation)
    history.add_reply(conversation.turns[0], "ok", 10, 1)
    item = next_request(history, 1, first_of_run=False)
    chat = build_body(EndpointConfig(base_url="http://127.0.0.1:1", model="m"), item)
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "user"]
    text = build_body(
        EndpointConfig(base_url="http://127.0.0.1:1", model="m", api=Api.COMPLETIONS), item
    )
    assert text["prompt"].startswith("be brief\n\n") and text["prompt"].endswith(
        conversation.turns[1].text
    )


def test_sharegpt_sessions_keep_alternating_turns_in_order(tmp_path: Path):
    data = [
        {
            "id": "a",
            "conversations": [
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "hello"},
                {"from": "human", "value": "how are you"},
                {"from": "gpt", "value": "fine"},
            ],
        },
        {"id": "b", "conversations": [{"from": "gpt", "value": "starts with the model"}]},
        {
            "id": "c",
            "conversations": [
                {"from": "human", "value": "q"},
                {"from": "gpt", "value": "a"},
                {"from": "human", "value": "q2"},
                {"from": "human", "value": "a human twice ends it"},
            ],
        },
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    assert load_sharegpt_sessions(path) == [
        [("hi", "hello"), ("how are you", "fine")],
        [("q", "a")],
    ]
    path.write_text("[]")
    with pytest.raises(ConfigError, match="no conversation"):
        load_sharegpt_sessions(path)
