"""The profiled level's traces, summarised (servelab.trace) into the run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servelab.bench.profile import ProfileOutcome

__all__ = ["PROFILE_FILE", "TRACE_SUMMARY_FILE", "summarize_profile"]

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
