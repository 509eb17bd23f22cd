"""The simulator's language model: a next-token distribution that is a hash of the context.

Used only on the quality path (see `servelab.sim.greedy`). The logits at a position come
from a running BLAKE2b over the token ids before it (the prompt's, then each output
token's), so one context always gives one distribution, in any process on any machine:
the same prompt gets the same greedy answer, different prompts get different ones, and a
client that sends a prompt followed by an answer's ids (teacher forcing) reads back in
`prompt_logprobs` exactly the logprobs streamed with that answer.

Only the `VOCAB` words (ids as `servelab.sim.parsing.word_id` gives them, so /tokenize
agrees) have hashed logits, one digest byte each scaled to 0 to 32 (the greedy token
usually holds a third to a half of the probability); every other id below
`VOCAB_SIZE` shares the logit `OTHER_LOGIT`, so any id a client sends has a finite
logprob. Greedy decoding takes the largest logit, the lower vocabulary index on a tie:
rank 1 of the same distribution.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence

from servelab.sim.parsing import VOCAB_SIZE, word_id

__all__ = [
    "OTHER_LOGIT",
    "ROOT_STATE",
    "VOCAB",
    "VOCAB_IDS",
    "Distribution",
    "advance",
    "context_state",
    "decode",
    "predictions",
]

_WORDS = (
    "the of and to in is was for on that with as by at from it his an were are which this"
    " be or has had first one their its new after who they have her she two been other when"
    " there all during into school time may years more most only over city some world would"
    " where later up such used many can"
)
VOCAB = tuple(_WORDS.split())
"""The 64 words the model writes: common English words whose ids do not collide."""
VOCAB_IDS = tuple(word_id(word) for word in VOCAB)
"""Their token ids, in VOCAB's order."""
_INDEX = {token_id: index for index, token_id in enumerate(VOCAB_IDS)}
_LOGIT_SCALE = 8.0
"""A digest byte b is the logit b / 8: 0 to about 32."""
_TOP_LOGIT = 255 / _LOGIT_SCALE
OTHER_LOGIT = -4.0
"""The logit of every id outside VOCAB: together well under 1% of the probability."""
_EXP = [math.exp(byte / _LOGIT_SCALE - _TOP_LOGIT) for byte in range(256)]
"""exp(logit) per digest byte, shifted by the largest logit so that no sum overflows."""
_OTHER_MASS = (VOCAB_SIZE - len(VOCAB)) * math.exp(OTHER_LOGIT - _TOP_LOGIT)
_DIGEST_BYTES = 64
_ID_MASK = (1 << 64) - 1
"""Ids hash as 64-bit words, so that no id a client sends (negative, huge) raises."""
ROOT_STATE = hashlib.blake2b(b"servelab-sim", digest_size=_DIGEST_BYTES).digest()
"""The state before any token: what an empty context predicts from."""

if len(_INDEX) != len(VOCAB) or len(VOCAB) != _DIGEST_BYTES:
    raise RuntimeError("VOCAB must be 64 words with distinct ids")


def advance(state: bytes, token_id: int) -> bytes:
    """The state after one more token."""
    data = state + (token_id & _ID_MASK).to_bytes(8, "little")
    return hashlib.blake2b(data, digest_size=_DIGEST_BYTES).digest()


def context_state(ids: Iterable[int], state: bytes = ROOT_STATE) -> bytes:
    """The state after a sequence of tokens."""
    for token_id in ids:
        state = advance(state, token_id)
    return state


def predictions(ids: Sequence[int]) -> tuple[list[Distribution], bytes]:
    """The distribution each token of `ids` was drawn from (`[i]` predicts ids[i] from
    ids[:i]), and the state after all of them."""
    dists: list[Distribution] = []
    state = ROOT_STATE
    for token_id in ids:
        dists.append(Distribution(state))
        state = advance(state, token_id)
    return dists, state


def decode(token_id: int) -> str:
    """A vocabulary token's text, a leading space included; `<id>` for any other id."""
    index = _INDEX.get(token_id)
    return f" {VOCAB[index]}" if index is not None else f"<{token_id}>"


class Distribution:
    """The next-token distribution at one state: logprobs, ranks, the greedy choice."""

    __slots__ = ("_digest", "_log_z")

    def __init__(self, state: bytes) -> None:
        self._digest = state
        self._log_z: float | None = None

    def greedy(self) -> int:
        """The argmax: the first vocabulary word with the largest logit."""
        digest = self._digest
        return VOCAB_IDS[digest.index(max(digest))]

    def top(self, k: int) -> list[int]:
        """The `k` most likely ids, best first (ties: lower vocabulary index first)."""
        digest = self._digest
        order = sorted(range(len(VOCAB)), key=lambda index: (-digest[index], index))
        return [VOCAB_IDS[index] for index in order[:k]]

    def logprob(self, token_id: int) -> float:
        """The natural log of the token's probability."""
        if self._log_z is None:
            mass = sum(_EXP[byte] for byte in self._digest) + _OTHER_MASS
            self._log_z = _TOP_LOGIT + math.log(mass)
        return self._logit(token_id) - self._log_z

    def rank(self, token_id: int) -> int:
        """vLLM's rank: how many ids are at least as likely (1 for the argmax)."""
        logit = self._logit(token_id)
        if token_id not in _INDEX:
            return VOCAB_SIZE
        return sum(1 for byte in self._digest if byte / _LOGIT_SCALE >= logit)

    def _logit(self, token_id: int) -> float:
        index = _INDEX.get(token_id)
        return OTHER_LOGIT if index is None else self._digest[index] / _LOGIT_SCALE
