"""The quality probe in the report: quality.json read from the run and shown as a Quality
section in report.md and report.html (reference, floor, verdicts, errors by kind,
logprobs, the probe's time, the diff), a headline line, and `report A B` side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.bench.quality.results import QualityResult, write_quality
from servelab.report import write_report
from servelab.report.document import Bullets, KeyValues, Paragraph, Table
from servelab.report.inputs import load_report_run
from servelab.report.sections import build_report
from servelab.report.sections.quality import quality_section
from tests.diagnose.builders import write_run
from tests.diagnose.quality_runs import REFERENCE_RUN, quality_result
from tests.report.builders import bench_summary, blocks, report_run


def _section(quality: QualityResult):
    section = quality_section(report_run(quality=quality))
    assert section is not None and section.key == "quality" and section.title == "Quality"
    return section


def _folder(path: Path, quality: QualityResult | None) -> Path:
    folder = write_run(path, bench_summary())
    if quality is not None:
        write_quality(folder, quality)
    return folder


def test_the_facts_say_the_reference_logprobs_errors_and_the_probe_time():
    quality = quality_result(moved={"configuration"}, reference=True, diverge=True)
    facts = dict(blocks(_section(quality), KeyValues)[0].rows)
    assert facts["reference"] == f"{REFERENCE_RUN} (its 'before' pass; --quality-ref)"
    assert facts["logprobs"] == "yes; teacher-forced by prompt_logprobs"
    assert facts["quality errors"] == "none"
    assert facts["probe's time"] == "4.5 s (before 1.5 s, loaded 1.5 s, after 1.5 s)"
    assert facts["probe set sha256"] == quality.probe_set_digest
    assert facts["probe set"] == "32 prompts, seed 39, quality_probes.jsonl"


def test_the_loaded_pass_says_which_level_how_and_for_how_long_and_notes_show():
    quality = quality_result().model_copy(
        update={
            "loaded_level": 3,
            "loaded_beside": "replay",
            "loaded_overlap_share": 0.8,
            "notes": ["the loaded pass outlasted its load by 0.4 s"],
        }
    )
    section = _section(quality)
    assert dict(blocks(section, KeyValues)[0].rows)["loaded pass"] == (
        "beside level 3 (its load sent again after the sweep, unmeasured); "
        "80% of the pass under that load"
    )
    assert Paragraph("the loaded pass outlasted its load by 0.4 s", "warn") in section.blocks


def test_each_comparison_has_its_metric_interval_floor_and_verdict():
    quality = quality_result(moved={"configuration"}, reference=True, diverge=True)
    verdicts, metrics, *diffs = blocks(_section(quality), Table)
    assert verdicts.header == [
        "comparison",
        "passes",
        "primary metric",
        "value",
        "95% interval",
        "floor",
        "verdict",
    ]
    config = quality.comparisons[2]
    assert verdicts.rows[2] == [
        "configuration",
        f"{REFERENCE_RUN}:before vs before",
        "mean |Δlogprob| (nats)",
        f"{config.primary_value:.3g}",
        f"{config.interval_low:.3g} to {config.interval_high:.3g}",
        f"{config.floor:.3g} (epsilon)",
        "drift",
    ]
    assert verdicts.tones == ["good", "good", "warn"]
    assert verdicts.bad == frozenset({(2, 6)})
    assert metrics.rows[0][:3] == ["determinism", "32", "512"]
    assert metrics.rows[2][6] == f"{config.metrics.exact_match_rate:.1%}"
    (diff,) = diffs
    assert diff.header[3:5] == [f"{REFERENCE_RUN}:before", "before"]
    entry = config.diff[0]
    assert diff.rows[0][:5] == [
        entry.probe_id,
        "3",
        '" w100 w101 w102"',
        '" w103 w104 w105 w106 w107 w108 w109 w110"',
        '" w900 w901 w902 w903 w904 w905 w906 w907"',
    ]
    reasons = blocks(_section(quality), Bullets)[0].items
    assert reasons[2] == ("warn", f"configuration: drift: {config.reason}", [])


def test_without_logprobs_the_section_says_why_and_greedy_decides():
    quality = quality_result(moved={"batch_invariance"}, logprobs=False, diverge=True)
    section = _section(quality)
    facts = dict(blocks(section, KeyValues)[0].rows)
    assert facts["logprobs"] == ("no: HTTP 400: logprobs are not supported; greedy agreement only")
    verdicts = blocks(section, Table)[0]
    assert verdicts.rows[1][2:4] == ["diverging share", "0.312"]
    assert blocks(section, Table)[1].rows[1][3] == "-"  # no mean |Δlogprob|


def test_broken_outputs_show_their_errors_by_kind():
    section = _section(quality_result(error=("loaded", "nan_logprob")))
    assert dict(blocks(section, KeyValues)[0].rows)["quality errors"] == "nan_logprob x1"
    verdicts = blocks(section, Table)[0]
    assert verdicts.rows[1][6] == "broken" and verdicts.tones == ["good", "bad"]
    assert blocks(section, Paragraph)[-1].text == (
        "No compared probe's greedy answer differed; the probes with quality errors "
        "(nan_logprob x1) were not compared (compared: determinism 32 of 32, "
        "batch_invariance 31 of 32)."
    )


def test_the_headline_and_status_carry_the_verdicts():
    quality = quality_result(moved={"batch_invariance"})
    report = build_report(report_run(quality=quality))
    line = next(item for item in report.headline if item[1].startswith("Quality:"))
    moved = quality.comparisons[1]
    assert line == (
        "warn",
        "Quality: determinism within_floor (mean |Δlogprob| 0, floor 0.000977), "
        f"batch_invariance drift (mean |Δlogprob| {moved.primary_value:.3g}, "
        f"floor {moved.floor:.3g}).",
    )
    status = next(s for s in report.sections if s.key == "status")
    done = blocks(status.subsections[0], Bullets)[0].items
    assert (
        "good",
        "quality probed: 32 prompts; determinism within_floor, batch_invariance drift",
        [],
    ) in done


def test_report_md_and_html_show_the_section_in_its_place(tmp_path: Path):
    folder = _folder(
        tmp_path / "run", quality_result(moved={"configuration"}, reference=True, diverge=True)
    )
    run = load_report_run(folder)
    assert run.quality is not None and run.notes == []
    keys = [s.key for s in build_report(run).sections]
    assert keys == ["targets", "machine", "engine", "results", "quality", "findings", "status"]
    files = write_report([folder])
    markdown, html = files.markdown.read_text(), files.html.read_text()
    part = markdown[markdown.index("## 5. Quality") : markdown.index("## 6. Findings")]
    assert "| **reference** | ref-run (its 'before' pass; --quality-ref) |" in part
    assert "| ⚠️ configuration | ref-run:before vs before | mean \\|Δlogprob\\| (nats) |" in part
    assert '" w900 w901 w902 w903 w904 w905 w906 w907"' in part
    start = html.index('<section id="quality">')
    section = html[start : html.index('<section id="findings">')]
    assert "<h2>5. Quality</h2>" in section and '<a href="#quality">' in html
    assert '<td class=" cell-bad">drift</td>' in section
    assert "&#34; w900 w901 w902 w903 w904 w905 w906 w907&#34;" in section


def test_a_run_without_quality_json_has_no_quality_section(tmp_path: Path):
    folder = _folder(tmp_path / "run", None)
    run = load_report_run(folder)
    assert run.quality is None and run.notes == []
    report = build_report(run)
    assert "quality" not in [s.key for s in report.sections]
    assert not any(text.startswith("Quality:") for _, text in report.headline)


def test_a_quality_json_that_cannot_be_read_is_left_out_with_a_note(tmp_path: Path):
    folder = _folder(tmp_path / "run", None)
    (folder / "quality.json").write_text('{"schema": "servelab.quality/1"}')
    run = load_report_run(folder)
    assert run.quality is None
    assert run.notes and run.notes[0].startswith("quality.json left out:")


@pytest.fixture
def compared(tmp_path: Path):
    """A: within the floor; B: drift under load, same probe set; C: another probe set;
    D: not probed."""
    a = _folder(tmp_path / "a", quality_result())
    b = _folder(tmp_path / "b", quality_result(moved={"batch_invariance"}))
    other = quality_result().model_copy(update={"probe_set_digest": "f" * 64, "seed": 40})
    c = _folder(tmp_path / "c", other)
    d = _folder(tmp_path / "d", None)
    return write_report([a, b, c, d], out=tmp_path / "compare")


def test_report_a_b_sets_verdicts_side_by_side_and_checks_the_probe_sets(compared):
    markdown = compared.markdown.read_text()
    part = markdown[markdown.index(". Quality") : markdown.index(". Findings")]
    assert "| comparison | A | B | C | D |" in part
    assert (
        "| batch\\_invariance | within\\_floor (mean \\|Δlogprob\\| 0, floor 0.000977) | "
        "**drift (mean \\|Δlogprob\\| 0.00286, floor 0.000977)** | within\\_floor" in part
    )
    assert part.count("not probed") == 3  # D's two cells and its line
    assert "✅ A: probed." in part
    assert "⚠️ B probed the same probe set as A: their answers compare prompt for prompt." in part
    assert "⚠️ C probed another probe set than A" in part and "seed 40" in part
    assert "D was not probed (made without --quality)." in part


def test_report_a_b_without_any_probe_has_no_quality_section(tmp_path: Path):
    files = write_report(
        [_folder(tmp_path / "a", None), _folder(tmp_path / "b", None)], out=tmp_path / "cmp"
    )
    assert "Quality" not in files.markdown.read_text()


def test_every_answer_alike_only_where_every_probe_was_compared():
    clean = _section(quality_result())
    assert blocks(clean, Paragraph)[-1].text == (
        "Every probe's greedy answer was the same in every pass."
    )
    failed = _section(quality_result(error=("after", "http")))
    text = blocks(failed, Paragraph)[-1].text
    assert text.startswith("No compared probe's greedy answer differed;")
    assert "(http x1)" in text and "determinism 31 of 32" in text


@pytest.mark.parametrize(
    ("beside", "words"),
    [("level", "and beside level 2."), ("replay", "and beside a replay of the last level's load.")],
)
def test_the_loaded_pass_is_worded_from_loaded_beside(beside: str, words: str):
    quality = quality_result().model_copy(update={"loaded_level": 2, "loaded_beside": beside})
    assert words in blocks(_section(quality), Paragraph)[0].text


def test_why_teacher_forcing_was_off_is_shown():
    quality = quality_result().model_copy(
        update={"forced_method": None, "forced_reason": "HTTP 400 to a teacher-forced request"}
    )
    facts = dict(blocks(_section(quality), KeyValues)[0].rows)
    assert facts["logprobs"] == (
        "yes; teacher-forced by none (HTTP 400 to a teacher-forced request)"
    )
