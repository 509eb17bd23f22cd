"""The probe set: prompts generated from a seed, recorded so another run replays them.

The prompts are random words (bench.prompts), so they work with any weights, random ones
included: quality here means "answers the same as the reference", not "answers right".
Lengths vary on purpose, from short questions to long passages, because numerics that
differ with batch shape or sequence length (split-K reductions, chunked prefill,
attention backends) show on some lengths and not others.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.bench.prompts import PromptBuilder, word_pool
from servelab.bench.quality.results import PROBES_FILE
from servelab.core.errors import ConfigError

__all__ = [
    "DEFAULT_PROBES",
    "DEFAULT_SEED",
    "KIND_SHAPES",
    "Probe",
    "ProbeKind",
    "make_probes",
    "probe_set_digest",
    "read_probes",
    "write_probes",
]

DEFAULT_PROBES = 32
"""--quality-prompts: enough probes for the bootstrap to call a drift that moves a few
of them (the drift rule needs the interval's lower end above the floor), few enough that
a pass costs seconds next to a sweep."""
DEFAULT_SEED = 39

ProbeKind = Literal["question", "instruction", "passage"]

KIND_SHAPES: dict[ProbeKind, tuple[int, int, int]] = {
    "question": (6, 24, 32),
    "instruction": (40, 160, 64),
    "passage": (300, 1200, 64),
}
"""Per kind: fewest and most words of its body (drawn log-uniformly), and max_tokens."""

_FRAMES: dict[ProbeKind, str] = {
    "question": "Question: {body}?\nAnswer:",
    "instruction": "Rewrite the following list of words as one sentence: {body}.\nSentence:",
    "passage": "Read the passage and continue it.\n\n{body}.\n\nContinuation:",
}


class Probe(BaseModel):
    """One prompt of the probe set, asked greedily for at most max_tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="Stable name: position and kind, e.g. 'p007-passage'.")
    kind: ProbeKind = Field(description="question, instruction or passage (by length).")
    prompt: str = Field(description="The prompt text, sent as is (or as the user message).")
    max_tokens: int = Field(description="Tokens the greedy continuation may run to.")


def make_probes(
    n: int = DEFAULT_PROBES, *, seed: int = DEFAULT_SEED, max_context: int | None = None
) -> list[Probe]:
    """n probes from `seed`, kinds in turn so every n >= 3 holds each length class.

    With `max_context` (the engine's max_model_len) a body too long to fit with its reply
    is cut to what fits at the worst case (`_words_that_fit`); the draws are the same, so
    on an engine with room the set, and its digest, is the one without a limit.
    """
    if n < 1:
        raise ConfigError(f"--quality-prompts must be at least 1, not {n}")
    pool = word_pool(None)
    rng = np.random.default_rng(seed)
    builder = PromptBuilder(pool, rng, None, None)
    kinds: list[ProbeKind] = list(KIND_SHAPES)
    probes: list[Probe] = []
    for index in range(n):
        kind = kinds[index % len(kinds)]
        low, high, max_tokens = KIND_SHAPES[kind]
        words = round(float(np.exp(rng.uniform(np.log(low), np.log(high)))))
        if max_context is not None:
            words = min(words, _words_that_fit(kind, max_tokens, max_context, pool.words))
        body, _ = builder.exact([words])[0]
        probes.append(
            Probe(
                id=f"p{index:03d}-{kind}",
                kind=kind,
                prompt=_FRAMES[kind].format(body=body),
                max_tokens=max_tokens,
            )
        )
    return probes


def _words_that_fit(kind: ProbeKind, max_tokens: int, max_context: int, words: list[str]) -> int:
    """The most body words whose prompt and reply fit `max_context` tokens whatever the
    tokenizer: a byte-level one spends at most a token per byte, so a word costs at most
    its longest spelling and the space before it, and the frame its own bytes."""
    per_word = max(len(word.encode()) for word in words) + 1
    frame = len(_FRAMES[kind].format(body="").encode())
    room = max_context - max_tokens - frame
    if room < per_word:
        raise ConfigError(
            f"the engine's context of {max_context} tokens cannot hold a {kind} probe "
            f"and its {max_tokens}-token reply"
        )
    return room // per_word


def probe_set_digest(probes: list[Probe]) -> str:
    """sha256 of the set's JSONL bytes: two runs compare only on the same digest."""
    return hashlib.sha256(_jsonl(probes)).hexdigest()


def write_probes(run_dir: Path, probes: list[Probe]) -> Path:
    """Write quality_probes.jsonl in `run_dir` (replaced whole)."""
    path = run_dir / PROBES_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(_jsonl(probes))
    tmp.replace(path)
    return path


def read_probes(path: Path) -> list[Probe]:
    """A probe set from its JSONL file, or from the run directory holding one."""
    if path.is_dir():
        path = path / PROBES_FILE
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        raise ConfigError(f"no probe set at {path}") from None
    try:
        return [Probe.model_validate_json(line) for line in lines if line.strip()]
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a probe set: {exc.errors()[0]['msg']}") from None


def _jsonl(probes: list[Probe]) -> bytes:
    return b"".join(orjson.dumps(p.model_dump()) + b"\n" for p in probes)
