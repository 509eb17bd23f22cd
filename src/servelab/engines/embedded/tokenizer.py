"""The embedded model's tokenizer: byte-level BPE trained on the bundled corpus.

Every ordinary token decodes to printable ASCII (0x20-0x7E), so each generated token
is a complete, non-empty piece of text that transformers serve streams as its own SSE
event: no token is held back waiting for the rest of a UTF-8 character, and none
decodes to nothing. A normalizer maps any other input (newlines, tabs, accents, emoji)
onto printable characters first, so every prompt tokenizes completely.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servelab.engines.embedded.presets import VOCAB_SIZE

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "CHAT_TEMPLATE",
    "RESPONSE_TEMPLATE",
    "SPECIAL_TOKENS",
    "read_corpus",
    "train_tokenizer",
    "write_tokenizer",
]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Trained first, so they hold ids 0, 1 and 2."""

PRINTABLE_ASCII = "".join(chr(c) for c in range(0x20, 0x7F))

# ChatML with a space where ChatML has a newline: the template stays printable ASCII.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }} "
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)

# transformers serve otherwise parses a qwen3_moe model's output with Qwen's template,
# which holds back whitespace and "<" (a possible "<tool_call>" or "<think>") and merges
# them into the next chunk. One plain content field with no delimiters streams each
# token's text as soon as it is decoded.
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant ",
    "fields": {"content": {"content": "text"}},
}


def read_corpus() -> str:
    """The bundled training text, its line breaks turned into spaces."""
    text = resources.files(__package__).joinpath("corpus.txt").read_text(encoding="ascii")
    return " ".join(text.split())


def train_tokenizer() -> Tokenizer:
    """Train the BPE on the corpus; deterministic for a given `tokenizers` version."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.Sequence(
        [
            normalizers.NFKD(),
            normalizers.StripAccents(),
            normalizers.Replace(Regex(r"\s"), " "),
            normalizers.Replace(Regex(r"[^ -~]"), "?"),
        ]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    # The byte-level symbols of the 95 printable characters, so all of them are tokens
    # whether or not the corpus uses them; no other byte can reach the model.
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    pieces = byte_level.pre_tokenize_str(PRINTABLE_ASCII)
    alphabet = sorted({symbol for piece, _ in pieces for symbol in piece})
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tokenizer.train_from_iterator([read_corpus()], trainer=trainer)
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"BPE reached {tokenizer.get_vocab_size()} tokens, not {VOCAB_SIZE}")
    return tokenizer


def write_tokenizer(folder: Path) -> list[int]:
    """Train the tokenizer, save it with its chat template to `folder`; return the special ids."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(),
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=list(SPECIAL_TOKENS),
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 20,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    tokenizer.save_pretrained(folder)
    ids = tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    if not isinstance(ids, list):  # a list of tokens always gives a list of ids
        raise TypeError(f"expected a list of token ids, got {ids!r}")
    return ids
