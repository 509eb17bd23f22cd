"""A tuning study's report: the Tuning section (question, answer, trials, plot, layouts),
written with the best trial's run into the study folder, through the library and the CLI."""

from __future__ import annotations

import html
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.core.errors import ConfigError
from servelab.report import parse_target, write_study_report
from servelab.report.plots import Line, render_png, render_svg, tuning_plot
from servelab.report.sections.tuning import layout_answer, tuning_headline, tuning_section
from servelab.tune.results import (
    STUDY_FILE,
    LayoutModel,
    ObjectiveSpec,
    StudyResult,
    TrialRow,
)
from tests.diagnose.builders import level, write_run
from tests.report.browser import is_blank, measure_page, render_page, require_chromium
from tests.report.builders import bench_summary, records

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
THROUGHPUT = ObjectiveSpec(metric="total_throughput", at=64, direction="maximize", unit="tok/s")
TTFT = ObjectiveSpec(metric="p99_ttft_ms", at=64, direction="minimize", unit="ms")
BEST_SPEC = "engine: sglang\nmodel: /models/glm-5\noptions:\n  max_running_requests: 256\n"
BEST_COMMAND = [
    "python",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/models/glm-5",
    "--max-running-requests",
    "256",
]
OOM = "sglang.cuda_oom"


def trial_run(folder: Path, total_tps: float, command: list[str]) -> Path:
    """A trial's run directory: a sweep of 1, 16 and 64 whose best is `total_tps`."""
    levels = [
        level(0, 1, total_tps=total_tps / 10, tpot_ms=10, ttft_ms=20),
        level(1, 16, total_tps=total_tps * 0.8, tpot_ms=20, ttft_ms=200),
        level(2, 64, total_tps=total_tps, tpot_ms=40, ttft_ms=900),
    ]
    engine = {"engine": "sglang", "model": "/models/glm-5", "command": command}
    run = write_run(folder, bench_summary(levels, engine=engine))
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records(levels)))
    return run


def one_objective_study(study_dir: Path) -> StudyResult:
    """Default 1,000 tok/s; trial 1 best at 1,300; trial 2 pruned; trial 3 failed to start
    with a signature; trial 4 faster but infeasible."""
    default_command = [*BEST_COMMAND[:-1], "64"]
    trial_run(study_dir / "trials" / "000", 1000, default_command)
    best_run = trial_run(study_dir / "trials" / "001", 1300, BEST_COMMAND)
    trials = [
        TrialRow(
            number=0,
            state="complete",
            role="default",
            params={"options.max_running_requests": 64, "options.enable_torch_compile": False},
            values=[1000.0],
            metrics={"total_throughput": 1000.0, "p99_ttft_ms": 900.0},
            constraints=[-1100.0],
            feasible=True,
            run_dir="trials/000",
        ),
        TrialRow(
            number=1,
            state="complete",
            role="diagnose",
            params={"options.max_running_requests": 256, "options.enable_torch_compile": False},
            values=[1300.0],
            metrics={"total_throughput": 1300.0, "p99_ttft_ms": 1500.0},
            constraints=[-500.0],
            feasible=True,
            run_dir=str(best_run),  # absolute: both forms are accepted
            spec_yaml=BEST_SPEC,
            command=BEST_COMMAND,
        ),
        TrialRow(
            number=2,
            state="pruned",
            role="search",
            params={"options.max_running_requests": 1024, "options.enable_torch_compile": True},
            reason="the model: the KV cache holds 410 requests, not 1024",
        ),
        TrialRow(
            number=3,
            state="failed",
            role="search",
            params={"options.max_running_requests": 512, "options.enable_torch_compile": True},
            reason="the engine died while starting",
            signature=OOM,
            run_dir="trials/003",
        ),
        TrialRow(
            number=4,
            state="complete",
            role="search",
            params={"options.max_running_requests": 512, "options.enable_torch_compile": False},
            values=[1400.0],
            metrics={"total_throughput": 1400.0, "p99_ttft_ms": 2600.0},
            constraints=[600.0],
            feasible=False,
            run_dir="trials/004",
        ),
    ]
    return StudyResult(
        name="glm5-throughput",
        storage="sqlite:///study.db",
        space_file="space.yaml",
        engine="sglang",
        workload="random 1024 in / 256 out at concurrency 64",
        objectives=[THROUGHPUT],
        constraints=["p99_ttft_ms <= 2000"],
        sampler="tpe",
        trials=trials,
        best=[1],
        default_trial=0,
        best_spec_yaml=BEST_SPEC,
        best_command=BEST_COMMAND,
    )


def two_objective_study() -> StudyResult:
    """Throughput against TTFT p99: trials 1 and 3 form the Pareto set."""
    points = {0: (1000.0, 900.0), 1: (1300.0, 1200.0), 2: (1100.0, 1300.0), 3: (900.0, 400.0)}
    trials = [
        TrialRow(
            number=n,
            state="complete",
            role="default" if n == 0 else "search",
            params={"options.max_running_requests": 64 * (n + 1)},
            values=list(values),
            feasible=True,
        )
        for n, values in points.items()
    ]
    trials.append(
        TrialRow(number=4, state="failed", role="search", params={}, reason="it timed out")
    )
    return StudyResult(
        name="glm5-tradeoff",
        storage="sqlite:///study.db",
        engine="sglang",
        workload="random 1024 in / 256 out at concurrency 64",
        objectives=[THROUGHPUT, TTFT],
        sampler="nsga2",
        trials=trials,
        best=[1, 3],
        default_trial=0,
    )


def layout_model(tp: int, pp: int, tokens_per_s: float) -> LayoutModel:
    """The model's account: tp=8 pays twice tp=4's all-reduces, pp=2 a bubble and sends."""
    return LayoutModel(
        tp=tp,
        pp=pp,
        batch=64,
        step_ms=64 * 1000 / tokens_per_s,
        allreduces=2 * 78 if tp == 8 else 78,
        allreduce_bytes=1.5 * 2**20,
        allreduce_ms=9.1 if tp == 8 else 4.6,
        pp_send_ms=0.0 if pp == 1 else 0.4,
        pp_bubble_fraction=0.0 if pp == 1 else 0.12,
        kv_max_requests=512,
        prefill_ms=30.0,
        total_tokens_per_s=tokens_per_s,
        output_tokens_per_s=tokens_per_s / 3,
        fits=True,
        reason=f"tp={tp},pp={pp}: "
        + ("all-reduces dominate" if tp == 8 else "the bubble costs less than the all-reduces"),
    )


def layout_study(tp8: float, tp4pp2: float, *, model: tuple[float, float]) -> StudyResult:
    """TP8 (the default) against TP4+PP2, measured at `tp8` and `tp4pp2` tok/s, the model
    predicting `model` (tp8, tp4pp2); a TP2 layout the model pruned (it does not fit)."""
    tp2 = layout_model(2, 4, 100.0).model_copy(
        update={"fits": False, "reason": "tp=2: the weights need 372 GB per GPU"}
    )
    trials = [
        TrialRow(
            number=0,
            state="complete",
            role="default",
            params={"tp": 8, "pp": 1},
            values=[tp8],
            feasible=True,
            model=layout_model(8, 1, model[0]),
        ),
        TrialRow(
            number=1,
            state="complete",
            role="search",
            params={"tp": 4, "pp": 2},
            values=[tp4pp2],
            feasible=True,
            model=layout_model(4, 2, model[1]),
        ),
        TrialRow(
            number=2,
            state="pruned",
            role="search",
            params={"tp": 2, "pp": 4},
            reason="does not fit",
            model=tp2,
        ),
    ]
    best = 0 if tp8 >= tp4pp2 else 1
    return StudyResult(
        name="glm5-layout",
        storage="sqlite:///study.db",
        engine="sglang",
        workload="chat 2048 in / 512 out at concurrency 64",
        objectives=[THROUGHPUT],
        sampler="grid",
        trials=trials,
        best=[best],
        default_trial=0,
    )


def save(study: StudyResult, study_dir: Path) -> Path:
    study_dir.mkdir(parents=True, exist_ok=True)
    (study_dir / STUDY_FILE).write_text(study.model_dump_json(by_alias=True))
    (study_dir / "space.yaml").write_text("options.max_running_requests: [64, 1024]\n")
    return study_dir


def plain(markdown: str) -> str:
    """report.md without Markdown's escapes, to compare with the text as written."""
    return html.unescape(markdown.replace("\\", ""))


def table_rows(markdown: str, header_start: str) -> list[list[str]]:
    """The cells of each row of the first table whose header starts with `header_start`."""
    lines = plain(markdown).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start)) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("| "):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-objective study, its report written."""
    folder = tmp_path_factory.mktemp("study") / "glm5"
    folder.mkdir()
    save(one_objective_study(folder), folder)
    write_study_report(folder, targets=[parse_target("total=1200")])
    return folder


# The one-objective study.


def test_the_report_opens_with_the_studys_answer(study_dir: Path):
    text = plain((study_dir / "report.md").read_text())
    assert text.startswith("# servelab tuning study: glm5-throughput\n")
    headline = [line for line in text.splitlines() if line.startswith("- ")][:3]
    assert headline[0] == (
        "- ✅ Tuning: trial 1 is the best of 5: total_throughput at 64 = 1,300 tok/s, 1.30x "
        "the default's 1,000 (trial 0, +30%)."
    )
    assert headline[1].startswith("- Trial 1's run · Best: 1,300 tok/s total")
    # the Tuning section comes right after the headline, then the run's six sections
    sections = re.findall(r"^## \d+\. (.+)$", text, flags=re.M)
    assert sections == [
        "Tuning",
        "Goal and targets",
        "Machine",
        "Engine",
        "Results",
        "Findings",
        "Status",
    ]


def test_the_question_names_objective_direction_level_constraints_sampler_workload(
    study_dir: Path,
):
    text = plain((study_dir / "report.md").read_text())
    assert "| total_throughput | maximize | 64 | tok/s |" in text
    assert "- p99_ttft_ms <= 2000" in text
    assert "| **sampler** | tpe |" in text
    assert "| **workload** | random 1024 in / 256 out at concurrency 64 |" in text
    assert "Study glm5-throughput: 5 trials (3 complete, 1 pruned, 1 failed)." in text


def test_the_answer_gives_the_gain_the_changes_the_spec_and_the_exact_command(study_dir: Path):
    markdown = (study_dir / "report.md").read_text()
    text = plain(markdown)
    assert (
        "✅ Best: trial 1 (diagnose): total_throughput at 64 = 1,300 tok/s, 1.30x the "
        "default's 1,000 (trial 0, +30%)." in text
    )
    assert "- options.max_running_requests: 64 → 256" in text
    assert "options.enable_torch_compile" not in text.split("against the default spec:")[1][:80]
    assert f"```yaml\n{BEST_SPEC}```" in markdown  # code is not escaped
    assert f"```console\n{shlex.join(BEST_COMMAND)}\n```" in markdown
    html = (study_dir / "report.html").read_text()
    assert "max_running_requests: 256" in html
    assert shlex.join(BEST_COMMAND) in html


def test_the_trial_table_has_every_trial_with_its_params_values_and_why(study_dir: Path):
    text = (study_dir / "report.md").read_text()
    rows = table_rows(text, "| trial | role | state |")
    assert rows == [
        ["0", "default", "complete", "64", "false", "1,000", "900", "yes", "000"],
        ["✅ 1 (best)", "diagnose", "complete", "256", "false", "1,300", "1,500", "yes", "001"],
        ["⚠️ 2", "search", "pruned", "1024", "true", "-", "-", "-", "-"],
        ["❌ 3", "search", "failed", "512", "true", "-", "-", "-", "003"],
        ["⚠️ 4", "search", "complete", "512", "false", "1,400", "2,600", "no", "004"],
    ]
    header = plain(text).split("| trial | role | state |")[1]
    assert header.startswith(
        " options.max_running_requests | options.enable_torch_compile | "
        "total_throughput at 64 (tok/s) | p99_ttft_ms | feasible | run |"
    )
    # why a trial stopped: a line each below the table, not a mostly empty column
    trials = plain(text).split("### Trials")[1]
    assert "Trial 2 (pruned): the model: the KV cache holds 410 requests, not 1024" in trials
    assert f"Trial 3 (failed): the engine died while starting; {OOM}" in trials


def test_the_plot_is_drawn_in_both_files(study_dir: Path):
    markdown = (study_dir / "report.md").read_text()
    assert "![total\\_throughput at 64 by trial](plots/tuning.png)" in markdown
    assert (study_dir / "plots" / "tuning.png").read_bytes().startswith(PNG_MAGIC)
    html = (study_dir / "report.html").read_text()
    assert '<figure id="plot-tuning">' in html
    # the run's own plots are there as well, one <svg> per PNG
    assert html.count("<svg") == len(list((study_dir / "plots").glob("*.png"))) > 1


def test_the_run_sections_are_the_best_trials(study_dir: Path):
    text = plain((study_dir / "report.md").read_text())
    engine = text.split("## 4. Engine")[1].split("## 5.")[0]
    assert shlex.join(BEST_COMMAND) in engine
    assert "1 of 1 targets met." in text  # judged on trial 1's run: 1,300 >= 1,200
    assert "the sections after Tuning are trial 1's run (diagnose)" in text


def test_rewriting_the_report_keeps_one_set_of_plots(study_dir: Path):
    before = sorted(p.name for p in (study_dir / "plots").iterdir())
    write_study_report(study_dir)
    assert sorted(p.name for p in (study_dir / "plots").iterdir()) == before


# Two objectives.


def test_two_objectives_name_the_pareto_set_and_draw_the_frontier(tmp_path: Path):
    study = two_objective_study()
    files = write_study_report(save(study, tmp_path / "tradeoff"))
    text = plain(files.markdown.read_text())
    assert "Tuning: the Pareto set of total_throughput at 64 and p99_ttft_ms at 64 is" in text
    assert "trial(s) 1, 3 of 5." in text
    assert "The Pareto set: trials 1, 3, the feasible trials" in text
    assert table_rows(files.markdown.read_text(), "| trial | total_throughput at 64 (tok/s) |") == [
        ["1", "1,300", "1,200", "1.30x", "1.33x"],
        ["3", "900", "400", "0.90x", "0.44x"],
    ]
    assert "![total\\_throughput at 64 against p99\\_ttft\\_ms at 64](plots/tuning_pareto.png)" in (
        files.markdown.read_text()
    )
    assert '<figure id="plot-tuning_pareto">' in files.html.read_text()
    # no trial has a run directory: the report is the Tuning section alone, and says why
    assert re.findall(r"^## \d+\. (.+)$", text, flags=re.M) == ["Tuning"]
    assert "trial 1 has no run directory in study.json" in text
    assert "no trial's run to report" in text

    plot = tuning_plot(study)
    frontier = plot.line("frontier")
    assert (frontier.x, frontier.y) == ((900.0, 1300.0), (400.0, 1200.0))
    assert plot.line("Pareto set").point_labels == ("#3", "#1")
    assert plot.line("trial 0").point_labels == ("default",)
    assert plot.line("trial", "feasible").x == (1100.0,)
    assert "1 failed or pruned trial(s) measured nothing, not drawn" in plot.notes


# Layouts: the answer follows the numbers.


def test_tp4_pp2_beats_tp8_where_it_measures_faster():
    study = layout_study(1000.0, 1300.0, model=(1100.0, 1400.0))
    assert layout_answer(study) == (
        "tp=4,pp=2 beats tp=8 by 1.30x here (chat 2048 in / 512 out at concurrency 64; "
        "total_throughput at 64: 1,300 against 1,000 tok/s); the model: tp=4,pp=2 spends "
        "4.6 ms of its 45.7 ms step in 78 all-reduces of 1.5 MiB, plus 0.4 ms of pipeline "
        "sends and a 12% bubble; tp=8 spends 9.1 ms of its 58.2 ms step in 156 all-reduces "
        "of 1.5 MiB; it predicts 1,400 against 1,100 tok/s (1.27x), as measured."
    )


def test_tp8_beats_tp4_pp2_where_it_measures_faster_and_the_sentence_flips():
    study = layout_study(1300.0, 1000.0, model=(1400.0, 1100.0))
    answer = layout_answer(study)
    assert answer is not None
    assert answer.startswith("tp=8 beats tp=4,pp=2 by 1.30x here (")
    assert answer.endswith("it predicts 1,400 against 1,100 tok/s (1.27x), as measured.")


def test_a_model_that_ranks_the_layouts_the_other_way_is_said_to():
    study = layout_study(1300.0, 1000.0, model=(1100.0, 1400.0))
    answer = layout_answer(study)
    assert answer is not None
    assert answer.startswith("tp=8 beats tp=4,pp=2 by 1.30x")
    assert answer.endswith("1,100 against 1,400 tok/s (0.79x), the opposite of what was measured.")


def test_layouts_within_the_minimum_effect_are_level():
    answer = layout_answer(layout_study(1000.0, 1030.0, model=(1100.0, 1400.0)))
    assert answer is not None
    assert answer.startswith("tp=4,pp=2 and tp=8 measure within 5% of each other here")
    assert "neither layout wins" in answer


def test_a_study_that_searched_no_layout_has_no_layout_answer(tmp_path: Path):
    assert layout_answer(two_objective_study()) is None
    assert layout_answer(one_objective_study(tmp_path)) is None


def test_a_one_gpu_study_says_its_one_layout_in_a_line(tmp_path: Path):
    """Every trial on tp=1 (the model accounted for each): nothing to compare, so no Layout
    table and no layout answer in the headline, one line instead."""
    study = layout_study(1000.0, 1300.0, model=(1100.0, 1400.0))
    one = layout_model(1, 1, 1200.0)
    trials = [
        t.model_copy(
            update={"params": {"options.max_running_requests": 64 * (t.number + 1)}}
        ).model_copy(update={"model": one})
        for t in study.trials[:2]
    ]
    study = study.model_copy(update={"trials": trials})
    assert layout_answer(study) is None
    assert all("tp=1" not in line for _, line in tuning_headline(study))
    section = tuning_section(study)
    assert [sub.key for sub in section.subsections] == [
        "tuning-question",
        "tuning-answer",
        "tuning-trials",
    ]
    text = plain(write_study_report(save(study, tmp_path / "one")).markdown.read_text())
    assert "Layout" not in text.split("## 2.")[0].split("Trials")[-1]
    assert "Every trial ran one layout, tp=1: no layout to compare." in text


def test_the_layout_table_puts_the_model_beside_the_measurement(tmp_path: Path):
    study = layout_study(1000.0, 1300.0, model=(1100.0, 1400.0))
    files = write_study_report(save(study, tmp_path / "layout"))
    markdown = files.markdown.read_text()
    rows = table_rows(markdown, "| layout | trials |")
    assert rows == [
        [
            "tp=8",
            "0",
            "1,000 (trial 0)",
            "58.2",
            "156 x 1.5 MiB",
            "9.1",
            "0",
            "0%",
            "30",
            "1,100",
            "tp=8,pp=1: all-reduces dominate",
        ],
        [
            "tp=4,pp=2",
            "1",
            "1,300 (trial 1)",
            "45.7",
            "78 x 1.5 MiB",
            "4.6",
            "0.4",
            "12%",
            "30",
            "1,400",
            "tp=4,pp=2: the bubble costs less than the all-reduces",
        ],
        [
            "tp=2,pp=4",
            "2",
            "does not fit",
            "640",
            "78 x 1.5 MiB",
            "4.6",
            "0.4",
            "12%",
            "30",
            "100",
            "tp=2: the weights need 372 GB per GPU",
        ],
    ]
    answer = layout_answer(study)
    assert answer is not None
    text = plain(markdown)
    assert text.count(answer) == 2  # in the headline and below the table
    assert "tp=4,pp=2 beats tp=8 by 1.30x" in files.html.read_text()


def test_the_headline_of_a_study_without_a_feasible_trial_says_so():
    study = layout_study(1000.0, 1300.0, model=(1100.0, 1400.0)).model_copy(update={"best": []})
    assert tuning_headline(study)[0] == (
        "bad",
        "Tuning: Study glm5-layout: 3 trials (2 complete, 1 pruned). No feasible trial yet, "
        "so no best spec.",
    )


# The plot, as data and drawn.


def test_the_plot_tells_trials_apart_and_steps_the_running_best(tmp_path: Path):
    plot = tuning_plot(one_objective_study(tmp_path))
    assert plot.key == "tuning" and plot.missing is None
    feasible = plot.line("trial", "feasible")
    assert (feasible.x, feasible.y) == ((1.0,), (1300.0,))
    infeasible = plot.line("trial", "infeasible")
    assert (infeasible.x, infeasible.y) == ((4.0,), (1400.0,))
    stopped = plot.line("no value, at the worst")
    assert (stopped.x, stopped.y) == ((2.0, 3.0), (1000.0, 1000.0))
    default = plot.line("trial 0")
    assert (default.x, default.y, default.point_labels) == ((0.0,), (1000.0,), ("default",))
    best = plot.line("so far")
    assert list(zip(best.x, best.y, strict=True)) == [
        (0.0, 1000.0),
        (1.0, 1000.0),
        (1.0, 1300.0),
        (4.0, 1300.0),
    ]
    # each class its own colour: the renderer colours by a series' run
    assert len({line.run for line in plot.lines()}) == 5


def test_the_by_trial_plot_ticks_whole_trial_numbers(tmp_path: Path):
    """Trial numbers are integers: the x axis reads 0, 1, 2, not 0.0, 0.5, 1.0."""
    plot = tuning_plot(one_objective_study(tmp_path))
    assert plot.panels[0].x_integer
    texts = re.findall(r"<!-- (.*?) -->", render_svg(plot))
    ticks = texts[: texts.index("trial number")]
    assert ticks and all(re.fullmatch(r"\d+", t) for t in ticks), ticks
    assert {"0", "4"} <= set(ticks)


def test_a_minimised_objective_steps_down():
    study = two_objective_study()
    ttft = [t.model_copy(update={"values": (t.values or [])[1:] or None}) for t in study.trials]
    best = tuning_plot(study.model_copy(update={"objectives": [TTFT], "trials": ttft}))
    line = best.line("so far")
    assert (line.x, line.y) == ((0.0, 3.0, 3.0, 4.0), (900.0, 900.0, 400.0, 400.0))


def test_a_study_with_nothing_measured_lists_the_plot_with_the_reason(tmp_path: Path):
    study = two_objective_study().model_copy(update={"trials": [], "best": []})
    assert tuning_plot(study).missing == "the study has no trial yet"
    files = write_study_report(save(study, tmp_path / "empty"))
    text = plain(files.markdown.read_text())
    assert "by trial: not drawn" not in text  # two objectives: the Pareto plot's title
    assert "against p99_ttft_ms at 64: not drawn, the study has no trial yet" in text
    assert "No feasible trial yet: the study has no best spec." in text


def test_the_drawn_plot_is_deterministic_svg_with_prefixed_ids(tmp_path: Path):
    plot = tuning_plot(one_objective_study(tmp_path))
    svg = render_svg(plot)
    assert svg == render_svg(plot)
    assert svg.startswith("<svg") and 'id="tuning-' in svg
    ids = re.findall(r'\bid="([^"]+)"', svg)
    assert ids and all(i.startswith("tuning-") for i in ids)
    assert render_png(plot).startswith(PNG_MAGIC)
    assert all(isinstance(s, Line) for s in plot.series)


# The CLI and bad input.


def test_servelab_report_on_a_study_folder_writes_the_study_report(tmp_path: Path):
    folder = save(one_objective_study(tmp_path / "cli"), tmp_path / "cli")
    result = CliRunner().invoke(app, ["report", str(folder), "--title", "Layout study"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"report: {folder / 'report.html'}",
        f"markdown: {folder / 'report.md'}",
    ]
    assert (folder / "report.md").read_text().startswith("# Layout study\n")
    assert "<title>Layout study</title>" in (folder / "report.html").read_text()


def _bad(tmp_path: Path) -> dict[str, list[str]]:
    missing = tmp_path / "no-study"
    (missing / "trials" / "000").mkdir(parents=True)
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / STUDY_FILE).write_text('{"name": "x"}')
    good = save(two_objective_study(), tmp_path / "good")
    return {
        f"error: {missing} has no study.json (servelab tune writes it": [str(missing)],
        f"error: {corrupt / STUDY_FILE} is not a valid study.json: ": [str(corrupt)],
        "error: --out does not apply to a study": [str(good), "--out", str(tmp_path / "x")],
    }


def test_bad_study_input_is_one_error_line_and_exit_2(tmp_path: Path):
    for message, args in _bad(tmp_path).items():
        result = CliRunner().invoke(app, ["report", *args])
        assert result.exit_code == 2, result.output
        assert isinstance(result.exception, SystemExit)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(message), result.stderr
        assert result.stdout == ""


@pytest.mark.parametrize("content", [None, "{not json", '{"schema": "servelab.tune/1"}'])
def test_write_study_report_refuses_a_folder_without_a_valid_study(tmp_path: Path, content: Any):
    if content is not None:
        (tmp_path / STUDY_FILE).write_text(content)
    with pytest.raises(ConfigError, match=r"study\.json"):
        write_study_report(tmp_path)
    assert not (tmp_path / "report.html").exists()
    with pytest.raises(ConfigError, match="no study folder at"):
        write_study_report(tmp_path / "absent")


def test_an_unreadable_best_run_falls_back_to_the_default_and_says_so(tmp_path: Path):
    folder = tmp_path / "fallback"
    study = one_objective_study(folder)
    (folder / "trials" / "001" / "summary.json").write_text("{broken")
    files = write_study_report(save(study, folder))
    text = plain(files.markdown.read_text())
    assert "trial 1's run is left out: " in text
    assert "the sections after Tuning are trial 0's run (default)" in text


# In a browser.


def test_the_study_report_renders_offline_and_asks_for_nothing(study_dir: Path, tmp_path: Path):
    chromium = require_chromium()
    page = render_page(chromium, study_dir / "report.html", tmp_path / "chromium")
    assert not page.requests and not page.failed_loads and not page.wire
    assert not is_blank(page.screenshot)
    assert "Tuning" in page.dom and "tuning-trials" in page.dom
    html = (study_dir / "report.html").read_text()
    assert not re.search(r'(?:src|href)="(?!#)', html)


WIDE_PARAMS = {
    "engine.tp": 8,
    "options.max_running_requests": 256,
    "options.chunked_prefill_size": 8192,
    "options.enable_torch_compile": False,
    "options.cuda_graph_max_bs": 160,
    "options.mem_fraction_static": 0.88,
    "options.schedule_policy": "lpm",
}
WIDE_METRICS = {"total_throughput": 1300.0, "p99_ttft_ms": 1500.0, "median_tpot_ms": 41.5}


def wide_study(study_dir: Path) -> StudyResult:
    """The one-objective study with a realistic search space: seven parameters with long
    paths, three metrics, a long reason and run folders named by the tuner."""
    study = one_objective_study(study_dir)
    trials = [
        t.model_copy(
            update={
                "params": {**WIDE_PARAMS, **t.params},
                "metrics": {**WIDE_METRICS, **t.metrics} if t.metrics else {},
                "reason": t.reason and f"{t.reason} ({'; '.join(WIDE_PARAMS)})",
            }
        )
        for t in study.trials
    ]
    return study.model_copy(update={"trials": trials})


def test_an_objective_is_one_column_whatever_its_metric_is_keyed(tmp_path: Path):
    """The tuner keys a trial's measured objective `total_throughput@64`: the objective's
    column already shows it, so no second column repeats it."""
    study = one_objective_study(tmp_path)
    trials = [
        t.model_copy(update={"metrics": {"total_throughput@64": t.values[0]}}) if t.values else t
        for t in study.trials
    ]
    files = write_study_report(save(study.model_copy(update={"trials": trials}), tmp_path))
    header = plain(files.markdown.read_text()).split("| trial | role | state |")[1]
    assert "total_throughput@64" not in header.splitlines()[0]


def test_the_trials_table_fits_the_page(tmp_path: Path):
    """Long parameter names and reasons wrap inside the page's width: no sideways scroll."""
    chromium = require_chromium()
    folder = tmp_path / "wide"
    write_study_report(save(wide_study(folder), folder))
    table, frame = "#tuning-trials table", "#tuning-trials .table-scroll"
    layout = measure_page(
        chromium, folder / "report.html", tmp_path / "chromium", [table, frame, "main"], []
    )
    box, scroll, main = (layout.elements[s] for s in (table, frame, "main"))
    assert box is not None and scroll is not None and main is not None
    # within the page, and nothing of it hidden in its scroll frame
    assert box.right_px <= main.right_px <= layout.viewport_width_px, (box, main)
    assert scroll.scroll_width_px <= scroll.width_px + 1, scroll
    assert layout.document_width_px <= layout.viewport_width_px


def test_the_answer_says_when_the_best_is_within_noise_and_what_confirm_measured(
    tmp_path: Path,
):
    from servelab.report.sections.tuning import _answer
    from servelab.tune.results import Confirmation, NoiseCheck

    study = one_objective_study(tmp_path)
    checks = [
        NoiseCheck(trial=4, role="runner-up", ratio=1.02, band_lo=0.97, band_hi=1.07,
                   within_noise=True, text="+2.0% over trial 4 (runner-up): within noise"),
    ]  # fmt: skip
    confirmed = Confirmation(best_trial=1, default_trial=0, objective="total tok/s", repeats=2,
                             ratios=[1.8, 1.9], median_ratio=1.85, min_ratio=1.8, max_ratio=1.9,
                             confirmed=True, text="confirmed over 2 pairs: 1.85x")  # fmt: skip
    blocks = _answer(study.model_copy(update={"best_noise": checks, "confirmation": confirmed}))
    bullets = [b for b in blocks if type(b).__name__ == "Bullets"]
    texts = [item[1] for b in bullets for item in b.items]
    assert any("within noise" in t for t in texts)
    assert any(t.startswith("Confirmed over 2 pairs: 1.85x") for t in texts)
    assert not [b for b in _answer(study) if type(b).__name__ == "Bullets" and b.items
                and "within noise" in b.items[0][1]]  # fmt: skip
