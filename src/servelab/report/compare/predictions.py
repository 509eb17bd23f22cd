"""The prediction checks of a comparison: a run made to try a finding's action (summary.json
`run.applies`) judged against the run the finding was found in.

The run the finding names is found where it was recorded, else beside the run that applied
it (runs of one folder sit side by side), so a report made from another directory reads
the same check diagnose does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servelab.diagnose.check import PredictionCheck, check_applied
from servelab.report.document import Table, Tone
from servelab.report.inputs import ReportRun
from servelab.store import SUMMARY_FILE

__all__ = ["Checked", "prediction_checks", "prediction_table"]

_TONE: dict[str, Tone] = {
    "inside": "good",
    "within noise": "warn",
    "outside": "bad",
    "no interval": "warn",
    "not measured": "warn",
}


@dataclass(frozen=True)
class Checked:
    """One run's check, with the report's label of the run that applied the action and of
    the run it was found in (its path where that run is not in the report)."""

    label: str
    found_in: str
    check: PredictionCheck

    @property
    def tone(self) -> Tone:
        return _TONE[self.check.verdict]

    @property
    def text(self) -> str:
        said = self.check.text.removeprefix(f"{self.check.applies}: ")
        return f"{self.label} applies {self.found_in}'s {self.kind}: {said}"

    @property
    def kind(self) -> str:
        return self.check.applies.rpartition(":")[2]


def prediction_checks(runs: Sequence[ReportRun], labels: Sequence[str]) -> list[Checked]:
    """Every run of the report that applies a finding, checked now."""
    by_path = {run.path.resolve(): label for run, label in zip(runs, labels, strict=True)}
    checked = []
    for run, label in zip(runs, labels, strict=True):
        applies = run.summary.run.applies
        if applies is None:
            continue
        applies = _located(applies, run.path)
        found = Path(applies.rpartition(":")[0])
        check = check_applied(applies, run.path)
        checked.append(Checked(label, by_path.get(found.resolve(), str(found)), check))
    return checked


def prediction_table(checked: Sequence[Checked]) -> Table:
    rows = [
        [
            c.label,
            f"{c.found_in}: {c.kind}",
            c.check.metric + (f" at {c.check.at}" if c.check.at else ""),
            _predicted(c.check),
            _measured(c.check),
            c.check.verdict,
        ]
        for c in checked
    ]
    return Table(
        ["run", "applies", "metric", "predicted", "measured", "verdict"],
        rows,
        caption="Predictions checked: each finding's expected gain against what the run "
        "that applied its action measured (docs/DIAGNOSE.md)",
        tones=[c.tone for c in checked],
        right=frozenset({3, 4}),
    )


def _located(applies: str, run_b: Path) -> str:
    """`RUN:KIND` with RUN as recorded, else the run of that name beside run B."""
    run, _, kind = applies.rpartition(":")
    path = Path(run)
    if (path / SUMMARY_FILE).is_file() or path.is_absolute():
        return applies
    beside = run_b.parent / path.name
    return f"{beside}:{kind}" if (beside / SUMMARY_FILE).is_file() else applies


def _predicted(check: PredictionCheck) -> str:
    if check.predicted is None:
        return "-"
    interval = f" ({check.low:g}-{check.high:g})" if check.low is not None else ""
    return f"{check.predicted:g}x{interval}"


def _measured(check: PredictionCheck) -> str:
    if check.measured is None:
        return "-"
    if check.band_lo is not None and check.band_hi is not None:
        return f"{check.measured:.3g}x (band {check.band_lo:.3g}-{check.band_hi:.3g})"
    return f"{check.measured:.3g}x" + (f" ({check.band_note})" if check.band_note else "")
