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

The largest CUDA-graph batch (a decode batch above it runs eager) is read from the command
first: SGLang's `--cuda-graph-max-bs-decode` (`--cuda-graph-max-bs` before it),
`--cuda-graph-bs[-decode]` sizes or `--cuda-graph-config`'s decode `max_bs` / `bs`; vLLM's
`--max-cudagraph-capture-size`, `--cudagraph-capture-sizes` or `--compilation-config`
(`-cc`). Where the command gives both a list and a maximum, the largest listed size within
the maximum counts (SGLang drops the sizes above it; vLLM refuses the two disagreeing), and
the list's flag is the one to change. Else the log: the sizes
the engine says it captures (SGLang's `Capture ... bs [...]` lines), then the latest
resolved setting it printed (SGLang's `server_args`, vLLM's `compilation_config`, then its
non-default args). Its default is not guessed.

transformers serve sizes its cache in sectors, not tokens. A sector is the least common
multiple of every attention group's block (one block: `--cb-block-size` tokens, 256 by
default, of every layer of the group) and 128 bytes; for a model with only full attention
that is one block, so the cache holds `num_sectors` x block size tokens. Sliding-window
layers make a sector hold more full-attention blocks: the count is then a lower bound.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from servelab.engines.knobs import FlagRule, flag_value
from servelab.engines.signatures import EventKind, LogEvent
from servelab.engines.transformers_serve import CB_BLOCK_TOKENS

__all__ = [
    "GRAPH_MAX_FLAGS",
    "TF_ATTENTION_FLAG",
    "EngineConfig",
    "Setting",
    "engine_config",
    "knob_engine",
    "knob_flags",
]

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
TF_ATTENTION_FLAG = "--attn-implementation"
"""transformers serve's attention implementation (`sdpa`, `eager`, a flash one)."""
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
    cuda_graph_max_batch: Setting[int] | None = None
    """The largest decode batch replayed as a CUDA graph; a larger one runs eager."""
    cuda_graph_flag: str | None = None
    """The flag that sets it: the one the command used, else this engine's own spelling
    (the log's, else its recorded flag list's); a maximum when in GRAPH_MAX_FLAGS."""
    kv_full: list[LogEvent] = field(default_factory=list)
    resolved: dict[str, Setting[Any]] = field(default_factory=dict)
    """Every setting read, by name: the command's knob flags, then the log's resolved
    values (a name the command set is not read again from the log)."""

    def flags(self, knob: str, value: Any) -> list[str] | None:
        """The engine's own flags for `knob = value`; None when the engine has no such knob."""
        rule = self.knobs.get(knob) or self.layout.get(knob)
        return None if rule is None else rule(value)


def knob_engine(engine: str | None) -> str | None:
    """The engine whose knob map and rules an adapter name uses (the embedded engine is
    transformers serve); None for an unknown engine or a plain URL."""
    return _KNOB_ENGINE.get(engine or "")


def knob_flags(engine: str | None) -> tuple[Mapping[str, FlagRule], Mapping[str, FlagRule]]:
    """The adapter's knob and layout maps (empty for an unknown engine or a plain URL)."""
    which = knob_engine(engine)
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
    engine: str | None,
    command: list[str],
    events: list[LogEvent] | None,
    reported: Mapping[str, tuple[Any, str]] | None = None,
) -> EngineConfig:
    """Read the settings from the command (first), the log's resolved settings, and what
    the engine reported about itself when asked (`reported`: name -> (value, source), from
    its /v1/models and SGLang's /server_info)."""
    knobs, layout = knob_flags(engine)
    events = events or []
    reported = reported or {}
    graph_batch = _graph_batch(engine, command, events)
    resolved = _resolved(command, knobs, layout, events)
    for name, (value, source) in reported.items():
        resolved.setdefault(name, Setting(value, source))
    if graph_batch is not None:
        resolved.setdefault("cuda_graph_max_batch", graph_batch[0])
    return EngineConfig(
        name=engine,
        knobs=knobs,
        layout=layout,
        command=command,
        running_cap=_cap_lowered(events)
        or _int_from_command(command, knobs.get("max_running_requests"))
        or _int_from_log(events, _RUNNING_CAP_FIELDS)
        or _int_reported(reported, _RUNNING_CAP_FIELDS),
        cuda_graphs=_switch_from_command(command, knobs.get("cuda_graphs"))
        or _graphs(events)
        or _graphs_default(engine, command, knobs.get("cuda_graphs")),
        tp=_int_from_command(command, layout.get("tp")) or _int_from_log(events, _TP_FIELDS),
        kv_capacity_tokens=_kv_capacity(events, _block_tokens(engine, command))
        or _kv_from_command(engine, command)
        or _int_reported(reported, _REPORTED_KV_FIELDS),
        max_batch_tokens=_int_from_command(command, knobs.get("max_batch_tokens"))
        or _int_from_log(events, _BATCH_TOKEN_FIELDS)
        or _int_reported(reported, _BATCH_TOKEN_FIELDS),
        kv_memory_gib=_kv_memory(events),
        cuda_graph_max_batch=graph_batch[0] if graph_batch else None,
        cuda_graph_flag=graph_batch[1] if graph_batch else None,
        kv_full=[e for e in events if e.kind is EventKind.KV_CACHE_FULL],
        resolved=resolved,
    )


def _cap_lowered(events: list[LogEvent]) -> Setting[int] | None:
    """The running cap in force where the engine lowered it at start-up below the one
    configured (SGLang, for a state cache or a small pool): the command line and
    /get_server_info still say the configured one, the scheduler admits no more than this."""
    for event in events:
        if event.kind is not EventKind.RUNNING_CAP_LOWERED:
            continue
        value = event.fields.get("in_force")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            configured = event.fields.get("configured")
            was = f", configured {configured}" if isinstance(configured, int) else ""
            return Setting(value, f"{_line(event)}: lowered at start-up to {value}{was}")
    return None


_REPORTED_KV_FIELDS = ("max_total_num_tokens",)
"""SGLang's /server_info: the KV pool's size in tokens the scheduler resolved."""


def _int_reported(
    reported: Mapping[str, tuple[Any, str]], names: tuple[str, ...]
) -> Setting[int] | None:
    for name in names:
        value, source = reported.get(name, (None, ""))
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return Setting(value, source)
    return None


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
            text = flag_value(command, flags[0]) if len(flags := _flags_of(rule)) == 2 else None
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
    which = knob_engine(engine)
    flag = _TOKEN_FLAGS.get(which or "")
    if flag is not None:
        text = flag_value(command, flag)
        if text is not None and text.isdigit():
            return Setting(int(text), f"engine command: {flag} {text}")
    if which == "transformers":
        text = flag_value(command, _TF_BLOCKS_FLAG)
        block = _block_tokens(engine, command)
        if text is not None and text.isdigit() and block is not None:
            return Setting(
                int(text) * block,
                f"engine command: {_TF_BLOCKS_FLAG} {text} (blocks of {block} tokens)",
            )
    return None


def _int_from_command(command: list[str], rule: FlagRule | None) -> Setting[int] | None:
    if rule is None:
        return None
    flags = rule(0)
    if len(flags) != 2:  # a switch, not `--flag VALUE`
        return None
    text = flag_value(command, flags[0])
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
    if knob_engine(engine) == "transformers":
        attention = flag_value(command, TF_ATTENTION_FLAG) or ""
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
    if knob_engine(engine) != "transformers":
        return None
    text = flag_value(command, _TF_BLOCK_FLAG)
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


@dataclass(frozen=True)
class _GraphFlags:
    """Where an engine takes its largest CUDA-graph batch: a maximum, a list of sizes, a
    JSON config (the keys under `path`), and the log fields that print the maximum."""

    maximum: tuple[str, ...]
    sizes: tuple[str, ...]
    config: tuple[str, ...]
    path: tuple[str, ...]
    config_max: str
    config_sizes: str
    logged: tuple[str, ...]


# SGLang: python/sglang/srt/arg_groups/fields/exec_.py (ExecGraph) and cuda_graph_hook.py
# (the JSON wins over the per-phase flags, which win over the legacy ones); vLLM:
# vllm/engine/arg_utils.py (its CompilationConfig group) and vllm/config/compilation.py.
_GRAPH_FLAGS = {
    "sglang": _GraphFlags(
        maximum=("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
        sizes=("--cuda-graph-bs-decode", "--cuda-graph-bs"),
        config=("--cuda-graph-config",),
        path=("decode",),
        config_max="max_bs",
        config_sizes="bs",
        logged=("cuda_graph_max_bs_decode", "cuda_graph_max_bs"),
    ),
    "vllm": _GraphFlags(
        maximum=("--max-cudagraph-capture-size",),
        sizes=("--cudagraph-capture-sizes",),
        config=("--compilation-config", "-cc"),
        path=(),
        config_max="max_cudagraph_capture_size",
        config_sizes="cudagraph_capture_sizes",
        logged=("max_cudagraph_capture_size",),
    ),
}
GRAPH_MAX_FLAGS = frozenset(flag for flags in _GRAPH_FLAGS.values() for flag in flags.maximum)
"""Flags that take the largest CUDA-graph batch itself (others take a list or a JSON)."""
_OLD_CAPTURE_LINE = "sglang.capture_cuda_graph_bs"
"""SGLang's capture line of the releases whose flag is `--cuda-graph-max-bs`."""


def _graph_batch(
    engine: str | None, command: list[str], events: list[LogEvent]
) -> tuple[Setting[int], str] | None:
    """The largest CUDA-graph batch and the flag that sets it (see the module's docstring)."""
    flags = _GRAPH_FLAGS.get(knob_engine(engine) or "")
    if flags is None:
        return None
    found = _graph_batch_from_command(flags, command) or _graph_batch_from_log(flags, events)
    return found if found is not None and found[0].value > 0 else None  # 0: no graphs


def _graph_batch_from_command(
    flags: _GraphFlags, command: list[str]
) -> tuple[Setting[int], str] | None:
    for flag in flags.config:
        found = _from_config(flags, command, flag)
        if found is not None:
            return found
    words: list[str] = []
    found_flag, maximum, sizes = None, None, []
    for flag in flags.maximum:
        text = flag_value(command, flag)
        if text is not None and text.isdigit():
            found_flag, maximum = flag, int(text)
            words.append(f"{flag} {text}")
            break
    for flag in flags.sizes:
        sizes = _values_of(command, flag)
        if sizes:
            found_flag = flag
            words.append(f"{flag} {' '.join(map(str, sizes))}")
            break
    value = _largest(maximum, sizes)
    if value is None or found_flag is None:
        return None
    return Setting(value, f"engine command: {', '.join(words)}"), found_flag


def _largest(maximum: int | None, sizes: list[int]) -> int | None:
    """The largest batch captured: the largest listed size within the maximum (all of
    them without one), else the maximum."""
    within = [size for size in sizes if maximum is None or size <= maximum]
    return max(within) if within else maximum


def _from_config(
    flags: _GraphFlags, command: list[str], flag: str
) -> tuple[Setting[int], str] | None:
    """The largest batch in a JSON config flag (or its dotted `flag.key=N` form)."""
    dotted = ".".join((*flags.path, flags.config_max))
    text = flag_value(command, f"{flag}.{dotted}")
    if text is not None and text.isdigit():
        return Setting(int(text), f"engine command: {flag}.{dotted} {text}"), flag
    text = flag_value(command, flag)
    if text is None:
        return None
    try:
        config = json.loads(text)
    except json.JSONDecodeError:
        return None
    for key in flags.path:
        config = config.get(key) if isinstance(config, dict) else None
    if not isinstance(config, dict):
        return None
    largest = config.get(flags.config_max)
    sizes = config.get(flags.config_sizes)
    value = _largest(
        largest if isinstance(largest, int) else None,
        [size for size in sizes if isinstance(size, int)] if isinstance(sizes, list) else [],
    )
    if value is None:
        return None
    return Setting(value, f"engine command: {flag} {text}"), flag


def _values_of(command: list[str], flag: str) -> list[int]:
    """The integers after `flag` (argparse's nargs="+"), up to the next option."""
    for i, word in enumerate(command):
        if word == flag:
            values = []
            for value in command[i + 1 :]:
                if not value.isdigit():
                    break
                values.append(int(value))
            return values
        if word.startswith(flag + "="):
            parts = word.split("=", 1)[1].split(",")
            return [int(part) for part in parts if part.strip().isdigit()]
    return []


def _graph_batch_from_log(
    flags: _GraphFlags, events: list[LogEvent]
) -> tuple[Setting[int], str] | None:
    """The sizes the engine says it captures, then its latest resolved setting."""
    for event in events:
        value = event.fields.get("max_bs")
        phase = event.fields.get("phase")
        if (
            event.kind is EventKind.CUDA_GRAPH_CAPTURE_BEGIN
            and isinstance(value, int)
            and value > 0
            and (phase is None or str(phase).startswith("target"))
        ):
            flag = flags.maximum[-1] if event.signature == _OLD_CAPTURE_LINE else flags.maximum[0]
            return Setting(value, f"{_line(event)}: largest batch captured {value}"), flag
    for event in reversed(events):
        if event.kind is not EventKind.ENGINE_CONFIG:
            continue
        for name in flags.logged:
            value = event.fields.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                flag = "--" + name.replace("_", "-")
                return Setting(value, f"{_line(event)}: {name}={value}"), flag
    return None
