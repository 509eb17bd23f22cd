"""Section 2, the machine: probe facts and verdicts, the GPUs and their pairs, the rates
measured against the datasheet."""

from __future__ import annotations

from servelab.probe.report import ProbeReport
from servelab.report.document import Block, Bullets, KeyValues, Paragraph, Section, Table, Tone
from servelab.report.inputs import ReportRun
from servelab.report.probe_rows import RowTable, comm_tables, gpu_table, host_rows, pair_matrix
from servelab.report.sections._common import tone_of

__all__ = ["machine_section"]

_WORST_FIRST = ("critical", "error", "warning", "info", "ok")


def machine_section(run: ReportRun) -> Section:
    probe = run.probe
    if probe is None:
        host = run.summary.run.host
        return Section(
            "machine",
            "Machine",
            [
                Paragraph("No probe.json in the run: run servelab probe --out DIR for the facts."),
                KeyValues([(k, str(v)) for k, v in host.items()]),
            ],
        )
    blocks: list[Block] = [
        Paragraph(f"Probed {probe.created_utc} ({probe.virtualization.summary})."),
        KeyValues(host_rows(probe)),
        _verdicts(probe),
    ]
    if probe.gpus is not None and probe.gpus.gpus:
        blocks.append(_table(gpu_table(probe.gpus)))
        if probe.gpus.pairs:
            blocks.append(_pairs(probe))
    if probe.comm is None:
        blocks.append(
            Paragraph(
                "Rates not measured: servelab probe --comm measures copy, matmul, P2P "
                "and all-reduce against the datasheet."
            )
        )
    else:
        blocks += [_table(t) for t in comm_tables(probe.comm)]
        if probe.comm.skipped:
            skipped = "; ".join(f"{k}: {v}" for k, v in probe.comm.skipped.items())
            blocks.append(Paragraph(f"Not measured: {skipped}."))
    return Section("machine", "Machine", blocks)


def _verdicts(probe: ProbeReport) -> Bullets:
    ordered = sorted(probe.verdicts, key=lambda v: _WORST_FIRST.index(v.severity.value))
    items: list[tuple[Tone, str, list[str]]] = []
    for v in ordered:
        sub = list(v.evidence)
        if v.severity.value != "ok":
            sub += [f"why it matters: {v.meaning}", f"try: {v.action}"]
        items.append((tone_of(v.severity), f"{v.severity.value}: {v.title} [{v.code}]", sub))
    return Bullets(items)


def _table(rows: RowTable) -> Table:
    return Table(rows.header, rows.rows, caption=rows.title, right=rows.right, bad=rows.bad)


def _pairs(probe: ProbeReport) -> Table:
    assert probe.gpus is not None
    matrix = pair_matrix(probe.gpus)
    bad = frozenset(
        (a, b + 1)
        for a, row in enumerate(matrix)
        for b, cell in enumerate(row)
        if cell.usable is False
    )
    return Table(
        ["", *(f"GPU{b}" for b in range(len(matrix)))],
        [[f"GPU{a}", *(cell.text for cell in row)] for a, row in enumerate(matrix)],
        caption="GPU pairs: topology, P2P read/write (nvidia-smi topo words); red: no P2P",
        bad=bad,
    )
