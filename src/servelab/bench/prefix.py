"""The prefix cache in one level: the hit rate the engine measured beside the ideal one.

The workload knows, for every request, how many leading prompt tokens repeat a prompt sent
before it (`RequestItem.shared_tokens`). An engine caches whole blocks (vLLM's
`--block-size`, SGLang's `--page-size`) and always computes a prompt's last token, so
what it could hit with unbounded memory is that count, less the last token, rounded down
to whole blocks: the ideal. The engine's own counters (`telemetry.scrape`: vLLM's
`prefix_cache_queries_total` / `prefix_cache_hits_total`, SGLang's prompt and cached
token counters) give what it did hit over the same span. The gap between the two is what
`diagnose`'s `prefix_cache` rule explains.

The chat template's opening tokens, the same in every request, are not in the workload's
count: an engine may hit a few tokens more per request than the ideal says.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from servelab.bench.records import RequestRecord
from servelab.engines.knobs import flag_value
from servelab.telemetry.summary import EngineLevel

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "PrefixCacheLevel",
    "block_tokens_from",
    "prefix_cache_level",
    "shareable_tokens",
]

DEFAULT_BLOCK_TOKENS = {"vllm": 16, "vllm-cpu": 128, "sglang": 1}
"""The engines' own defaults where nothing says otherwise: vLLM's `--block-size` is 16 on
GPUs and 128 on its CPU backend; SGLang's radix cache matches token by token
(`--page-size` 1)."""
_BLOCK_FLAGS = ("--block-size", "--page-size")


class PrefixCacheLevel(BaseModel):
    """One level's prefix cache: the workload's ideal hit rate and the engine's measured one."""

    block_tokens: int = Field(description="Tokens per cache block the ideal is counted in.")
    block_source: str = Field(description="Where the block size came from.")
    prompt_tokens: int = Field(description="Prompt tokens of the level's measured requests.")
    shared_tokens: int = Field(
        default=0, description="Of those, tokens that repeat an earlier prompt's prefix."
    )
    shareable_tokens: int = Field(
        description="Of those, tokens in whole blocks that repeat an earlier prompt's prefix."
    )
    ideal_hit_rate: float | None = Field(
        description="shareable / prompt tokens: what an unbounded cache would hit."
    )
    queries: float | None = Field(
        default=None, description="The engine's prefix-cache queries over the level (tokens)."
    )
    hits: float | None = Field(
        default=None, description="The engine's prefix-cache hits over the level (tokens)."
    )
    hit_rate: float | None = Field(
        default=None, description="hits / queries: what the engine measured; None without them."
    )
    engine: str | None = Field(default=None, description="Whose counters: vllm, sglang.")


def shareable_tokens(shared: int, prompt: int, block: int) -> int:
    """Tokens an engine could hit: the shared prefix less the prompt's last token (always
    computed), in whole blocks."""
    usable = max(0, min(shared, prompt - 1))
    return usable // block * block


def block_tokens_from(
    engine: str | None,
    command: Sequence[str] | None,
    reported: int | None = None,
    *,
    cpu: bool = False,
) -> tuple[int, str]:
    """The cache's block size and where it came from: the launch command's flag, what the
    engine reported about itself, its default, or one token where the engine is unknown."""
    for flag in _BLOCK_FLAGS:
        value = flag_value(command or (), flag)
        if value is not None and value.isdigit() and int(value) > 0:
            return int(value), f"engine command: {flag} {value}"
    if reported is not None and reported > 0:
        return reported, "the engine's own report"
    key = f"{engine}-cpu" if engine == "vllm" and cpu else engine
    if key in DEFAULT_BLOCK_TOKENS:
        where = "on the CPU" if cpu and engine == "vllm" else ""
        return DEFAULT_BLOCK_TOKENS[key], f"{engine}'s default {where}".rstrip()
    return 1, "the engine's block size is unknown: counted per token"


def prefix_cache_level(
    records: Sequence[RequestRecord],
    engine: EngineLevel | None,
    block_tokens: int,
    block_source: str,
    *,
    pool: int | None = None,
) -> PrefixCacheLevel | None:
    """The level's prefix cache; None when it measured nothing (no completed request).

    A level longer than its pool of `pool` prompts sends them again (request i is prompt
    i mod pool): from the second round on, a request repeats a whole earlier prompt."""
    measured = [r for r in records if not r.warmup and r.ok]
    if not measured:
        return None
    prompt = shareable = repeated = 0
    for record in measured:
        tokens = record.prompt_tokens or record.input_tokens_target or 0
        shared = tokens if pool and record.index >= pool else record.shared_tokens
        prompt += tokens
        repeated += min(shared, tokens)
        shareable += shareable_tokens(shared, tokens, block_tokens)
    queries = engine.prefix_cache_queries if engine is not None else None
    hits = engine.prefix_cache_hits if engine is not None else None
    return PrefixCacheLevel(
        block_tokens=block_tokens,
        block_source=block_source,
        prompt_tokens=prompt,
        shared_tokens=repeated,
        shareable_tokens=shareable,
        ideal_hit_rate=shareable / prompt if prompt else None,
        queries=queries,
        hits=hits,
        hit_rate=_measured_rate(queries, hits),
        engine=engine.engine if engine is not None and queries is not None else None,
    )


def _measured_rate(queries: float | None, hits: float | None) -> float | None:
    """hits / queries; 0 where the engine counts and was asked nothing (vLLM with its
    prefix cache off counts no query); None without its counters."""
    if queries is None or hits is None:
        return None
    return hits / queries if queries > 0 else 0.0
