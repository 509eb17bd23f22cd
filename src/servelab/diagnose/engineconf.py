"""What the engine was configured with, from its command line and its own log.

The knob maps of the engine adapters say both ways: which flag sets a knob (so an action
can name the engine's own flag) and which flag in a command means a knob was set (so a
rule can read `--max-running-requests 64` back). The log's resolved settings (SGLang's
`server_args` and scheduler limits, vLLM's non-default args and KV cache size,
transformers' `Paged cache initialized` and cuda-graph choice) come second: they hold
what the engine chose by default.

Where neither says whether decode replays CUDA graphs, a recorded command that lacks the
flag means the engine's default, with the source "engine default": on for SGLang and vLLM
(their knob maps spell only `--disable-cuda-graph` / `--enforce-eager`), off for
transformers serve 5.24 unless its attention implementation is a flash one
(`decide_use_cuda_graphs`: graphs only where no attention mask is needed, so not for its
default sdpa). Without a recorded command (an attached engine) the flags are not seen and
the setting is unknown (None), which is not "off".

transformers serve sizes its cache in sectors, not tokens. A sector is the least common
multiple of every attention group's block (one block: `--cb-block-size` tokens, 256 by
default, of every layer of the group) and 128 bytes; for a model with only full attention
that is one block, so the cache holds `num_sectors` x block size tokens. Sliding-window
layers make a sector hold more full-attention blocks: the count is then a lower bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from servelab.engines.knobs import FlagRule
from servelab.engines.signatures import EventKind, LogEvent
from servelab.engines.transformers_serve import CB_BLOCK_TOKENS

__all__ = ["EngineConfig", "Setting", "engine_config", "knob_flags"]

T = TypeVar("T")

# The engine whose knob map each adapter name uses (the embedded engine is transformers).
_KNOB_ENGINE = {
    "sglang": "sglang",
    "vllm": "vllm",
    "transformers": "transformers",
    "embedded": "transformers",
    "sim": "sim",
}
# Log fields that hold a setting, by the setting.
_RUNNING_CAP_FIELDS = ("max_running_requests", "max_num_seqs")
_TP_FIELDS = ("tp_size", "tensor_parallel_size")
_BATCH_TOKEN_FIELDS = ("max_batch_tokens", "max_num_batched_tokens", "max_prefill_tokens")
_GRAPHS_OFF_FIELDS = ("disable_cuda_graph", "enforce_eager")
_TF_BLOCK_FLAG = "--cb-block-size"
_TF_ATTENTION_FLAG = "--attn-implementation"
_PREFILL_PHASES = ("prefill", "piecewise")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """A configured value and where it was read."""

    value: T
    source: str


@dataclass(frozen=True)
class EngineConfig:
    """The engine's name, knob map, command and the settings the rules ask about."""

    name: str | None
    knobs: Mapping[str, FlagRule]
    layout: Mapping[str, FlagRule]
    command: list[str]
    running_cap: Setting[int] | None = None
    cuda_graphs: Setting[bool] | None = None
    tp: Setting[int] | None = None
    kv_capacity_tokens: Setting[int] | None = None
    max_batch_tokens: Setting[int] | None = None
    kv_memory_gib: Setting[float] | None = None
    kv_full: list[LogEvent] = field(default_factory=list)
    resolved: dict[str, Setting[Any]] = field(default_factory=dict)
    """Every setting read, by name: the command's knob flags, then the log's resolved
    values (a name the command set is not read again from the log)."""

    def flags(self, knob: str, value: Any) -> list[str] | None:
        """The engine's own flags for `knob = value`; None when the engine has no such knob."""
        rule = self.knobs.get(knob) or self.layout.get(knob)
        return None if rule is None else rule(value)


def knob_flags(engine: str | None) -> tuple[Mapping[str, FlagRule], Mapping[str, FlagRule]]:
    """The adapter's knob and layout maps (empty for an unknown engine or a plain URL)."""
    which = _KNOB_ENGINE.get(engine or "")
    if which == "sglang":
        from servelab.engines import sglang as adapter
    elif which == "vllm":
        from servelab.engines import vllm as adapter  # type: ignore[no-redef]
    elif which == "sim":
        from servelab.engines import sim as adapter  # type: ignore[no-redef]
    elif which == "transformers":
        from servelab.engines.transformers_serve import KNOB_FLAGS

        return KNOB_FLAGS, {}
    else:
        return {}, {}
    return adapter.KNOB_FLAGS, adapter.LAYOUT_FLAGS


def engine_config(
    engine: str | None, command: list[str], events: list[LogEvent] | None
) -> EngineConfig:
    """Read the settings from the command (first) and the log's resolved settings."""
    knobs, layout = knob_flags(engine)
    events = events or []
    return EngineConfig(
        name=engine,
        knobs=knobs,
        layout=layout,
        command=command,
        running_cap=_int_from_command(command, knobs.get("max_running_requests"))
        or _int_from_log(events, _RUNNING_CAP_FIELDS),
        cuda_graphs=_switch_from_command(command, knobs.get("cuda_graphs"))
        or _graphs(events)
        or _graphs_default(engine, command, knobs.get("cuda_graphs")),
        tp=_int_from_command(command, layout.get("tp")) or _int_from_log(events, _TP_FIELDS),
        kv_capacity_tokens=_kv_capacity(events, _block_tokens(engine, command))
        or _kv_from_command(engine, command),
        max_batch_tokens=_int_from_command(command, knobs.get("max_batch_tokens"))
        or _int_from_log(events, _BATCH_TOKEN_FIELDS),
        kv_memory_gib=_kv_memory(events),
        kv_full=[e for e in events if e.kind is EventKind.KV_CACHE_FULL],
        resolved=_resolved(command, knobs, layout, events),
    )


_RESOLVED_KINDS = (
    EventKind.ENGINE_CONFIG,
    EventKind.SCHEDULER_LIMITS,
    EventKind.KV_CACHE_CAPACITY,
    EventKind.KV_CACHE_MEMORY,
)
"""The log events whose fields are settings the engine resolved (its defaults filled in)."""


def _resolved(
    command: list[str],
    knobs: Mapping[str, FlagRule],
    layout: Mapping[str, FlagRule],
    events: list[LogEvent],
) -> dict[str, Setting[Any]]:
    found: dict[str, Setting[Any]] = {}
    for name, rule in {**knobs, **layout}.items():
        setting: Setting[Any] | None = _int_from_command(command, rule) or _switch_from_command(
            command, rule
        )
        if setting is None:
            text = _value_of(command, flags[0]) if len(flags := _flags_of(rule)) == 2 else None
            setting = Setting(text, f"engine command: {flags[0]} {text}") if text else None
        if setting is not None:
            found[name] = setting
    for event in events:
        if event.kind not in _RESOLVED_KINDS:
            continue
        for name, value in event.fields.items():
            if value is not None and name not in found:
                found[name] = Setting(value, f"{_line(event)}: {name}={value}")
    return found


def _flags_of(rule: FlagRule) -> list[str]:
    """The flags a value knob's rule writes (empty for a rule that refuses a probe value)."""
    try:
        return rule(0)
    except (ValueError, TypeError):
        return []


_TOKEN_FLAGS = {"sglang": "--max-total-tokens", "sim": "--kv-capacity-tokens"}
"""Engines whose cache-size flag counts tokens."""
_TF_BLOCKS_FLAG = "--cb-num-blocks"


def _kv_from_command(engine: str | None, command: list[str]) -> Setting[int] | None:
    """The cache's size the command set, in tokens, where its flag says so without the
    engine's build: tokens (SGLang, the simulator) or transformers' blocks of its block
    size. vLLM's block override is in blocks of a size the build picks: its log says."""
    which = _KNOB_ENGINE.get(engine or "")
    flag = _TOKEN_FLAGS.get(which or "")
    if flag is not None:
        text = _value_of(command, flag)
        if text is not None and text.isdigit():
            return Setting(int(text), f"engine command: {flag} {text}")
    if which == "transformers":
        text = _value_of(command, _TF_BLOCKS_FLAG)
        block = _block_tokens(engine, command)
        if text is not None and text.isdigit() and block is not None:
            return Setting(
                int(text) * block,
                f"engine command: {_TF_BLOCKS_FLAG} {text} (blocks of {block} tokens)",
            )
    return None


def _value_of(command: list[str], flag: str) -> str | None:
    for i, word in enumerate(command):
        if word == flag and i + 1 < len(command):
            return command[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _int_from_command(command: list[str], rule: FlagRule | None) -> Setting[int] | None:
    if rule is None:
        return None
    flags = rule(0)
    if len(flags) != 2:  # a switch, not `--flag VALUE`
        return None
    text = _value_of(command, flags[0])
    if text is None or not text.lstrip("-").isdigit():
        return None
    return Setting(int(text), f"engine command: {flags[0]} {text}")


def _switch_from_command(command: list[str], rule: FlagRule | None) -> Setting[bool] | None:
    if rule is None:
        return None
    for state in (False, True):
        flags = rule(state)
        if flags and all(flag in command for flag in flags):
            return Setting(state, f"engine command: {' '.join(flags)}")
    return None


def _graphs_default(
    engine: str | None, command: list[str], rule: FlagRule | None
) -> Setting[bool] | None:
    """CUDA graphs as the engine leaves them when a recorded command does not say; None
    without a command (an attached engine's flags are not seen) or a known default."""
    if rule is None or not command:
        return None
    if _KNOB_ENGINE.get(engine or "") == "transformers":
        attention = _value_of(command, _TF_ATTENTION_FLAG) or ""
        if "flash" in attention:
            return None  # graphs on where a graph backend exists: not known from here
        return Setting(
            False,
            "engine default: transformers serve captures no CUDA graphs without "
            "--cb-use-cuda-graph or a flash attention implementation (not in the command)",
        )
    on, off = rule(True), rule(False)
    if bool(on) == bool(off):
        return None  # both sides spelled: the map does not say which is the default
    state = "on" if not on else "off"
    return Setting(
        not on, f"engine default: {state} unless {' '.join(on or off)} (not in the command)"
    )


def _line(event: LogEvent) -> str:
    return f"engine.log line {event.line_no} ({event.kind.value})"


def _int_from_log(events: list[LogEvent], names: tuple[str, ...]) -> Setting[int] | None:
    for event in events:
        for name in names:
            value = event.fields.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                return Setting(value, f"{_line(event)}: {name}={value}")
    return None


def _graphs(events: list[LogEvent]) -> Setting[bool] | None:
    """Whether decode steps replay CUDA graphs (graphs off only for prefill do not count)."""
    for event in events:
        decode = event.fields.get("cuda_graph_decode")  # transformers' (varlen, decode) choice
        if isinstance(decode, bool):
            return Setting(decode, f"{_line(event)}: cuda graphs on the decode path: {decode}")
        phase = event.fields.get("phase")
        if event.kind is EventKind.CUDA_GRAPH_DISABLED and phase not in _PREFILL_PHASES:
            return Setting(False, _line(event))
        for name in _GRAPHS_OFF_FIELDS:
            if event.fields.get(name) is True:
                return Setting(False, f"{_line(event)}: {name}=True")
    for event in events:
        if event.kind is EventKind.CUDA_GRAPH_CAPTURE_END:
            return Setting(True, _line(event))
    return None


def _block_tokens(engine: str | None, command: list[str]) -> int | None:
    """transformers' tokens per block (its `page_size`): the command's, else its default."""
    if _KNOB_ENGINE.get(engine or "") != "transformers":
        return None
    text = _value_of(command, _TF_BLOCK_FLAG)
    return int(text) if text is not None and text.isdigit() and int(text) > 0 else CB_BLOCK_TOKENS


def _kv_capacity(events: list[LogEvent], block_tokens: int | None) -> Setting[int] | None:
    """The cache's size in tokens: as printed, as blocks times the configured block size, or
    (transformers) as sectors of one block each."""
    block_size = next(
        (
            value
            for event in events
            if isinstance(value := event.fields.get("block_size"), int) and value > 0
        ),
        None,
    )
    for event in events:
        if event.kind not in (EventKind.KV_CACHE_CAPACITY, EventKind.SCHEDULER_LIMITS):
            continue
        for name in ("tokens", "max_total_num_tokens"):
            value = event.fields.get(name)
            if isinstance(value, int) and value > 0:
                return Setting(value, f"{_line(event)}: {value:,} tokens")
        blocks = event.fields.get("blocks")
        if isinstance(blocks, int) and blocks > 0 and block_size is not None:
            tokens = blocks * block_size
            return Setting(tokens, f"{_line(event)}: {blocks} blocks of {block_size} tokens")
        sectors = event.fields.get("num_sectors")
        if isinstance(sectors, int) and sectors > 0 and block_tokens is not None:
            return Setting(
                sectors * block_tokens,
                f"{_line(event)}: Paged cache initialized, {sectors} sectors of "
                f"{block_tokens} tokens (one block each with full attention only)",
            )
    return None


def _kv_memory(events: list[LogEvent]) -> Setting[float] | None:
    """Memory the engine gave its KV cache (vLLM) or sized it from (transformers), GiB."""
    for event in events:
        value = event.fields.get("available_gib")
        if event.kind is EventKind.KV_CACHE_MEMORY and isinstance(value, float | int):
            return Setting(float(value), f"{_line(event)}: {value:.3g} GiB available")
    return None
