"""Section 3, the engine: which one and which version, the exact launch command, the spec."""

from __future__ import annotations

import shlex

from servelab.engines.signatures import EventKind
from servelab.report.document import Block, Code, KeyValues, Paragraph, Section
from servelab.report.inputs import ReportRun

__all__ = ["engine_section", "engine_version"]

_VERSION_OF = {"embedded": "transformers", "transformers": "transformers"}
"""Engines that run in servelab's own environment, so its versions name theirs."""


def engine_section(run: ReportRun) -> Section:
    engine = run.engine
    target = run.summary.run.target
    name = str(engine.get("engine") or target.get("engine") or "unknown")
    facts = [
        ("engine", name),
        ("version", engine_version(run) or "not recorded"),
        ("model", str(engine.get("model") or target.get("model") or "not recorded")),
        ("endpoint", str(target.get("url") or "not recorded")),
    ]
    blocks: list[Block] = [KeyValues(facts)]
    command = engine.get("command")
    if isinstance(command, list) and command:
        blocks += [
            Paragraph("The launch command, as servelab ran it:"),
            Code(shlex.join(command), "console"),
        ]
    else:
        blocks.append(
            Paragraph(
                "servelab did not launch this engine (it attached to a running endpoint), "
                "so its command is not known."
            )
        )
    spec = engine.get("spec")
    if isinstance(spec, str) and spec.strip():
        blocks += [
            Paragraph("The spec (servelab engine up SPEC, servelab run --engine SPEC):"),
            Code(spec, "yaml"),
        ]
    released = engine.get("gpu_memory_released")
    if released is not None:
        blocks.append(
            Paragraph(
                "GPU memory after the engine stopped: "
                + ("released." if released else "NOT released."),
                "good" if released else "bad",
            )
        )
    return Section("engine", "Engine", blocks)


def engine_version(run: ReportRun) -> str | None:
    """The version its log announced, else the package's where it ran beside servelab."""
    if run.events is not None:
        for event in run.events.events:
            if event.kind is EventKind.ENGINE_VERSION:
                version = event.fields.get("version")
                return str(version) if version is not None else event.text
    engine = str(run.engine.get("engine") or run.summary.run.target.get("engine"))
    package = _VERSION_OF.get(engine)
    version = run.summary.run.versions.get(package) if package else None
    return f"{package} {version}" if version else None
