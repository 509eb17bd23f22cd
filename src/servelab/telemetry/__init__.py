"""Samplers on the bench clock: the GPUs through NVML/GPM, the engine through its /metrics.

`TelemetrySession` runs them beside the load generator, on threads of their own, writing
`telemetry.jsonl` and `metrics.jsonl` into a run's folder as samples arrive; nothing a
sampler hits is raised into the benchmark (it is kept in `errors`). `level_telemetry` then
summarises any span of the run, such as one sweep level, from the samples in memory.

```python
with TelemetrySession(run_dir.path, gpus=resolve_gpus("0,1"), metrics_url=url) as telemetry:
    t0 = now_ns(); ...run a level...; t1 = now_ns()
    summary = level_telemetry(telemetry, t0, t1, output_tokens)
```
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from servelab.core.clock import now_ns
from servelab.store.rundir import METRICS_FILE, TELEMETRY_FILE, RunDir
from servelab.telemetry.gpu import (
    DEFAULT_GPM_INTERVAL_S,
    DEFAULT_INTERVAL_S,
    DEFAULT_PCIE_INTERVAL_S,
    GpuReader,
    GpuSampler,
    GpuTrace,
    open_gpu_reader,
    resolve_gpus,
)
from servelab.telemetry.scrape import (
    DEFAULT_SCRAPE_INTERVAL_S,
    EngineTrace,
    MetricsScraper,
    metrics_url,
)
from servelab.telemetry.summary import (
    EngineLevel,
    GpuLevel,
    GpuStats,
    LevelTelemetry,
    summarize_level,
)

__all__ = [
    "METRICS_FILE",
    "TELEMETRY_FILE",
    "EngineLevel",
    "GpuLevel",
    "GpuStats",
    "LevelTelemetry",
    "TelemetrySession",
    "level_telemetry",
    "metrics_url",
    "resolve_gpus",
    "summarize_level",
]


class TelemetrySession:
    """GPU sampling for `gpus` (NVML indices) and/or scraping `metrics_url`, into `folder`.

    Either may be left out. Without `reader`, NVML is opened at `start` and closed at
    `stop` (a given reader is the caller's to close); if NVML cannot be opened, the GPU side
    is unavailable with the reason and the run goes on. A bad `metrics_url` is a
    ConfigError here, before anything starts.
    """

    def __init__(
        self,
        folder: Path,
        *,
        gpus: Sequence[int] = (),
        metrics_url: str | None = None,
        reader: GpuReader | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        gpm_interval_s: float = DEFAULT_GPM_INTERVAL_S,
        pcie_interval_s: float = DEFAULT_PCIE_INTERVAL_S,
        scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
    ) -> None:
        self.folder = folder
        self._gpus = list(gpus)
        self._reader = reader
        self._intervals = (interval_s, gpm_interval_s, pcie_interval_s)
        self._scraper = (
            MetricsScraper(
                metrics_url,
                sink=partial(self._write, METRICS_FILE),
                interval_s=scrape_interval_s,
            )
            if metrics_url is not None
            else None
        )
        self._store: RunDir | None = None
        self._store_lock = threading.Lock()
        self._sampler: GpuSampler | None = None
        self._gpu_reason: str | None = None
        self._opened_reader: GpuReader | None = None
        self._session_errors: list[str] = []
        self._started = self._stopped = False

    def __enter__(self) -> TelemetrySession:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the samplers; what fails is recorded and the rest runs."""
        if self._started:
            return
        self._started = True
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._store = RunDir(self.folder)
        except OSError as exc:  # keep sampling in memory; the summaries still work
            self._session_errors.append(f"telemetry files not written: {exc}")
        if self._gpus:
            self._start_gpus()
        if self._scraper is not None:
            try:
                self._scraper.start()
            except Exception as exc:
                self._session_errors.append(f"metrics: did not start: {exc}")

    def _start_gpus(self) -> None:
        reader = self._reader
        if reader is None:
            reader, self._gpu_reason = open_gpu_reader()
            self._opened_reader = reader
        if reader is None:
            return
        interval_s, gpm_interval_s, pcie_interval_s = self._intervals
        sampler = GpuSampler(
            reader,
            self._gpus,
            sink=partial(self._write, TELEMETRY_FILE),
            interval_s=interval_s,
            gpm_interval_s=gpm_interval_s,
            pcie_interval_s=pcie_interval_s,
        )
        try:
            sampler.start()
        except Exception as exc:
            self._gpu_reason = f"GPU sampling did not start: {type(exc).__name__}: {exc}"
            return
        self._sampler = sampler

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop and join the samplers, record their errors, close NVML and the files."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        joined = True
        if self._sampler is not None:
            joined = self._sampler.stop(timeout_s)
            self._final_row(TELEMETRY_FILE, self._sampler.errors.counts())
        if self._scraper is not None:
            if not self._scraper.stop(timeout_s):
                self._session_errors.append(f"metrics: still scraping after {timeout_s:g} s")
            self._final_row(METRICS_FILE, self._scraper.errors.counts())
        if not joined:  # a thread is inside NVML: shutting NVML down under it could crash
            self._session_errors.append(f"gpu: still sampling after {timeout_s:g} s")
        elif self._opened_reader is not None:
            self._opened_reader.close()
        with self._store_lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def _write(self, filename: str, rows: list[dict[str, Any]]) -> None:
        with self._store_lock:
            if self._store is not None:
                self._store.append_jsonl(filename, rows)

    def _final_row(self, filename: str, errors: dict[str, int]) -> None:
        try:
            self._write(filename, [{"kind": "stop", "t_ns": now_ns(), "errors": errors}])
        except OSError as exc:
            self._session_errors.append(f"{filename} not finished: {exc}")

    @property
    def errors(self) -> list[str]:
        """What went wrong in the samplers, one line per distinct message."""
        lines = list(self._session_errors)
        if self._sampler is not None:
            lines += self._sampler.errors.lines()
        if self._scraper is not None:
            lines += self._scraper.errors.lines()
        return lines

    def gpu_trace(self) -> GpuTrace:
        """A copy of the GPU samples so far (or why there are none)."""
        if self._sampler is not None:
            return self._sampler.trace()
        if self._gpus and self._started:
            return GpuTrace(reason=self._gpu_reason or "GPU sampling did not start")
        return GpuTrace()

    def engine_trace(self) -> EngineTrace:
        """A copy of the engine samples so far (or why there are none)."""
        return self._scraper.trace() if self._scraper is not None else EngineTrace()


def level_telemetry(
    session: TelemetrySession, t_start_ns: int, t_end_ns: int, output_tokens: int | None
) -> LevelTelemetry:
    """The GPUs and the engine over [t_start_ns, t_end_ns] of `session` (bench clock)."""
    return summarize_level(
        session.gpu_trace(), session.engine_trace(), t_start_ns, t_end_ns, output_tokens
    )
