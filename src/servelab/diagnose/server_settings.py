"""The settings an engine reported about itself, as (value, source) pairs for diagnose.

`servelab bench` records them at its preflight (`RunInfo.server_info`); this turns them into
the same shape as the settings read from the engine's command and log, so diagnose can
cite "GET /server_info: max_running_requests=128" as evidence. Names are the engine's own
(`max_model_len`; SGLang's `ServerArgs` fields and scheduler limits), as in its log.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from servelab.engines.server_info import ServerInfo

__all__ = ["settings_from_server_info"]

_CONTEXT_LENGTH = "max_model_len"


def settings_from_server_info(
    info: ServerInfo, *, model: str | None = None
) -> dict[str, tuple[Any, str]]:
    """Name -> (value, source) for every setting `info` holds that has a value.

    `max_model_len` is `model`'s card's where it has one, else the first card's that does
    (vLLM lists the base model first; a LoRA adapter's card has none). SGLang's server args
    follow with their values as the endpoint gave them (secrets already masked); a null
    arg (an engine default SGLang leaves unset) is not a setting.
    """
    settings: dict[str, tuple[Any, str]] = {}
    lengths = info.max_model_len
    first = [model] if model is not None and model in lengths else []
    chosen = next((m for m in [*first, *lengths] if lengths[m] is not None), None)
    if chosen is not None:
        value = lengths[chosen]
        source = f"GET {_path(info.models.url)}: {_CONTEXT_LENGTH}={value}"
        if len(lengths) > 1:
            source += f" (model {chosen})"
        settings[_CONTEXT_LENGTH] = (value, source)
    url = info.server_args_url
    if url is not None:
        for name, value in info.server_args.items():
            if value is not None and name not in settings:
                settings[name] = (value, f"GET {_path(url)}: {name}={value}")
    return settings


def _path(url: str) -> str:
    """The endpoint's path: the host is the run's target, recorded once beside it."""
    return urlsplit(url).path or url
