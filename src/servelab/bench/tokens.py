"""Counting prompt tokens: a local tokenizer, the server's /tokenize, or a calibration.

Exact input lengths need a token counter. A local tokenizer (`--tokenizer`) is exact
and fast; the server's own `/tokenize` (SGLang, vLLM) is exact but costs a request per
prompt; failing both, two probe requests calibrate tokens per word from the server's
`usage.prompt_tokens`, which makes lengths close but not exact.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import aiohttp

from servelab.core.errors import ConfigError, EndpointUnreachable

__all__ = [
    "Calibration",
    "LocalTokenizer",
    "ServerTokenizer",
    "TokenCounter",
    "check_tokenizer",
    "count_texts",
    "load_local_tokenizer",
]


class TokenCounter(Protocol):
    """Counts the tokens of prompts exactly."""

    method: str

    def count_batch(self, texts: list[str]) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class Calibration:
    """prompt_tokens ~= overhead_tokens + tokens_per_word * words, fitted on the server."""

    overhead_tokens: float
    tokens_per_word: float

    method = "calibrated"


class LocalTokenizer:
    """A Hugging Face `tokenizer.json`, loaded with the `tokenizers` library."""

    method = "tokenizer"

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.path = path
        self._tokenizer = Tokenizer.from_file(str(path))

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_batch(self, texts: list[str]) -> list[int]:
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return [len(e.ids) for e in encodings]

    def vocabulary(self) -> dict[str, int]:
        return self._tokenizer.get_vocab()

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids)


def check_tokenizer(path: str | Path) -> None:
    """A ConfigError unless `path` holds a tokenizer that loads (checked before a run starts)."""
    load_local_tokenizer(path)


def load_local_tokenizer(path: str | Path) -> LocalTokenizer:
    """A tokenizer from a tokenizer.json file or a model folder holding one."""
    candidate = Path(path).expanduser()
    if candidate.is_dir():
        candidate = candidate / "tokenizer.json"
    if not candidate.is_file():
        raise ConfigError(
            f"no tokenizer at {path}", hint="give a tokenizer.json or a folder that holds one"
        )
    try:
        return LocalTokenizer(candidate)
    except Exception as exc:  # the tokenizers library raises a bare Exception on bad files
        raise ConfigError(f"cannot read tokenizer {candidate}: {exc}") from None


class ServerTokenizer:
    """The endpoint's POST /tokenize, as SGLang and vLLM serve it."""

    method = "server"

    def __init__(
        self, base_url: str, *, model: str, headers: dict[str, str], parallel: int = 32
    ) -> None:
        self.url = base_url.rstrip("/") + "/tokenize"
        self.model = model
        self.headers = headers
        self.parallel = parallel

    def count_batch(self, texts: list[str]) -> list[int]:
        return asyncio.run(self._count_all(texts))

    async def _count_all(self, texts: list[str]) -> list[int]:
        limit = asyncio.Semaphore(self.parallel)
        async with aiohttp.ClientSession(headers=self.headers) as session:

            async def one(text: str) -> int:
                async with limit:
                    return await self.count_one(session, text)

            return list(await asyncio.gather(*(one(t) for t in texts)))

    async def count_one(self, session: aiohttp.ClientSession, text: str) -> int:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        try:
            async with session.post(self.url, json=body) as response:
                response.raise_for_status()
                data = await response.json(content_type=None)
        except aiohttp.ClientError as exc:
            raise EndpointUnreachable(f"/tokenize failed: {exc}", url=self.url) from None
        if "count" in data:
            return int(data["count"])
        return len(data["tokens"])


def count_texts(
    texts: list[str], counter: TokenCounter | None, calibration: Calibration | None
) -> list[int | None]:
    """Tokens of each text: counted exactly, else estimated from the calibration, else None."""
    if counter is not None:
        return list(counter.count_batch(texts))
    if calibration is not None:
        return [round(len(t.split()) * calibration.tokens_per_word) for t in texts]
    return [None] * len(texts)
