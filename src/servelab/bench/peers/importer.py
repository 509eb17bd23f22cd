"""A peer's result file as a servelab run: read, recognised, converted, written.

`import_file` reads the file and returns the run as servelab would have written it
(a BenchSummary, and RequestRecords where the file carries faithful per-request values);
`write_imported` writes it as a run directory, so report, diagnose and compare work on
it like on any run. Every reason a file cannot be imported is one ConfigError line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from servelab import __version__
from servelab.bench.peers.aiperf import parse_aiperf, parse_aiperf_sweep
from servelab.bench.peers.common import Doc, NotImportable, Parsed, lacking
from servelab.bench.peers.detect import Format, detect, read_documents
from servelab.bench.peers.guidellm import parse_guidellm
from servelab.bench.peers.sglang import parse_sglang
from servelab.bench.peers.vllm import parse_vllm
from servelab.bench.records import RequestRecord
from servelab.bench.results import BenchSummary, RunInfo
from servelab.core.errors import ConfigError
from servelab.core.provenance import git_sha
from servelab.store import CatalogRow, RunDir, record_run

__all__ = ["READS", "ImportedRun", "import_file", "write_imported"]

READS = (
    "it reads SGLang bench_serving JSONL, vLLM bench serve JSON, AIPerf "
    "profile_export_aiperf.json, GuideLLM benchmarks.json"
)
"""What servelab can import, said after every refusal."""

_PARSERS: dict[Format, Callable[[list[Doc]], Parsed]] = {
    "sglang": parse_sglang,
    "vllm": parse_vllm,
    "aiperf": parse_aiperf,
    "aiperf-sweep": parse_aiperf_sweep,
    "guidellm": parse_guidellm,
}


@dataclass(frozen=True)
class ImportedRun:
    """A peer's result file as a servelab run, not yet written."""

    source: Path
    tool: str
    """sglang, vllm, aiperf or guidellm."""
    version: str | None
    """The tool's version where the file says it; else None."""
    generation: str
    """The schema or key generation the file was read as (`0.2.12+ keys`, `v0.3 schema`)."""
    summary: BenchSummary
    records: list[RequestRecord] = field(default_factory=list)

    @property
    def version_text(self) -> str:
        """The version where known, else the generation the file was read as."""
        return self.version or f"({self.generation}; version not in the file)"


def import_file(path: Path, *, name: str | None = None) -> ImportedRun:
    """Read `path` (a peer tool's result file); `name` names the run (default:
    import-<tool>-<file stem>). ConfigError: one line saying why it cannot be imported."""
    try:
        docs = read_documents(path)
        parsed = _PARSERS[detect(docs)](docs)
    except NotImportable as exc:
        raise ConfigError(
            f"{path} is not a result file servelab can import: {exc}", hint=READS
        ) from None
    summary = BenchSummary(
        status="complete",
        run=_run_info(path, parsed, name or f"import-{parsed.tool}-{path.stem}"),
        levels=parsed.levels,
    )
    return ImportedRun(
        source=path,
        tool=parsed.tool,
        version=parsed.version,
        generation=parsed.generation,
        summary=summary,
        records=parsed.records,
    )


def write_imported(run: ImportedRun, out: Path | None = None, *, root: Path | None = None) -> Path:
    """Write the run directory: `out` exactly (refused when not empty), else
    `<root or servelab-runs>/<UTC time>-<run name>/`; it joins the runs' catalogue."""
    run_dir = RunDir.create(name=run.summary.run.name, out=out, root=root)
    try:
        if run.records:
            run_dir.append_requests(r.to_json() for r in run.records)
        run_dir.write_summary(run.summary)
    finally:
        run_dir.close()
    best = max(
        (s for s in run.summary.levels if s.total_throughput is not None),
        key=lambda s: s.total_throughput or 0.0,
        default=None,
    )
    target = run.summary.run.target.get("url")
    record_run(
        run_dir.runs_root,
        CatalogRow(
            path=str(run_dir.path.resolve()),
            name=run.summary.run.name,
            kind="import",
            started_utc=run.summary.run.started_utc,
            target=str(target or run.source.name),
            status=run.summary.status,
            levels=len(run.summary.levels),
            best_output_throughput=max(s.output_throughput for s in run.summary.levels),
            best_total_throughput=best.total_throughput if best else None,
        ),
    )
    return run_dir.path


def _run_info(path: Path, parsed: Parsed, name: str) -> RunInfo:
    tool = f"{parsed.label} {parsed.version or f'({parsed.generation})'}"
    lacks = lacking(parsed.levels)
    with_records = sorted({r.level for r in parsed.records})
    without = [s.level for s in parsed.levels if s.level not in with_records]
    missing = [f"no {', '.join(lacks)} (null)"] if lacks else []
    if without:
        which = "" if not with_records else f" for level {', '.join(map(str, without))}"
        missing.append(
            f"no per-request records{which}: no noise band, no distributions ({parsed.no_records})"
        )
    summary_note = f"imported from {tool} {path.name}: " + (
        "; ".join(missing) or "nothing is missing"
    )
    levels = [
        s.max_concurrency if s.max_concurrency is not None else s.request_rate
        for s in parsed.levels
    ]
    return RunInfo(
        name=name,
        command=["servelab", "import", str(path)],
        started_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        servelab_version=__version__,
        versions={parsed.tool: parsed.version} if parsed.version else {},
        git_sha=git_sha(),
        host=parsed.host,
        target={
            **parsed.target,
            "tool": parsed.tool,
            "tool_version": parsed.version,
            "source_file": path.name,
        },
        workload=parsed.workload,
        load={
            "mode": parsed.levels[0].load_mode,
            "levels": [float(v) for v in levels if v is not None],
            "imported_from": parsed.tool,
        },
        notes=[summary_note, *parsed.notes],
    )
