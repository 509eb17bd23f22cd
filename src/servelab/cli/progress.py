"""Live rendering of a sweep: a progress bar for the running level, rows for finished ones."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from servelab.bench.events import BenchEvent, LevelFinished, LevelProgress, LevelStarted, Notice
from servelab.bench.results import LevelSummary
from servelab.report.tables import render_sweep

__all__ = ["SweepView"]


class SweepView:
    """Consumes BenchEvents; draws on stderr so stdout stays clean for tables and JSON."""

    def __init__(self, err: Console, *, quiet: bool = False) -> None:
        self.err = err
        self.quiet = quiet
        self.levels: list[LevelSummary] = []
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=err,
        )
        self.task: TaskID | None = None
        self.timed = False
        """True while the running level is measured by time rather than request count."""
        self.live = Live(self._render(), console=err, transient=True, refresh_per_second=8)

    def __enter__(self) -> SweepView:
        if not self.quiet:
            self.live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.quiet:
            self.live.__exit__(exc_type, exc, tb)

    def __call__(self, event: BenchEvent) -> None:
        if isinstance(event, Notice):
            self.err.print(escape(event.message), highlight=False, soft_wrap=True)
        elif isinstance(event, LevelStarted):
            self._start(event)
        elif isinstance(event, LevelProgress) and self.task is not None:
            detail = f"{event.output_tokens:,} tokens"
            if event.failed:
                detail += f", {event.failed} failed"
            done = event.completed + event.failed
            if self.timed:
                done = int(event.elapsed_s)
            self.progress.update(self.task, completed=done, detail=detail)
        elif isinstance(event, LevelFinished):
            self._finish(event.summary)
        self.live.update(self._render())

    def _start(self, event: LevelStarted) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        phase = "warm-up" if event.warmup else "measuring"
        total = event.total_requests
        self.timed = total is None and event.duration_s is not None
        if total is None and event.duration_s is not None:
            total = int(event.duration_s)
        self.task = self.progress.add_task(f"{event.level.label}: {phase}", total=total, detail="")

    def _finish(self, summary: LevelSummary) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
        self.levels.append(summary)
        if not self.err.is_terminal and not self.quiet:
            load = summary.max_concurrency or f"{summary.request_rate:g}/s"
            self.err.print(
                f"level {summary.level} ({load}): {summary.total_throughput:,.1f} tok/s total, "
                f"{summary.output_throughput:,.1f} tok/s output, {summary.completed} completed, "
                f"{summary.failed} failed",
                highlight=False,
            )

    def _render(self) -> Group:
        parts: list[RenderableType] = []
        if self.levels:
            parts.append(render_sweep(self.levels))
        parts.append(self.progress)
        return Group(*parts)
