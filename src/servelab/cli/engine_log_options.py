"""`--engine-log` and `--engine-log-format`, which `bench` and `run` take beside `--url`:
the log of an engine servelab did not launch, followed while the load runs
(`engines.follow`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from servelab.cli.option_groups import OptionGroup

__all__ = ["EngineLogOptions", "LogEngine"]


class LogEngine(StrEnum):
    """The engines whose logs servelab reads (`engines.logscan.SCAN_ENGINES`)."""

    SGLANG = "sglang"
    VLLM = "vllm"


@dataclass(frozen=True)
class EngineLogOptions(OptionGroup):
    """The log file of the engine at --url, and whose log it is."""

    engine_log: Annotated[
        Path | None,
        typer.Option(
            "--engine-log",
            metavar="PATH",
            help="With --url: the engine's log file, followed from its end while the load "
            "runs (a rotated or truncated file is reopened): its known messages go to "
            "engine_events.json and its stats lines (running and queued requests, KV usage) "
            "fill the engine columns /metrics lacks, as for an engine servelab launches. A "
            ".gz file cannot be followed; read it with `servelab engine scan`.",
        ),
    ] = None
    engine_log_format: Annotated[
        LogEngine | None,
        typer.Option(
            "--engine-log-format",
            help="Whose log --engine-log is. Default: the first line that only one engine's "
            "messages or stats line match, else what the endpoint says of itself (SGLang's "
            "/server_info, the /metrics names).",
        ),
    ] = None

    @property
    def engine(self) -> str | None:
        """--engine-log-format's engine name; None to guess it."""
        return self.engine_log_format.value if self.engine_log_format is not None else None
