"""Engine steps in a trace, found by the annotations the engines write around each step.

Recognised, in this order of preference (the first that occurs in a trace is used):

- vLLM (v1 worker, `Worker.annotate_profile` in vllm/v1/worker/gpu_worker.py, which the
  CPU worker inherits): one `record_function` per `execute_model` named
  `execute_context_{requests}({tokens})_generation_{requests}({tokens})`, or with
  `detailed_trace_annotation` `execute_{tokens}_context_{requests}(sq..)_generation_...`.
  Context requests are prefills (a chunk of chunked prefill counts as one); generation
  requests are decodes; a step with both is mixed.
- SGLang (`ModelRunner.forward` in python/sglang/srt/model_executor/model_runner.py, the
  name built by `build_step_span_name` in python/sglang/srt/utils/profile_utils.py):
  `step[{ForwardMode} bs={batch} ...]`. EXTEND, SPLIT_PREFILL and DLLM_EXTEND are
  prefills, DECODE and TARGET_VERIFY (speculative decoding's verify) decodes, MIXED mixed,
  the rest (IDLE, PREBUILT, DRAFT_EXTEND_V2) other; a draft model's `draft step[...]`
  is not an engine step.
- torch's profiler schedule: `ProfilerStep#{n}`, one per `profiler.step()`.

A caller's own pattern comes first when given; its steps are prefill or decode when the
name says so (prefill, extend; decode), else other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from servelab.core.errors import ConfigError
from servelab.trace.results import StepSource, StepStats

__all__ = ["MARKERS", "StepCounter", "StepKind", "StepMarker", "custom_marker"]


class StepKind(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"
    OTHER = "other"


@dataclass(frozen=True)
class StepMarker:
    """One engine's step annotation: its name pattern and how a name tells the step's kind."""

    source: StepSource
    label: str
    pattern: re.Pattern[str]
    kind: Callable[[re.Match[str]], StepKind]


def _vllm_kind(match: re.Match[str]) -> StepKind:
    return _split(int(match["context"]) > 0, int(match["generation"]) > 0)


_SGLANG_KINDS = {
    "EXTEND": StepKind.PREFILL,
    "SPLIT_PREFILL": StepKind.PREFILL,
    "DLLM_EXTEND": StepKind.PREFILL,
    "DECODE": StepKind.DECODE,
    "TARGET_VERIFY": StepKind.DECODE,
    "MIXED": StepKind.MIXED,
}


def _sglang_kind(match: re.Match[str]) -> StepKind:
    return _SGLANG_KINDS.get(match["mode"], StepKind.OTHER)


def _named_kind(match: re.Match[str]) -> StepKind:
    name = match.string.lower()
    return _split("prefill" in name or "extend" in name, "decode" in name)


def _split(prefill: bool, decode: bool) -> StepKind:
    if prefill and decode:
        return StepKind.MIXED
    if prefill:
        return StepKind.PREFILL
    return StepKind.DECODE if decode else StepKind.OTHER


MARKERS: tuple[StepMarker, ...] = (
    StepMarker(
        source="vllm",
        label="vLLM execute_context_N(T)_generation_M(U)",
        pattern=re.compile(
            r"^execute_(?:\d+_)?context_(?P<context>\d+)\(.*?\)_generation_(?P<generation>\d+)\("
        ),
        kind=_vllm_kind,
    ),
    StepMarker(
        source="sglang",
        label="SGLang step[MODE bs=N]",
        pattern=re.compile(r"^step\[(?P<mode>[A-Z][A-Z0-9_]*) bs=\d+"),
        kind=_sglang_kind,
    ),
    StepMarker(
        source="profiler",
        label="torch profiler ProfilerStep#N",
        pattern=re.compile(r"^ProfilerStep#\d+$"),
        kind=lambda _match: StepKind.OTHER,
    ),
)


def custom_marker(pattern: str) -> StepMarker:
    """A caller's step annotation, as a regular expression searched in event names."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"step marker {pattern!r} is not a regular expression: {exc}") from exc
    return StepMarker(source="custom", label=f"/{pattern}/", pattern=compiled, kind=_named_kind)


@dataclass
class _Tally:
    counts: dict[StepKind, int] = field(default_factory=dict)
    total_us: dict[StepKind, float] = field(default_factory=dict)

    def add(self, kind: StepKind, dur_us: float) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.total_us[kind] = self.total_us.get(kind, 0.0) + dur_us


class StepCounter:
    """Counts every marker's steps while events stream by; `result` keeps the preferred one."""

    def __init__(self, custom: str | None = None) -> None:
        self.markers = (custom_marker(custom), *MARKERS) if custom is not None else MARKERS
        self._tallies: dict[str, _Tally] = {}

    def see(self, name: str, dur_us: float) -> None:
        """Count `name` if it is a step marker (an annotation's or an op's name)."""
        for marker in self.markers:
            match = marker.pattern.search(name)
            if match is not None:
                self._tallies.setdefault(marker.source, _Tally()).add(marker.kind(match), dur_us)
                return

    def result(self) -> StepStats | None:
        """The steps of the most preferred marker found, or None when there is none."""
        for marker in self.markers:
            tally = self._tallies.get(marker.source)
            if tally is None:
                continue
            count = sum(tally.counts.values())
            total = sum(tally.total_us.values())
            return StepStats(
                source=marker.source,
                marker=marker.label,
                count=count,
                prefill=tally.counts.get(StepKind.PREFILL, 0),
                decode=tally.counts.get(StepKind.DECODE, 0),
                mixed=tally.counts.get(StepKind.MIXED, 0),
                other=tally.counts.get(StepKind.OTHER, 0),
                mean_us=total / count,
                prefill_mean_us=_mean(tally, StepKind.PREFILL),
                decode_mean_us=_mean(tally, StepKind.DECODE),
            )
        return None


def _mean(tally: _Tally, kind: StepKind) -> float | None:
    count = tally.counts.get(kind, 0)
    return tally.total_us[kind] / count if count else None
