"""`engine check`: the exact command and environment a spec launches, its flags validated.

Nothing is started and nothing is built: the embedded engine's model folder is named,
not generated. The flags (mapped knobs and extra_args alike) are checked against the
installed engine's `--help` when it runs, else against the recorded list of a named
version; an engine with neither is reported as not validated. Against a probe, its
NCCL variables and layout are read against the machine (`machine_check`). Given a load
(prompt and output tokens, and the largest concurrency), a cache servelab sizes is sized
for it as `servelab run` would, so the check shows the launch run makes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from servelab.engines.base import EngineSpec
from servelab.engines.embedded.cache import DEFAULT_CPU_KV_CACHE_TOKENS
from servelab.engines.flagcheck import (
    CliFlags,
    FlagProblem,
    installed_flags,
    recorded_flags,
    unknown_flags,
)
from servelab.engines.launcher import LOCALHOST, free_port
from servelab.engines.machine_check import machine_verdicts
from servelab.engines.registry import get_adapter
from servelab.probe.verdict import Severity, Verdict

__all__ = ["CacheCheck", "SpecCheck", "check_against_machine", "check_spec"]


class CacheCheck(BaseModel):
    """The KV cache a launch builds where servelab sizes it (the embedded engine on the CPU)."""

    tokens: int = Field(description="Readable cache tokens, in whole blocks.")
    blocks: int
    batch_tokens: int = Field(description="Tokens one scheduler step takes at most.")
    kv_bytes: int = Field(description="The cache tensor.")
    mask_bytes: int = Field(description="The attention masks: batch x (cache + batch) tokens.")
    input_len: int | None = None
    output_len: int | None = None
    requests_held: int | None = Field(
        default=None, description="Requests of input_len + output_len held at once."
    )
    source: str = Field(
        description="Where the size came from: the spec's kv_cache_tokens, the load it was "
        "sized for, or the default of an engine started with no load in view."
    )

    @property
    def holds_none(self) -> bool:
        return self.requests_held is not None and self.requests_held < 1


class SpecCheck(BaseModel):
    """What `check_spec` found; `ok` when every flag is one the engine accepts."""

    engine: str
    command: list[str] = Field(description="The argv that would start the engine.")
    env: dict[str, str] = Field(description="Added on top of the inherited environment.")
    host: str
    port: int
    port_from_spec: bool = Field(description="False: a free port, picked anew at launch.")
    flags_source: str | None = Field(
        default=None, description="Where the accepted flags came from; None: not validated."
    )
    notes: list[str] = Field(default_factory=list, description="Why a source was not used.")
    unknown_flags: list[FlagProblem] = Field(default_factory=list)
    machine_source: str | None = Field(
        default=None, description="The probe the settings were read against; None: not read."
    )
    machine: list[Verdict] = Field(
        default_factory=list, description="Settings the machine contradicts, worst first."
    )
    cache: CacheCheck | None = Field(
        default=None, description="The KV cache servelab sizes for this launch, if it does."
    )

    @property
    def ok(self) -> bool:
        """Every flag accepted, no setting the machine rules out (errors, not warnings), and
        a cache that holds at least one request of the lengths asked."""
        cache_empty = self.cache is not None and self.cache.holds_none
        return not self.unknown_flags and not self.machine_errors and not cache_empty

    @property
    def machine_errors(self) -> list[Verdict]:
        return [v for v in self.machine if v.severity.rank <= Severity.ERROR.rank]


def check_against_machine(
    check: SpecCheck,
    spec: EngineSpec,
    probe: Mapping[str, Any],
    *,
    source: str,
    inherit: bool,
) -> SpecCheck:
    """`check` with the machine verdicts of `spec` against `probe`; with `inherit`, the
    NCCL and CUDA_VISIBLE_DEVICES variables of this process's environment count too (the
    engine inherits them when launched from here)."""
    env = dict(check.env) if check.command else dict(spec.env)
    inherited: set[str] = set()
    if inherit:
        for name, value in os.environ.items():
            if (name.startswith("NCCL_") or name == "CUDA_VISIBLE_DEVICES") and name not in env:
                env[name] = value
                inherited.add(name)
    verdicts = machine_verdicts(spec, env, probe, source=source, inherited=frozenset(inherited))
    return check.model_copy(update={"machine_source": source, "machine": verdicts})


def check_spec(
    spec: EngineSpec,
    *,
    use_installed: bool = True,
    lengths: tuple[int, int] | None = None,
    concurrency: int | None = None,
) -> SpecCheck:
    """Build the command `spec` launches and check its flags; raises ConfigError on a bad spec.

    With `lengths` (prompt and output tokens), a cache servelab sizes is sized for
    `concurrency` such requests (None: the auto sweep's cap, as `servelab run` without
    levels) unless the spec gives one, and checked to hold one request."""
    adapter = get_adapter(spec.engine)
    host = spec.host or LOCALHOST
    if not adapter.launches:
        return SpecCheck(
            engine=adapter.name,
            command=[],
            env={},
            host=host,
            port=spec.port or 0,
            port_from_spec=spec.port is not None,
            notes=[f"{adapter.name}: attached by URL ({spec.url or 'no url given'}), not launched"],
        )
    spec, source, notes = _sized_for_load(adapter, spec, lengths, concurrency)
    preview = getattr(adapter, "preview", None)
    resolved = preview(spec) if preview is not None else adapter.prepare(spec)
    port = resolved.port or free_port()
    command = adapter.command(resolved, host=host, port=port)
    check = SpecCheck(
        engine=adapter.name,
        command=command,
        env=dict(resolved.env),
        host=host,
        port=port,
        port_from_spec=resolved.port is not None,
        notes=notes,
        cache=_cache(adapter, spec, source, lengths),
    )
    cli: CliFlags | None = getattr(adapter, "cli", None)
    program = getattr(adapter, "program", None)
    if cli is None or program is None:
        check.notes.append(f"{adapter.name} declares no flag list: flags not validated")
        return check
    head = program(resolved)
    accepted = None
    if use_installed:
        accepted, why = installed_flags([*head, *cli.help_args], env=resolved.env)
        if why is not None:
            check.notes.append(f"installed {adapter.name} not used: {why}")
    if accepted is None and cli.recorded is not None:
        accepted = recorded_flags(cli.recorded)
    if accepted is None:
        check.notes.append(f"no recorded flag list for {adapter.name}: flags not validated")
        return check
    check.flags_source = accepted.source
    check.unknown_flags = unknown_flags(command[len(head) :], accepted, cli)
    return check


def _sized_for_load(
    adapter: Any,
    spec: EngineSpec,
    lengths: tuple[int, int] | None,
    concurrency: int | None,
) -> tuple[EngineSpec, str, list[str]]:
    """`spec` with the cache `servelab run` sizes for this load where the adapter sizes one
    (the embedded engine on the CPU), where that size came from, and any note on the load."""
    size = getattr(adapter, "size_for_load", None)
    if lengths is None:
        return spec, _unsized_source(spec), []
    sizing = None
    if size is not None:
        sizing = size(spec, concurrency=concurrency, input_len=lengths[0], output_len=lengths[1])
    if sizing is not None:
        return sizing.spec, sizing.source, []
    if concurrency is None:
        return spec, _unsized_source(spec), []
    note = (
        f"--concurrency not used: servelab does not size {adapter.name}'s KV cache here (the "
        "engine does, unless the spec sets kv_cache_tokens)"
    )
    return spec, _unsized_source(spec), [note]


def _unsized_source(spec: EngineSpec) -> str:
    own = spec.knobs.kv_cache_tokens
    if own is not None:
        return f"the configured KV cache (kv_cache_tokens={own:,})"
    return (
        f"the default of an engine started with no load in view ({DEFAULT_CPU_KV_CACHE_TOKENS:,} "
        "tokens, as `servelab engine up`); --input-len, --output-len and --concurrency size "
        "it as `servelab run` does"
    )


def _cache(
    adapter: Any, spec: EngineSpec, source: str, lengths: tuple[int, int] | None
) -> CacheCheck | None:
    kv_cache = getattr(adapter, "kv_cache", None)
    built = kv_cache(spec) if kv_cache is not None else None
    if built is None:
        return None
    check = CacheCheck(
        tokens=built.tokens,
        blocks=built.blocks,
        batch_tokens=built.batch_tokens,
        kv_bytes=built.kv_bytes,
        mask_bytes=built.mask_bytes,
        source=source,
    )
    if lengths is None:
        return check
    held = built.requests_held(*lengths)
    return check.model_copy(
        update={"input_len": lengths[0], "output_len": lengths[1], "requests_held": held}
    )
