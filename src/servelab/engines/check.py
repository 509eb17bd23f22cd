"""`engine check`: the exact command and environment a spec launches, its flags validated.

Nothing is started and nothing is built: the embedded engine's model folder is named,
not generated. The flags (mapped knobs and extra_args alike) are checked against the
installed engine's `--help` when it runs, else against the recorded list of a named
version; an engine with neither is reported as not validated. Against a probe, its
NCCL variables and layout are read against the machine (`machine_check`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from servelab.engines.base import EngineSpec
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

__all__ = ["SpecCheck", "check_against_machine", "check_spec"]


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

    @property
    def ok(self) -> bool:
        """Every flag accepted and no setting the machine rules out (errors, not warnings)."""
        return not self.unknown_flags and not self.machine_errors

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


def check_spec(spec: EngineSpec, *, use_installed: bool = True) -> SpecCheck:
    """Build the command `spec` launches and check its flags; raises ConfigError on a bad spec."""
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
