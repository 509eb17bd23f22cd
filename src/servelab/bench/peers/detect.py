"""Which tool wrote a result file, told from its content, never its name.

The file is read with Python's json, which takes the `Infinity` SGLang writes for an
unbounded request rate (orjson does not). A file that is one JSON object is one
document; otherwise each non-blank line must be one (JSON Lines: SGLang's
`--output-file`, vLLM's `--append-result`). Each document is then recognised by the
keys only its tool writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from servelab.bench.peers.common import Doc, NotImportable

__all__ = ["Format", "detect", "read_documents"]

Format = Literal["sglang", "vllm", "aiperf", "aiperf-sweep", "guidellm"]

_NAMES: dict[Format, str] = {
    "sglang": "an SGLang bench_serving result",
    "vllm": "a vLLM bench serve result",
    "aiperf": "an AIPerf profile export",
    "aiperf-sweep": "an AIPerf sweep summary",
    "guidellm": "a GuideLLM benchmarks report",
}
_MANY = frozenset({"sglang", "vllm"})
"""Formats whose files may hold one result per line."""


def read_documents(path: Path) -> list[Doc]:
    """The JSON objects of `path`: the whole file, or one per line."""
    if not path.exists():
        raise NotImportable("there is no such file")
    if path.is_dir():
        raise NotImportable("it is a folder")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise NotImportable(f"it cannot be read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise NotImportable("it is not text (UTF-8)") from None
    if not text.strip():
        raise NotImportable("it is empty")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as exc:
        return _lines(text, exc)
    except RecursionError:
        raise NotImportable("it is JSON nested too deeply") from None
    return [_object(whole, "")]


def detect(docs: list[Doc]) -> Format:
    """The format every document is in; NotImportable when one is in none or they differ."""
    first = _format(docs[0])
    if len(docs) > 1 and first not in _MANY:
        raise NotImportable(f"{docs[0].label} is {_NAMES[first]}, which is one JSON document")
    for doc in docs[1:]:
        other = _format(doc)
        if other != first:
            raise NotImportable(f"{doc.label} is {_NAMES[other]} and {docs[0].label} is not")
    return first


def _lines(text: str, whole: json.JSONDecodeError) -> list[Doc]:
    """JSON Lines, when the first non-blank line is a JSON object by itself."""
    numbered = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    docs: list[Doc] = []
    for n, line in numbered:
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            if not docs:  # not JSON Lines: say what is wrong with the document
                raise NotImportable(f"it is not JSON ({_where(whole)})") from None
            raise NotImportable(f"line {n} is not JSON ({_where(exc, line=True)})") from None
        docs.append(_object(value, f"line {n}"))
    return docs


def _where(exc: Exception, *, line: bool = False) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return (
            f"{exc.msg} at column {exc.colno}"
            if line
            else (f"{exc.msg} at line {exc.lineno} column {exc.colno}")
        )
    return "nested too deeply"


def _object(value: Any, where: str) -> Doc:
    if not isinstance(value, Mapping):
        kind = "a list" if isinstance(value, list) else f"a JSON {type(value).__name__}"
        raise NotImportable(f"{where or 'the file'} is {kind}, not a result object")
    return Doc(value, where)


def _format(doc: Doc) -> Format:
    """The tool that writes a document with these keys."""
    if doc.get("aggregation_type") == "sweep" and doc.has("per_combination_metrics"):
        return "aiperf-sweep"
    if doc.has("aiperf_version") or (
        doc.has("schema_version") and isinstance(doc.get("benchmark_duration"), Mapping)
    ):
        return "aiperf"
    if isinstance(doc.get("benchmarks"), list):
        return "guidellm"
    has = {key for key in doc.data if isinstance(key, str)}
    if {"duration", "completed"} <= has and has & {"total_token_throughput", "model_id"}:
        return "vllm"
    if {"duration", "total_input_tokens", "output_throughput"} <= has or {
        "benchmark_duration",
        "total_input",
        "output_token_throughput",
    } <= has:
        return "sglang"
    shown = ", ".join(sorted(has)[:8]) + (", ..." if len(has) > 8 else "")
    raise NotImportable(f"{doc.label} is JSON of no known tool's shape (keys: {shown or 'none'})")
