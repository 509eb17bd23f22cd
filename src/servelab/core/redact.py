"""Secrets never reach a file: API keys, auth headers and secret-looking env values.

Two nets, because either alone misses some: by name (an option, header or variable
whose name says it holds a secret has its value masked wherever it is recorded), and
by value (every secret servelab was handed is registered, and every file a run writes
is scrubbed of it, so an engine that echoes its `--api-key` into its log, or a server
that quotes the bad token in a 401, leaks nothing either).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "MASK",
    "MIN_SECRET_LEN",
    "document_secrets",
    "is_secret_name",
    "redact_argv",
    "redact_document",
    "redact_env",
    "redact_headers",
    "redact_url",
    "register_secret",
    "registered_secrets",
    "scrub",
    "scrub_bytes",
    "scrub_json",
    "scrub_values",
]

MASK = "***"

_SECRET_WORDS = frozenset(
    {
        "secret",
        "password",
        "passwd",
        "pwd",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
    }
)
"""Words that make a name secret wherever they stand in it."""
_SECRET_LAST_WORDS = frozenset({"key", "apikey", "token"})
"""Words that make a name secret where the name ends with them: `HF_TOKEN` and `--api-key`
hold one, `--step-per-token-ms` and `--key-dtype` hold a number or a type. A name that
masked `--step-per-token-ms 0.0021` registered 0.0021 as a secret, and every later file
holding those digits was garbled."""
_SECRET_PARTS = ("APIKEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_WORDS = re.compile(r"[A-Za-z0-9]+")
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]+:)[^/@\s]+@")
MIN_SECRET_LEN = 4
"""Shorter values are not scrubbed by value: masking every 'abc' would garble files."""

_lock = threading.Lock()
_secrets: set[str] = set()


def is_secret_name(name: str) -> bool:
    """Whether an option, header or variable name says it holds a secret.

    By words, so `HF_TOKEN`, `--api-key` and `X-Api-Key` are secret while
    `--max-num-batched-tokens` and `--step-per-token-ms` are not.
    """
    words = [word.lower() for word in _WORDS.findall(name)]
    upper = name.upper()
    return (
        bool(set(words) & _SECRET_WORDS)
        or (bool(words) and words[-1] in _SECRET_LAST_WORDS)
        or any(part in upper for part in _SECRET_PARTS)
    )


def register_secret(value: str | None) -> None:
    """Remember a secret value so that `scrub` removes it from everything written."""
    if value and len(value) >= MIN_SECRET_LEN:
        with _lock:
            _secrets.add(value)


def registered_secrets() -> frozenset[str]:
    with _lock:
        return frozenset(_secrets)


def scrub(text: str) -> str:
    """`text` with every registered secret and every URL password replaced by MASK."""
    for secret in sorted(registered_secrets(), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return redact_url(text)


def scrub_bytes(data: bytes) -> bytes:
    """`scrub` for encoded text; `data` itself when nothing is registered and no URL has a
    password (the common case, on every batch of records)."""
    if not registered_secrets() and b"@" not in data:
        return data
    return scrub(data.decode(errors="surrogateescape")).encode(errors="surrogateescape")


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def scrub_json(data: bytes) -> bytes:
    """`scrub_bytes` of JSON text's string literals only: a registered secret that reads
    like part of a number (a key of digits, "0.00") never turns a number into invalid
    JSON. A secret inside a string is masked as everywhere else."""
    if not registered_secrets() and b"@" not in data:
        return data
    return _JSON_STRING.sub(lambda match: scrub_bytes(match.group(0)), data)


def redact_url(url: str) -> str:
    """A URL (or any text holding URLs) with its passwords masked."""
    return _URL_PASSWORD.sub(rf"\g<head>{MASK}@", url)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Secret-looking variables masked; the names stay, so the record says they were set."""
    return {name: MASK if is_secret_name(name) else value for name, value in env.items()}


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Header values masked where the header name is secret (Authorization, X-Api-Key, …)."""
    return {name: MASK if is_secret_name(name) else value for name, value in headers.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the values of secret options, headers and variables masked.

    Handles `--api-key VALUE`, `--api-key=VALUE`, `--header 'Authorization: Bearer X'`,
    leading `NAME=VALUE` environment assignments, and URLs with passwords.
    """
    out: list[str] = []
    mask_next = False
    header_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if header_next:
            out.append(_redact_header_arg(arg))
            header_next = False
            continue
        out.append(_redact_one(arg))
        if arg.startswith("-") and "=" not in arg:
            name = arg.lstrip("-")
            if name in ("H", "header"):
                header_next = True
            elif is_secret_name(name):
                mask_next = True
    return out


def _redact_one(arg: str) -> str:
    if arg.startswith("-") and "=" in arg:
        name, value = arg.split("=", 1)
        if name.lstrip("-") in ("H", "header"):
            return f"{name}={_redact_header_arg(value)}"
        if is_secret_name(name.lstrip("-")):
            return f"{name}={MASK}"
        return f"{name}={scrub(value)}"
    if not arg.startswith("-") and "=" in arg:
        name, _ = arg.split("=", 1)
        if name.isidentifier() and is_secret_name(name):
            return f"{name}={MASK}"
    return scrub(arg)


def _redact_header_arg(arg: str) -> str:
    name, sep, _ = arg.partition(":")
    return f"{name}{sep} {MASK}" if sep and is_secret_name(name) else scrub(arg)


def redact_document(document: Any) -> Any:
    """A parsed YAML or JSON document (an engine spec, a tuning space) with its secrets
    masked: the value of every key whose name is secret (`env: {HF_TOKEN: ...}`,
    `options: {api_key: ...}`), secret options in lists of arguments (`extra_args:
    [--api-key, X]`, `--hf-token=X`), and URL passwords. The keys stay, so the record says
    they were set."""
    return _walk(document, set())


def document_secrets(document: Any) -> frozenset[str]:
    """The values `redact_document` masks, so that the document's own text can be scrubbed
    of them (`scrub_values`) with its comments and layout kept."""
    found: set[str] = set()
    _walk(document, found)
    return frozenset(found)


def scrub_values(text: str, values: frozenset[str] | set[str]) -> str:
    """`text` with each of `values` (longest first) and every registered secret masked."""
    for value in sorted(values, key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    return scrub(text)


def _walk(value: Any, found: set[str]) -> Any:
    """`value` redacted; the masked values are added to `found`."""
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and is_secret_name(key) and item is not None:
                found.update(_texts(item))
                out[key] = MASK
            else:
                out[key] = _walk(item, found)
        return out
    if isinstance(value, list | tuple):
        if value and all(isinstance(item, str) for item in value):
            masked = redact_argv(value)
            for arg, shown in zip(value, masked, strict=True):
                if arg != shown and MASK in shown:
                    found.add(arg.split("=", 1)[1] if shown.endswith(f"={MASK}") else arg)
            return masked
        return [_walk(item, found) for item in value]
    if isinstance(value, str):
        return scrub(value)
    return value


def _texts(value: Any) -> list[str]:
    """The scalar values under a secret key, as the text a file would hold them in."""
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in _texts(item)]
    if isinstance(value, list | tuple):
        return [text for item in value for text in _texts(item)]
    if isinstance(value, bool) or value is None:
        return []
    return [str(value)]
