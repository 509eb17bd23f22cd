"""An engine spec from a YAML file, from options, or from both, as `servelab engine check`
and `servelab engine up` read it: one option group.

Options win over the file's fields; --env and --knob merge into the file's, --extra-args
append.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from servelab.cli.option_groups import OptionGroup
from servelab.core.errors import ConfigError
from servelab.engines.base import KNOB_NAMES, EngineSpec

__all__ = ["SpecOptions"]

SpecPath = Annotated[
    Path | None, typer.Argument(help="YAML spec: engine, model, tp, knobs, env, extra_args...")
]
EngineName = Annotated[
    str | None,
    typer.Option(
        "--engine", help="sglang, vllm, transformers, embedded, sim (replaces the spec's)."
    ),
]
Model = Annotated[
    str | None,
    typer.Option(help="Model path or hub id (embedded: a preset; vllm also embedded:PRESET)."),
]
ServedName = Annotated[str | None, typer.Option(help="Name the model is served under.")]
Host = Annotated[str | None, typer.Option(help="Address to listen on. Default: 127.0.0.1.")]
Port = Annotated[int | None, typer.Option(help="Port to listen on. Default: a free one.")]
Tp = Annotated[int | None, typer.Option("--tp", help="Tensor parallel size.")]
Pp = Annotated[int | None, typer.Option("--pp", help="Pipeline parallel size.")]
Ep = Annotated[int | None, typer.Option("--ep", help="Expert parallel size.")]
Dp = Annotated[int | None, typer.Option("--dp", help="Data parallel size.")]
Device = Annotated[
    str | None, typer.Option(help="Device, for transformers and embedded (vLLM has no such flag).")
]
Knob = Annotated[
    list[str] | None,
    typer.Option(
        help=f"KEY=VALUE, repeatable; keys: {', '.join(KNOB_NAMES)}. Mapped to the engine's "
        "own flag; a knob it lacks is an error."
    ),
]
Env = Annotated[
    list[str] | None, typer.Option(help="KEY=VALUE added to the engine's environment; repeatable.")
]
ExtraArgs = Annotated[
    str | None, typer.Option(help="Native flags passed through, as one shell-quoted string.")
]


@dataclass(frozen=True)
class SpecOptions(OptionGroup):
    """The spec file (the command's argument) and the options that change it."""

    spec_path: SpecPath = None
    engine: EngineName = None
    model: Model = None
    served_name: ServedName = None
    host: Host = None
    port: Port = None
    tp: Tp = None
    pp: Pp = None
    ep: Ep = None
    dp: Dp = None
    device: Device = None
    knob: Knob = None
    env: Env = None
    extra_args: ExtraArgs = None

    def spec(self, **fields: object) -> EngineSpec:
        """The spec file (if any) with the options, and then `fields`, on top."""
        from servelab.engines.spec import load_spec, parse_assignments, spec_with

        given = {
            "engine": self.engine,
            "model": self.model,
            "served_name": self.served_name,
            "host": self.host,
            "port": self.port,
            "device": self.device,
            "tp": self.tp,
            "pp": self.pp,
            "ep": self.ep,
            "dp": self.dp,
        }
        path = self.spec_path
        base = load_spec(path) if path is not None else None
        try:
            extra = shlex.split(self.extra_args or "")
        except ValueError as exc:
            raise ConfigError(f"--extra-args is not shell-quoted text: {exc}") from None
        return spec_with(
            base,
            fields=given | fields,
            knobs=parse_assignments(self.knob or [], option="--knob", typed=True),
            env=parse_assignments(self.env or [], option="--env", typed=False),
            extra_args=extra,
            source=str(path) if path is not None else "command line",
        )
