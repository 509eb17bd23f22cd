"""The profiled level's traces, summarised (servelab.trace) into the run folder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from servelab.bench.profile import ProfileOutcome

if TYPE_CHECKING:
    from servelab.trace import TraceSummary

__all__ = ["PROFILE_FILE", "TRACE_SUMMARY_FILE", "load_trace_summaries", "summarize_profile"]

PROFILE_FILE = "profile.json"
"""bench.profile.ProfileOutcome: what the profiler did and the files it left."""
TRACE_SUMMARY_FILE = "trace_summary.json"
"""A list of trace.TraceSummary documents, one per trace file of the profile."""


def summarize_profile(run_folder: Path, outcome: ProfileOutcome) -> list[dict[str, Any]]:
    """One summary per trace file; a file that cannot be read is a summary's absence and a
    note, never a failed level."""
    from servelab.core.errors import ServelabError
    from servelab.trace import summarize_trace

    summaries: list[dict[str, Any]] = []
    for name in outcome.files:
        try:
            summary = summarize_trace(run_folder / name)
        except (ServelabError, OSError, ValueError) as exc:
            summaries.append({"file": name, "error": str(exc)})
            continue
        summaries.append(summary.model_dump(mode="json", by_alias=True))
    return summaries


def load_trace_summaries(run_folder: Path) -> list[TraceSummary]:
    """The run's readable trace summaries (none when it was not profiled); an entry that
    records a file's error is left out, a file servelab cannot read is a ConfigError."""
    import orjson
    from pydantic import ValidationError

    from servelab.core.errors import ConfigError
    from servelab.trace import TraceSummary

    path = run_folder / TRACE_SUMMARY_FILE
    if not path.is_file():
        return []
    try:
        document = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, list):
        raise ConfigError(f"{path} is not a list of trace summaries")
    try:
        return [
            TraceSummary.model_validate(entry)
            for entry in document
            if isinstance(entry, dict) and "error" not in entry
        ]
    except ValidationError as exc:
        raise ConfigError(
            f"{path} holds a summary servelab cannot read: {exc.errors()[0]['msg']}"
        ) from None
