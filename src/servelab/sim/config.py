"""The simulator's settings: one keyword-only value object built by `servelab sim`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_ITL_MS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MODEL",
    "DEFAULT_PORT",
    "DEFAULT_TTFT_MS",
    "MAX_MODEL_LEN",
    "SimConfig",
]

DEFAULT_PORT = 8000
DEFAULT_MODEL = "servelab-sim"
DEFAULT_TTFT_MS = 50.0
DEFAULT_ITL_MS = 20.0
DEFAULT_MAX_TOKENS = 16
"""Output tokens when a request sets neither max_tokens nor max_completion_tokens."""
MAX_MODEL_LEN = 131_072
"""Context length the simulator reports in /tokenize and /v1/models."""


class SimConfig(BaseModel):
    """How the simulated engine answers: timings, response shape and injected faults.

    Timing is fixed: the first text chunk of a request is due `ttft_ms` after the request
    is received and each further chunk `itl_ms` after the previous one's due time.
    Fault rates are per-request probabilities; at most one fault hits a request, so
    their sum must not exceed 1. `workers > 1` runs that many processes on one port
    (see `servelab.sim.process`); one process sends about 50k chunks/s on one core.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535, description="0 picks a free port.")
    model: str = Field(default=DEFAULT_MODEL, description="The one model name served.")
    ttft_ms: float = Field(
        default=DEFAULT_TTFT_MS, ge=0, description="Request received to first text chunk sent."
    )
    itl_ms: float = Field(default=DEFAULT_ITL_MS, ge=0, description="Between text chunks.")
    tokens_per_chunk: int = Field(default=1, ge=1, description="Output tokens per text chunk.")
    reasoning_tokens: int = Field(
        default=0, ge=0, description="Leading output tokens sent as reasoning_content (chat)."
    )
    send_usage: bool = Field(
        default=True,
        description="Report usage: on request in streams, always in non-streaming answers.",
    )
    role_chunk: bool = Field(
        default=True, description="Start chat streams with a role-only chunk, like vLLM."
    )
    reject_fields: list[str] = Field(
        default_factory=list, description="Request fields answered with 422, like transformers."
    )
    fail_rate: float = Field(default=0.0, ge=0, le=1, description="Share answered with 500.")
    drop_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share of streams cut off mid-body."
    )
    malformed_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share of streams with one broken SSE event."
    )
    stall_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share that stop sending but stay open."
    )
    seed: int = Field(default=0, description="Seeds the fault decisions.")
    record_path: Path | None = Field(
        default=None, description="Truth log (JSONL); with workers > 1 one file per worker."
    )
    workers: int = Field(
        default=1, ge=1, description="Processes sharing the port through SO_REUSEPORT."
    )

    @model_validator(mode="after")
    def _fault_rates_fit(self) -> SimConfig:
        total = self.fail_rate + self.drop_rate + self.malformed_rate + self.stall_rate
        if total > 1.0 + 1e-9:
            raise ValueError(
                f"fault rates add up to {total:g}; fail, drop, malformed and stall rates"
                " together must be at most 1"
            )
        return self
