"""`servelab probe`: the machine's facts and verdicts."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from servelab.cli.exit_codes import handle_errors
from servelab.core.errors import ConfigError
from servelab.probe.collect import run_probe
from servelab.probe.report import ProbeReport
from servelab.report import render_probe
from servelab.store import RunDir

__all__ = ["probe", "write_probe_files"]

_TEXT_WIDTH = 140


def probe(
    comm: Annotated[
        bool,
        typer.Option(
            "--comm",
            help="Also measure (needs torch and a GPU): memory copy bandwidth, matmul rate, "
            "host↔device and GPU↔GPU copies by size, an NCCL all-reduce sweep. 1-2 minutes.",
        ),
    ] = False,
    quick: Annotated[
        bool, typer.Option("--quick", help="With --comm: fewer repeats and sizes.")
    ] = False,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write probe.json and probe.txt into this folder.")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as one JSON document on stdout.")
    ] = False,
    record_nvml: Annotated[
        Path | None,
        typer.Option(
            "--record-nvml",
            help="Also write NVML's raw readings to this file (for bug reports and tests).",
        ),
    ] = None,
) -> None:
    """Facts about this machine, each finding with a verdict you can act on.

    Host CPU, memory and NUMA; virtualization and containers; every NVIDIA GPU through
    NVML (power, clocks, PCIe link, ECC, NUMA node, IOMMU group); every GPU pair's
    topology and P2P status. Reads only, in about a second. A machine with no NVIDIA GPU
    is fine: it gets the host facts and says so. Exit code 0 whatever the verdicts.
    """
    # Piped or redirected, Rich would wrap at 80 columns: the GPU table needs more.
    out_console = Console() if sys.stdout.isatty() else Console(width=_TEXT_WIDTH)
    err = Console(stderr=True)
    with handle_errors(err):
        if out is not None:
            _check_folder(out)
        if record_nvml is not None:
            _record_nvml(record_nvml)
        with err.status("probing", spinner="dots") as status:
            report = run_probe(
                comm=comm,
                quick=quick,
                log_dir=out / "nccl-logs" if out is not None else None,
                progress=lambda message: status.update(escape(message)),
            )
        if out is not None:
            paths = write_probe_files(report, out)
            err.print(f"wrote {escape(', '.join(str(p) for p in paths))}", highlight=False)
        if json_output:
            out_console.print_json(report.model_dump_json(by_alias=True))
        else:
            out_console.print(render_probe(report))


def write_probe_files(report: ProbeReport, folder: Path) -> list[Path]:
    """probe.json (the document) and probe.txt (the rendered report) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path = RunDir(folder).write_probe(report)
    text = io.StringIO()
    Console(file=text, width=_TEXT_WIDTH, color_system=None).print(render_probe(report))
    text_path = folder / "probe.txt"
    text_path.write_text(text.getvalue())
    return [json_path, text_path]


def _check_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {folder} exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create --out {folder}: {exc.strerror}") from None


def _record_nvml(path: Path) -> None:
    from servelab.probe.nvml import open_nvml_with_reason, record

    source, reason = open_nvml_with_reason()
    if source is None:
        raise ConfigError(f"--record-nvml: NVML is not available ({reason})")
    try:
        document = record(source)
    finally:
        source.close()
    try:
        path.write_text(json.dumps(document, indent=2) + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write --record-nvml {path}: {exc.strerror}") from None
