"""A tuning study's report: the Tuning section, then the best trial's run as any run's.

The study folder holds study.json (what `servelab tune` found) and one run directory per
trial; the report goes into the folder itself: report.html, report.md and plots/. Its
headline is the study's answer, the Tuning section comes first, and the six sections of
the best trial's run (the default's while no trial is best) follow, so the page shows the
winner's machine, command, sweep and findings as the report of that run would.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from servelab import __version__
from servelab.core.errors import ConfigError
from servelab.report.document import Report, Tone
from servelab.report.inputs import ReportRun, load_report_run
from servelab.report.sections import build_report
from servelab.report.sections.tuning import tuning_headline, tuning_section
from servelab.report.targets import Target
from servelab.report.write import ReportFiles, write_document
from servelab.store import SUMMARY_FILE, RunDir
from servelab.tune.results import STUDY_FILE, StudyResult, TrialRow

__all__ = ["is_study_dir", "load_study", "write_study_report"]

_TRIALS_DIR = "trials"
"""Where `servelab tune` puts the trials' run directories in a study folder."""


def write_study_report(
    study_dir: Path, *, title: str | None = None, targets: list[Target] | None = None
) -> ReportFiles:
    """Write the study's report into `study_dir`; a ConfigError where it is not a study.

    `targets` are judged on the reported trial's run, as `servelab report RUN --target`.
    """
    study = load_study(study_dir)
    notes: list[str] = []
    picked = _reported_run(study, study_dir, notes)
    if picked is None and targets:
        notes.append("the targets were not judged: no trial's run could be read")
    tuning = tuning_section(study, notes=notes)
    title = title or f"servelab tuning study: {study.name}"
    question = f"{study.engine} · {study.workload} · sampler {study.sampler}"
    if picked is None:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        report = Report(
            title=title,
            subtitle=f"{question} · no trial's run to report",
            sections=[tuning],
            generator=f"servelab {__version__}, {stamp}",
            headline=tuning_headline(study),
        )
    else:
        trial, run = picked
        base = build_report(run, targets=targets or [], title=title)
        which = f"Trial {trial.number}'s run"
        run_lines: list[tuple[Tone, str]] = [(t, f"{which} · {text}") for t, text in base.headline]
        report = dataclasses.replace(
            base,
            subtitle=f"{question} · the sections after Tuning are {which.lower()} "
            f"({trial.role}): {base.subtitle}",
            sections=[tuning, *base.sections],
            headline=[*tuning_headline(study), *run_lines],
        )
    return write_document(report, study_dir)


def is_study_dir(path: Path) -> bool:
    """A study folder: it has study.json, or trials/ and no summary.json (a study whose
    first trial has not finished)."""
    if (path / STUDY_FILE).is_file():
        return True
    return (path / _TRIALS_DIR).is_dir() and not (path / SUMMARY_FILE).exists()


def load_study(study_dir: Path) -> StudyResult:
    """study.json of `study_dir`; a ConfigError where it is absent or not valid."""
    if not study_dir.is_dir():
        raise ConfigError(f"no study folder at {study_dir}")
    study = RunDir(study_dir).load(STUDY_FILE, StudyResult)
    if study is None:
        raise ConfigError(
            f"{study_dir} has no {STUDY_FILE}",
            hint="servelab tune writes it into the study folder after every trial",
        )
    return study


def _reported_run(
    study: StudyResult, study_dir: Path, notes: list[str]
) -> tuple[TrialRow, ReportRun] | None:
    """The first best trial's run, else the default's; each one that cannot be read is
    noted and passed over."""
    numbers = [n for n in (*study.best[:1], study.default_trial) if n is not None]
    for number in dict.fromkeys(numbers):
        trial = study.trial(number)
        if trial is None or trial.run_dir is None:
            notes.append(f"trial {number} has no run directory in {STUDY_FILE}")
            continue
        path = Path(trial.run_dir)
        try:
            return trial, load_report_run(path if path.is_absolute() else study_dir / path)
        except ConfigError as exc:
            notes.append(f"trial {number}'s run is left out: {exc}")
    return None
