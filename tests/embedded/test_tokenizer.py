from __future__ import annotations

from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream
from transformers import AutoTokenizer
from transformers.cli.serving.utils import get_response_template, response_events_to_chunks
from transformers.utils.chat_parsing import ResponseParser

from servelab.engines.embedded import VOCAB_SIZE
from servelab.engines.embedded.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS

PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))


@pytest.fixture(scope="module")
def rust_tokenizer(tiny_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))


def _is_printable_ascii(text: str) -> bool:
    return all(" " <= c <= "~" for c in text)


def test_corpus_is_printable_ascii_prose_of_the_promised_size() -> None:
    data = resources.files("servelab.engines.embedded").joinpath("corpus.txt").read_bytes()
    assert 40_000 <= len(data) <= 60_000
    assert all(0x20 <= b <= 0x7E or b == 0x0A for b in data)
    assert len(set(data.decode().lower().split())) > 1500


def test_vocabulary_is_full_with_special_tokens_first(rust_tokenizer: Tokenizer) -> None:
    assert rust_tokenizer.get_vocab_size() == VOCAB_SIZE
    assert [rust_tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2]


def test_every_ordinary_token_decodes_to_printable_ascii(rust_tokenizer: Tokenizer) -> None:
    bad = [
        token_id
        for token_id in range(len(SPECIAL_TOKENS), VOCAB_SIZE)
        if not (text := rust_tokenizer.decode([token_id])) or not _is_printable_ascii(text)
    ]
    assert bad == []


def test_each_token_streams_as_its_own_text(rust_tokenizer: Tokenizer) -> None:
    """What transformers serve does per generated token: every step yields that token's text."""
    stream = DecodeStream([], skip_special_tokens=True)
    ordinary = range(len(SPECIAL_TOKENS), VOCAB_SIZE)
    steps = [stream.step(rust_tokenizer, token_id) for token_id in ordinary]
    assert steps == [rust_tokenizer.decode([token_id]) for token_id in ordinary]


def test_every_printable_character_round_trips(rust_tokenizer: Tokenizer) -> None:
    encoding = rust_tokenizer.encode(PRINTABLE)
    assert rust_tokenizer.decode(encoding.ids) == PRINTABLE
    for char in PRINTABLE:
        assert rust_tokenizer.decode(rust_tokenizer.encode(char).ids) == char


def test_other_input_is_normalized_not_dropped(rust_tokenizer: Tokenizer) -> None:
    text = "Caf\u00e9\tna\u00efve\r\nline \U0001f600 \u4e2d end"
    decoded = rust_tokenizer.decode(rust_tokenizer.encode(text).ids)
    assert decoded == "Cafe naive  line ? ? end"


def test_chat_template_renders_chatml_on_one_line(tiny_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi there"}]},
    ]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == (
        "<|im_start|>system Be brief.<|im_end|>"
        "<|im_start|>user Hi there<|im_end|>"
        "<|im_start|>assistant "
    )
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    ids = list(encoded["input_ids"])
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3
    assert _is_printable_ascii(CHAT_TEMPLATE)


def test_response_template_streams_every_piece_at_once(tiny_dir: Path) -> None:
    """transformers serve must use our template, not Qwen's, and emit each text unbuffered."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    model = SimpleNamespace(config=SimpleNamespace(model_type="qwen3_moe"))
    template = get_response_template(tokenizer, model)
    assert template == tokenizer.response_template
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    parser = ResponseParser(template, prefix=prompt)
    assert response_events_to_chunks(parser.initial_events) == []
    # Whitespace and "<" are what Qwen's template holds back; "<think>" it reroutes.
    for piece in (" ", "  ", "<", "think", ">", "<think>", " <tool_call>", "</think>", "x"):
        assert response_events_to_chunks(parser.feed(piece)) == [piece]
    message, final_events = parser.finalize()
    assert response_events_to_chunks(final_events) == []
    assert set(message) == {"role", "content"}
