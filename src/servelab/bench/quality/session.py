"""The quality probe's passes around a sweep: before it, beside its heaviest level, after it.

The passes run on one asyncio loop in a thread of this process, through the quality
client's own HTTP session: the load generator's worker processes never see them, so the
loaded pass's requests are in no level's records. Its one client remembers across passes
what the engine refused (logprobs, teacher forcing). quality.json is rewritten after every
pass, so a sweep that fails later keeps what was measured. Nothing here raises for the
probe's own failure: a pass that could not run is a note in quality.json, and the sweep
goes on.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from contextlib import suppress
from dataclasses import replace
from typing import Any

from servelab.bench.quality.client import QualityClient, QualityTarget
from servelab.bench.quality.evaluate import BEFORE, evaluate_quality, reference_label
from servelab.bench.quality.plan import QualityPlan
from servelab.bench.quality.probes import probe_set_digest, write_probes
from servelab.bench.quality.results import (
    EngineName,
    LoadedBeside,
    QualityBlock,
    QualityPass,
    QualityResult,
    quality_block,
    write_quality,
)
from servelab.core.errors import ServelabError
from servelab.store.rundir import RunDir

__all__ = ["FULL_OVERLAP", "SGLANG_PREFIX_CACHE_NOTE", "QualitySession", "quality_engine"]

FULL_OVERLAP = 0.99
"""A loaded pass with less of its wall time under load than this gets a note."""
SGLANG_PREFIX_CACHE_NOTE = (
    "sglang: the after and loaded passes resend the before pass's prompts and SGLang's "
    "radix cache may serve their prefixes (another kernel path than a cold prefill); "
    "servelab cannot salt it, so a determinism or batch-invariance drift may be the "
    "prefix cache's (run SGLang with --disable-radix-cache to rule it out)"
)
"""quality.json's note on an SGLang run: the prefix cache confound (docs/QUALITY.md)."""
_ENGINE_DIALECTS: dict[str, EngineName] = {
    "vllm": "vllm",
    "sim": "vllm",  # the simulator answers in vLLM's shapes (docs/SIMULATOR.md)
    "sglang": "sglang",
    "transformers": "transformers",
    "embedded": "transformers",  # transformers serve
}


def quality_engine(engine: str) -> EngineName:
    """The wire dialect the probe speaks to BenchConfig.engine; any other endpoint: openai."""
    return _ENGINE_DIALECTS.get(engine, "openai")


class QualitySession:
    """One run's passes and its quality.json; `close()` ends the loop's thread."""

    def __init__(
        self,
        plan: QualityPlan,
        *,
        target: QualityTarget,
        run_dir: RunDir,
        reference: QualityResult | None,
        on_note: Callable[[str], None],
        max_context: int | None = None,
    ) -> None:
        self.plan = plan
        self.probes = plan.probes(max_context)
        if target.run_id is None:  # each pass's vLLM cache_salt names the run
            target = replace(target, run_id=run_dir.path.name)
        self.target = target
        self.run_dir = run_dir
        self.reference = reference
        self.reference_run = str(plan.reference) if plan.reference is not None else None
        self.on_note = on_note
        self.passes: dict[str, QualityPass] = {}
        self.notes: list[str] = []
        self.result: QualityResult | None = None
        self.loaded_level: int | None = None
        self.loaded_beside: LoadedBeside | None = None
        self.loaded_overlap_share: float | None = None
        self._loaded: Future[tuple[QualityPass, float, float]] | None = None
        self._load_started = 0.0
        write_probes(run_dir.path, self.probes)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="servelab-quality", daemon=True
        )
        self._thread.start()
        self.client = QualityClient(target)
        self._submit(self.client.__aenter__()).result()

    # The passes.

    def before(self) -> None:
        """The reference pass, alone; it also scores the reference run's continuations."""
        forced_on: dict[str, QualityPass] = {}
        theirs = self._reference_before()
        if theirs is not None:
            forced_on[reference_label(self.reference_run or "reference")] = theirs
        self._run(
            BEFORE, lambda: self.client.run_pass(self.probes, name=BEFORE, forced_on=forced_on)
        )

    def start_loaded(self, level: int, beside: LoadedBeside) -> None:
        """Start the loaded pass now, as the load of `level` starts; it runs on its own."""
        before = self.passes.get(BEFORE)
        if not self.can_load or before is None:
            return
        self.loaded_level, self.loaded_beside = level, beside
        self._load_started = time.perf_counter()
        self._loaded = self._submit(self._timed_loaded(before))
        self.on_note(f"quality: the loaded pass runs beside level {level}")

    @property
    def loaded_started(self) -> bool:
        return self._loaded is not None

    @property
    def can_load(self) -> bool:
        """A loaded pass can start: the before pass, whose continuations it scores, ran."""
        return BEFORE in self.passes and self._loaded is None

    def loaded_done(self) -> bool:
        return self._loaded is not None and self._loaded.done()

    def finish_loaded(self) -> None:
        """Wait for the loaded pass (the load has just ended) and record how much of it
        the load covered."""
        if self._loaded is None or self.loaded_overlap_share is not None:
            return
        load_ended = time.perf_counter()
        try:
            loaded, started, ended = self._loaded.result()
        except Exception as exc:  # a bug or a crash in the pass: a note, never the sweep's end
            self._note(f"the loaded pass could not run: {_describe(exc)}")
            self.loaded_overlap_share = 0.0
            return
        span = ended - started
        overlap = max(0.0, min(ended, load_ended) - max(started, self._load_started))
        self.loaded_overlap_share = min(1.0, overlap / span) if span > 0 else 1.0
        if self.loaded_overlap_share < FULL_OVERLAP:
            self._note(
                f"the loaded pass outlasted level {self.loaded_level}'s load: "
                f"{self.loaded_overlap_share:.0%} of its {span:.1f} s ran beside it (give "
                "that level more requests, or fewer --quality-prompts)"
            )
        self.passes[loaded.name] = loaded
        self._write()

    def after(self) -> None:
        """The determinism pass, alone after the sweep; scores before's continuations."""
        before = self.passes.get(BEFORE)
        if before is None:
            return
        self._run(
            "after",
            lambda: self.client.run_pass(
                self.probes, name="after", forced_on={BEFORE: before}, force_own=False
            ),
        )

    def block(self) -> QualityBlock | None:
        """summary.json's quality block as measured so far."""
        return quality_block(self.result) if self.result is not None else None

    def close(self) -> None:
        """Stop a loaded pass still under way, close the client and end the thread."""
        if self._loaded is not None and not self._loaded.done():
            self._loaded.cancel()
        with suppress(Exception):  # closing a session that is already broken: nothing to keep
            self._submit(self.client.__aexit__(None, None, None)).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    # Helpers.

    async def _timed_loaded(self, before: QualityPass) -> tuple[QualityPass, float, float]:
        started = time.perf_counter()
        loaded = await self.client.run_pass(
            self.probes, name="loaded", forced_on={BEFORE: before}, force_own=False, loaded=True
        )
        return loaded, started, time.perf_counter()

    def _run(self, name: str, make: Callable[[], Coroutine[Any, Any, QualityPass]]) -> None:
        self.on_note(f"quality: the {name} pass ({len(self.probes)} probes)")
        try:
            self.passes[name] = self._submit(make()).result()
        except Exception as exc:  # a bug or a crash in the pass: a note, never the sweep's end
            self._note(f"the {name} pass could not run: {_describe(exc)}")
            return
        self._write()

    def _submit(self, coroutine: Coroutine[Any, Any, Any]) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _reference_before(self) -> QualityPass | None:
        if self.reference is None:
            return None
        return next((p for p in self.reference.passes if p.name == BEFORE), None)

    def _note(self, message: str) -> None:
        self.notes.append(message)
        self.on_note(f"quality: {message}")
        self._write()

    def _add_note(self, message: str) -> None:
        """A note found while writing, kept once."""
        if message not in self.notes:
            self.notes.append(message)

    def _write(self) -> None:
        """quality.json from the passes so far (each comparison they allow). Never raises:
        where the evaluation or the write fails, a minimal result with the note is written
        instead, and the sweep goes on."""
        try:
            self._evaluate_and_write()
        except Exception as exc:  # a bug in the evaluation: a note, never the sweep's end
            what = str(exc) if isinstance(exc, ServelabError) else _describe(exc)
            self._add_note(f"not evaluated: {what}")
            self._write_minimal()

    def _evaluate_and_write(self) -> None:
        order = self._order()
        client = self.client
        result = evaluate_quality(
            probes=self.probes,
            seed=self.plan.seed,
            engine=self.target.engine,
            passes=order,
            logprobs_available=client.logprobs_available,
            logprobs_reason=client.logprobs_reason,
            forced_method=client.forced_method,
            forced_reason=client.forced_reason,
            reference=self.reference,
            reference_run=self.reference_run,
        )
        if self.target.engine == "sglang" and len(order) > 1:
            self._add_note(SGLANG_PREFIX_CACHE_NOTE)
        theirs = self.reference.forced_method if self.reference is not None else None
        if self.reference is not None and BEFORE in self.passes and theirs != client.forced_method:
            self._add_note(
                f"the reference run was teacher-forced by {theirs}, this run by "
                f"{client.forced_method}: the configuration's |Δlogprob| compares two methods"
            )
        self.result = result.model_copy(
            update={
                "loaded_level": self.loaded_level if "loaded" in self.passes else None,
                "loaded_beside": self.loaded_beside if "loaded" in self.passes else None,
                "loaded_overlap_share": self.loaded_overlap_share,
                "notes": list(self.notes),
            }
        )
        write_quality(self.run_dir, self.result)

    def _order(self) -> list[QualityPass]:
        return [p for name in (BEFORE, "loaded", "after") if (p := self.passes.get(name))]

    def _write_minimal(self) -> None:
        """The passes and the notes without comparisons; without the passes where even
        that fails; the on_note callback where nothing can be written."""
        client = self.client
        last: Exception | None = None
        for passes in (self._order(), []):
            try:
                self.result = QualityResult(
                    probe_set_digest=probe_set_digest(self.probes),
                    seed=self.plan.seed,
                    n_probes=len(self.probes),
                    engine=self.target.engine,
                    logprobs_available=client.logprobs_available,
                    logprobs_reason=client.logprobs_reason,
                    forced_method=client.forced_method,
                    forced_reason=client.forced_reason,
                    reference_run=self.reference_run,
                    passes=passes,
                    comparisons=[],
                    probe_s=sum(p.wall_s for p in passes),
                    notes=list(self.notes),
                )
                write_quality(self.run_dir, self.result)
                return
            except Exception as exc:  # an invalid pass or a full disk: try with less
                last = exc
        if last is not None:
            self.on_note(f"quality: quality.json could not be written: {_describe(last)}")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
