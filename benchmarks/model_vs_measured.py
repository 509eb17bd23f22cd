"""How far measured decode steps sit below `servelab model`'s ceiling.

Not a test (pytest does not collect it): run it by hand; it prints one Markdown table.

    python benchmarks/model_vs_measured.py

The model is an upper bound: each row divides the model's step time by the measured one
(1.0 = at the ceiling). Measurements: the embedded engine's h200-ref preset on one H200
(served by transformers serve, and one decode step in plain torch, eager and as a CUDA
graph, from benchmarks/gpu/results/), and public figures from engine documentation
(cited per row; none with speculative decoding). Each is modelled with datasheet peaks
and, for the H200 rows, also calibrated with the probe's measured bandwidth and rates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from servelab.model import decode_step_s, deploy, prefill_s

RESULTS = Path(__file__).resolve().parent / "gpu" / "results"
PROBE = RESULTS / "h200-probe" / "probe-comm.json"


@dataclass(frozen=True)
class Row:
    what: str
    source: str
    measured_ms: float
    model_ms: float
    calibrated_ms: float | None = None


def main() -> None:
    rows = _h200_ref_rows() + _public_rows()
    print(
        "| measurement | source | measured ms/step | model ms/step (datasheet) | model / measured"
        " | calibrated model ms | calibrated / measured |"
    )
    print("|---" * 7 + "|")
    for row in rows:
        calibrated = (
            f"{row.calibrated_ms:.3f} | {row.calibrated_ms / row.measured_ms:.3f}"
            if row.calibrated_ms is not None
            else "- | -"
        )
        print(
            f"| {row.what} | {row.source} | {row.measured_ms:.3f} | {row.model_ms:.3f}"
            f" | {row.model_ms / row.measured_ms:.3f} | {calibrated} |"
        )


def _h200_ref_rows() -> list[Row]:
    datasheet = deploy("h200-ref", gpu="h200", tp=1)
    calibrated = deploy("h200-ref", gpu="h200", tp=1, calibration=PROBE)
    steps = json.loads((RESULTS / "h200-decode-step" / "decode-step.json").read_text())
    context = steps["context"]
    serve = json.loads((RESULTS / "h200-embedded-run" / "summary.json").read_text())
    single = next(level for level in serve["levels"] if level["max_concurrency"] == 1)
    rows = [
        Row(
            what="h200-ref, transformers serve, concurrency 1 (mean TPOT, 512 in / 128 out)",
            source="gpu/results/h200-embedded-run",
            measured_ms=single["mean_tpot_ms"],
            model_ms=decode_step_s(datasheet, 1, 512 + 64) * 1e3,
            calibrated_ms=decode_step_s(calibrated, 1, 512 + 64) * 1e3,
        )
    ]
    for step in steps["rows"]:
        if step["experts"] != "grouped_mm" or step["error"]:
            continue
        batch = step["batch"]
        model_ms = decode_step_s(datasheet, batch, context) * 1e3
        calibrated_ms = decode_step_s(calibrated, batch, context) * 1e3
        for kind in ("eager", "graph"):
            if step[f"{kind}_ms"] is None:
                continue
            rows.append(
                Row(
                    what=f"h200-ref, plain torch {kind}, batch {batch}, context {context}",
                    source="gpu/results/h200-decode-step",
                    measured_ms=step[f"{kind}_ms"],
                    model_ms=model_ms,
                    calibrated_ms=calibrated_ms,
                )
            )
    return rows


def _public_rows() -> list[Row]:
    nim = deploy("llama-3.1-70b", gpu="h100", tp=2, weights="fp8")
    vllm_8b = deploy("llama-3.1-8b", gpu="h200", tp=1)
    vllm_70b = deploy("llama-3.1-70b", gpu="h200", tp=4)
    return [
        Row(
            what="Llama-3.3-70B fp8, 2x H100 TP2, NIM 1.8.0, concurrency 1, 5000 in / 500 out"
            " (ITL)",
            source="NVIDIA NIM LLM benchmarking guide, Performance (docs.nvidia.com/nim/"
            "benchmarking/llm/1.0.0/performance)",
            measured_ms=18.58,
            model_ms=decode_step_s(nim, 1, 5000 + 250) * 1e3,
        ),
        Row(
            what="Llama-3.1-8B bf16, 1x H200, vLLM, batch 8, 32 in / 128 out"
            " (request latency / 128)",
            source="vLLM performance benchmark CI, latency_llama8B_tp1, mean 833.42 ms"
            " (buildkite.com/vllm/performance-benchmark/builds/9515)",
            measured_ms=833.42 / 128,
            model_ms=_per_output_token_ms(vllm_8b, batch=8, input_len=32, output_len=128),
        ),
        Row(
            what="Llama-3-70B bf16, 4x H200 TP4, vLLM, batch 8, 32 in / 128 out"
            " (request latency / 128)",
            source="vLLM performance benchmark CI, latency_llama70B_tp4, mean 2077.53 ms"
            " (same build)",
            measured_ms=2077.53 / 128,
            model_ms=_per_output_token_ms(vllm_70b, batch=8, input_len=32, output_len=128),
        ),
    ]


def _per_output_token_ms(dep: object, *, batch: int, input_len: int, output_len: int) -> float:
    """A whole request's latency over its output tokens: prefill once, then every step."""
    prefill = prefill_s(dep, input_len * batch, requests=batch)  # type: ignore[arg-type]
    steps = sum(
        decode_step_s(dep, batch, input_len + k)  # type: ignore[arg-type]
        for k in range(1, output_len)
    )
    return (prefill + steps) / output_len * 1e3


if __name__ == "__main__":
    main()
