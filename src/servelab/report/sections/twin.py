"""The twin, after the results: each level as measured and as the engine fitted from the
run's own streams replays it (twin.json, written by `servelab diagnose`), the fitted step
cost, and the limits the replay ran under. Absent when the run has no twin.json."""

from __future__ import annotations

from collections.abc import Sequence

from servelab.bench.results import LevelSummary
from servelab.report.document import Block, Bullets, Figure, Paragraph, Section, Table, Tone
from servelab.report.plots import twin_plot
from servelab.twin.result import MetricPair, TwinFit, TwinLevel, TwinResult, TwinTerm

__all__ = ["FAR_OFF", "twin_section"]

FAR_OFF = 0.25
"""A replayed value off the measured one by more than this share is marked in the table."""

_COMPARED = (
    ("median_ttft_ms", "TTFT p50 ms"),
    ("median_tpot_ms", "TPOT p50 ms"),
    ("median_e2e_latency_ms", "E2E p50 ms"),
    ("output_throughput", "output tok/s"),
)
"""(metric of TwinLevel.metrics, its column) in the levels' table, in this order."""


def twin_section(
    twin: TwinResult | None, levels: Sequence[LevelSummary], *, plots: bool = True
) -> Section | None:
    """'Replayed against measured'; None without a twin."""
    if twin is None:
        return None
    blocks: list[Block] = [Paragraph(_what(twin))]
    if twin.levels:
        blocks.append(_levels_table(twin.levels))
        held = _held_table(twin.levels)
        if held is not None:
            blocks.append(held)
    else:
        blocks.append(Paragraph("No level was replayed: none completed a request.", "warn"))
    blocks += [_terms_table(twin), _limits_table(twin)]
    notes = [*twin.fit.notes, *twin.notes]
    if notes:
        blocks.append(Bullets([("plain", note, []) for note in dict.fromkeys(notes)]))
    if plots and twin.levels:
        plot = twin_plot(twin, levels)
        if plot.missing is None:
            blocks.append(Figure(plot))
            blocks += [Paragraph(note) for note in plot.notes]
        else:
            blocks.append(Bullets([("plain", f"{plot.title}: not drawn, {plot.missing}", [])]))
    return Section("twin", "Replayed against measured", blocks)


def _what(twin: TwinResult) -> str:
    """What the twin is, how it was fitted, and whether the fit settled."""
    return (
        "The twin is the engine's step cost fitted from this run's own records, replayed "
        "level by level in virtual time under the limits it ran with. "
        f"{_fitted(twin.fit)}."
    )


def _fitted(fit: TwinFit) -> str:
    if fit.source == "requests":
        how = f"It was fitted from {fit.samples:,} gaps of {fit.requests:,} requests"
    elif fit.source == "end-to-end times":
        how = (
            f"It was fitted from the end-to-end times of {fit.requests:,} requests (their "
            "answers came whole, with no stream)"
        )
    else:
        how = (
            f"It was fitted from {fit.samples} level summaries ({fit.requests:,} requests; "
            "no requests.jsonl)"
        )
    if fit.residual_ms is not None:
        how += f", residual {_term(fit.residual_ms)} ms"
    rounds = f"{fit.rounds} round{'s' if fit.rounds != 1 else ''} of fitting and replaying"
    if fit.converged:
        return f"{how}, and converged in {rounds}"
    return f"{how}, and did not converge in {rounds}: its terms still moved"


def _levels_table(levels: Sequence[TwinLevel]) -> Table:
    header = ["load"]
    for _, column in _COMPARED:
        header += [column, "replayed (90% interval)", "error"]
    header.append("explained")
    rows: list[list[str]] = []
    bad: set[tuple[int, int]] = set()
    for r, level in enumerate(levels):
        row = [level.load]
        for metric, _ in _COMPARED:
            pair = level.metrics.get(metric)
            if pair is not None and pair.error is not None and abs(pair.error) > FAR_OFF:
                bad.add((r, len(row) + 2))
            row += _pair_cells(pair)
        row.append(_share(level.explained_share))
        rows.append(row)
    return Table(
        header,
        rows,
        caption=(
            "Each level as measured and as replayed: the replayed value with the 90% interval "
            "of replays at the fit's bootstrap draws, and the error, replayed / measured - 1 "
            f"(marked beyond ±{FAR_OFF:.0%}). Explained: the requests' end-to-end time the "
            "replay accounts for, the sum of the shorter of replayed and measured over the "
            "sum of the longer (1 when every request took as long in both)."
        ),
        right=frozenset(range(1, len(header))),
        bad=frozenset(bad),
    )


def _pair_cells(pair: MetricPair | None) -> list[str]:
    """measured, replayed (low-high), error as a signed percent."""
    if pair is None:
        return ["-", "-", "-"]
    replayed = _number(pair.replayed)
    if pair.replayed is not None and pair.low is not None and pair.high is not None:
        replayed += f" ({_number(pair.low)}–{_number(pair.high)})"
    error = "-" if pair.error is None else _signed(pair.error)
    return [_number(pair.measured), replayed, error]


def _held_table(levels: Sequence[TwinLevel]) -> Table | None:
    """What the engine held at each level, by the streams, the replay and its own count."""
    if not any(
        lv.decode_batch_measured is not None
        or lv.decode_batch_replayed is not None
        or lv.engine_running_mean is not None
        or lv.preemptions
        for lv in levels
    ):
        return None
    rows = [
        [
            lv.load,
            f"{lv.requests:,}",
            _batch(lv.decode_batch_measured),
            _batch(lv.decode_batch_replayed),
            _batch(lv.engine_running_mean),
            f"{lv.preemptions:,}",
        ]
        for lv in levels
    ]
    return Table(
        ["load", "requests", "decoding: streams", "replayed", "engine's running", "preemptions"],
        rows,
        caption=(
            "Requests decoding at once, time-weighted: from the run's streams, in the replay, "
            "and the engine's own mean of running requests where its /metrics gave one; "
            "preemptions in the replay."
        ),
        right=frozenset(range(1, 6)),
    )


def _terms_table(twin: TwinResult) -> Table:
    terms = [*twin.terms, twin.request_overhead_ms]
    return Table(
        ["term", "value", "± stderr", "90% interval", "unit"],
        [_term_row(term) for term in terms],
        caption=(
            "The fitted step cost, a sum of these terms per engine step, and the time from a "
            "request's send to the scheduler, added once per request; standard errors and "
            "intervals from the bootstrap of the fit ('-' where it had none)."
        ),
        right=frozenset({1, 2, 3}),
    )


def _term_row(term: TwinTerm) -> list[str]:
    interval = (
        "-" if term.low is None or term.high is None else f"{_term(term.low)}–{_term(term.high)}"
    )
    stderr = "-" if term.stderr is None else f"± {_term(term.stderr)}"
    return [term.name, _term(term.value), stderr, interval, term.unit]


def _limits_table(twin: TwinResult) -> Table:
    rows = [
        [limit.name, "not replayed" if limit.value is None else f"{limit.value:,}", limit.source]
        for limit in twin.limits
    ]
    tones: list[Tone] = ["warn" if limit.value is None else "plain" for limit in twin.limits]
    return Table(
        ["limit", "value", "source"],
        rows,
        caption=(
            "The limits the replay ran under, and where each was read; requests admitted by "
            f"the {twin.policy.name} policy (engine: {twin.engine or 'not known'})"
        ),
        tones=tones,
        right=frozenset({1}),
    )


def _number(value: float | None) -> str:
    """A latency (ms), a throughput (tok/s) or a batch to about three significant figures:
    '1,857', '466', '20.5', '2.03', '0.412'."""
    if value is None:
        return "-"
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _batch(value: float | None) -> str:
    """Requests at once, time-weighted: '14.2'."""
    return "-" if value is None else f"{value:.1f}"


def _term(value: float | None) -> str:
    """A fitted term: three significant figures, '6.25', '0.0412', '2.1e-05'."""
    return "-" if value is None else f"{value:.3g}"


def _signed(error: float) -> str:
    """'+6.0%', '-19.3%'; '0.0%' for an error that rounds to nothing, whatever its sign."""
    text = f"{error:+.1%}"
    return "0.0%" if text in ("+0.0%", "-0.0%") else text


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
