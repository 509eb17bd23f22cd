"""Load levels and open-loop arrival schedules.

Open-loop inter-arrival times are gamma distributed with shape `burstiness` and mean
1/rate (shape 1 is a Poisson process), the convention SGLang and vLLM use, unless the
level carries its own arrivals (a trace's timestamps, bench.traces). Arrivals are
offsets from a level's start and are sent at those absolute times, so a late send
never delays the ones after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from servelab.core.units import NS_PER_S

__all__ = ["LevelSpec", "LoadMode", "arrival_offsets_ns"]


class LoadMode(StrEnum):
    CONCURRENCY = "concurrency"
    REQUEST_RATE = "request_rate"


@dataclass(frozen=True, slots=True)
class LevelSpec:
    """One load level of a sweep."""

    index: int
    mode: LoadMode
    value: float
    """Concurrency (closed loop) or requests/s (open loop)."""
    num_requests: int | None
    """Requests to measure; None when the level runs for `duration_s`."""
    duration_s: float | None
    warmup: int
    burstiness: float = 1.0
    arrivals_ns: tuple[int, ...] | None = None
    """Open loop: planned send times after the level's start (a trace replay's), in place
    of gamma-distributed ones; `value` is then their mean rate."""

    def __post_init__(self) -> None:
        if self.arrivals_ns is not None and self.mode is not LoadMode.REQUEST_RATE:
            raise ValueError("a level with its own arrivals is open loop (LoadMode.REQUEST_RATE)")

    @property
    def concurrency(self) -> int | None:
        return int(self.value) if self.mode is LoadMode.CONCURRENCY else None

    @property
    def rate(self) -> float | None:
        return self.value if self.mode is LoadMode.REQUEST_RATE else None

    @property
    def gamma_shape(self) -> float | None:
        """The burstiness of drawn arrivals; None in closed loop and for a trace's own."""
        drawn = self.mode is LoadMode.REQUEST_RATE and self.arrivals_ns is None
        return self.burstiness if drawn else None

    @property
    def label(self) -> str:
        if self.mode is LoadMode.CONCURRENCY:
            return f"concurrency {int(self.value)}"
        if self.arrivals_ns is not None:
            return f"trace replay, mean {self.value:.3g}/s"
        return f"rate {self.value:g}/s"


def arrival_offsets_ns(
    rate: float,
    *,
    burstiness: float,
    seed: int,
    count: int | None = None,
    duration_s: float | None = None,
) -> list[int]:
    """Arrival times (ns after the level starts) of `count` requests or all within `duration_s`.

    The first request goes at 0; each later one after a gamma-distributed gap.
    """
    if count is None and duration_s is None:
        raise ValueError("arrival_offsets_ns needs count or duration_s")
    rng = np.random.default_rng(seed)
    scale = 1.0 / (rate * burstiness)
    offsets: list[int] = [0]
    t = 0.0
    while True:
        if count is not None and len(offsets) >= count:
            break
        t += float(rng.gamma(burstiness, scale))
        if duration_s is not None and t >= duration_s:
            break
        offsets.append(int(t * NS_PER_S))
    return offsets
