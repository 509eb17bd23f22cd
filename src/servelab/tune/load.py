"""The load every trial of a study runs: its own module, so that the study's space and its
objectives and constraints (`targets`) can both read it without importing each other."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from servelab.bench.load import LoadMode

__all__ = ["LoadPlan"]


class LoadPlan(BaseModel):
    """The load every trial runs: closed or open loop levels, each bounded."""

    model_config = ConfigDict(frozen=True)

    mode: LoadMode
    levels: list[float]
    duration_s: float | None
    num_requests: int | None
    warmup: int
    stream: bool = True
    max_load: float | None = None
    """objective capacity: the search's largest load; None: bench.capacity's default."""

    def text(self) -> str:
        what = "concurrency" if self.mode is LoadMode.CONCURRENCY else "request rate"
        levels = ", ".join(f"{v:g}" for v in self.levels)
        if self.max_load is not None:
            levels = f"from {levels} up to {self.max_load:g}"
        bound = (
            f"{self.duration_s:g} s per level"
            if self.duration_s is not None
            else f"{self.num_requests} requests per level"
            if self.num_requests is not None
            else "the default requests per level"
        )
        return f"{what} {levels}; {bound}"
