"""What one decode step of the embedded model costs in plain torch: eager, and as a CUDA graph.

Not a test: run it by hand (on a GPU, or on the CPU with the tiny preset); it prints a
Markdown table and, with --json-out, writes the same numbers as JSON.

    python benchmarks/gpu/decode_step.py --preset h200-ref --json-out decode.json
    .venv/bin/python benchmarks/gpu/decode_step.py --preset tiny --device cpu \
        --batch 1,4 --context 32

The model is `ensure_model(--preset)` loaded with transformers (bf16 on CUDA, float32 on
the CPU). For each batch size a StaticCache of `context + 1` slots is prefilled with
`context` random tokens (in chunks of at most --prefill-chunk-tokens tokens), then one
decode step (one new token per sequence, at position `context`) is timed:

- eager: the model's forward as transformers runs it, one Python call per step;
- graph: the same step captured once with torch.cuda.graph and replayed. When capture
  fails (the eager experts loop syncs with the host) the reason is recorded and, with
  --compile-fallback, torch.compile(mode="reduce-overhead") is tried instead.

Every timed step starts from an idle device with the cache rewound to `context` tokens
(the StaticCache layers' `cumulative_length`), is timed with CUDA events (the wall clock
on the CPU), and the median of --iters steps after --warmup is reported. Each experts
implementation of transformers' MoE integration named in --experts (`grouped_mm` is
transformers' default; `eager` is the per-expert Python loop) is measured on the same cache.

The floor is the memory-bound time of a step: the weight bytes it must read (every dense
weight, the lm_head, one embedding row per sequence, and the experts its tokens were
routed to, counted from the router's choices in an untimed step) plus the KV cache it
reads (`context + 1` slots per sequence and layer), over --bandwidth-gb-s (H200
datasheet by default). A device-to-device copy's bandwidth is measured on CUDA too.
"""

from __future__ import annotations

import argparse
import inspect
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import transformers
from step_clock import elapsed_ms  # beside this script, first on sys.path
from step_graph import capture_graph
from transformers import AutoModelForCausalLM, StaticCache

try:
    from servelab.engines.embedded import ensure_model
except ModuleNotFoundError:  # run from a source tree where servelab is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from servelab.engines.embedded import ensure_model

SCHEMA = "servelab.bench.decode_step/1"
GPU_BATCHES = "1,8,32,64,128,256"
CPU_BATCHES = "1,4"
H200_BANDWIDTH_GB_S = 4800.0
BATCHED_MM_MAX_BYTES = 4 << 30
"""batched_mm gathers each (token, expert) pair's weights; skipped beyond this many bytes."""
ERROR_CHARS = 400


@dataclass
class Weights:
    """The model's weight bytes, split the way a decode step reads them."""

    total: int
    experts: int
    embedding: int
    embedding_row: int
    num_experts: int
    top_k: int
    num_layers: int

    def touched(self, batch: int, experts_per_layer: float) -> float:
        """Bytes a step of `batch` tokens reads when each layer runs `experts_per_layer`."""
        dense = self.total - self.experts - self.embedding
        rows = min(self.embedding, batch * self.embedding_row)
        return dense + rows + self.experts * experts_per_layer / self.num_experts

    def expected_experts(self, batch: int) -> float:
        """Distinct experts per layer if each token picked its top-k uniformly at random."""
        return self.num_experts * (1.0 - (1.0 - self.top_k / self.num_experts) ** batch)


class _KnownFailure(Exception):
    """A capture not tried because it already failed for this experts implementation."""


@dataclass
class Row:
    """One batch size under one experts implementation."""

    batch: int
    experts: str
    eager_ms: float | None = None
    eager_ms_p90: float | None = None
    eager_tok_s: float | None = None
    graph_ms: float | None = None
    graph_ms_p90: float | None = None
    graph_tok_s: float | None = None
    graph_method: str | None = None
    graph_error: str | None = None
    graph_max_abs_diff: float | None = None
    """Largest |logit| difference between a replay and an eager step from the same state."""
    experts_per_layer: float | None = None
    experts_per_layer_source: str | None = None
    weight_bytes_touched: int | None = None
    kv_bytes: int | None = None
    floor_ms: float | None = None
    floor_weights_ms: float | None = None
    floor_copy_bw_ms: float | None = None
    eager_over_floor: float | None = None
    graph_over_floor: float | None = None
    error: str | None = None


def main(argv: list[str] | None = None) -> int:
    """Measure every (batch, experts) pair, print the table, write the JSON; 1 if none ran."""
    args = _parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    dtype = _dtype(args.dtype, device)
    batches = _int_list(args.batch or (GPU_BATCHES if device.type == "cuda" else CPU_BATCHES))
    implementations = [name.strip() for name in args.experts.split(",") if name.strip()]
    if device.type == "cuda":
        torch.cuda.set_device(device)

    began = time.perf_counter()
    path = ensure_model(args.preset)
    _log(f"model {path} ({time.perf_counter() - began:.1f} s)")
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation=args.attn
    ).to(device)
    model.eval()
    _log(f"loaded on {device} as {dtype} ({time.perf_counter() - started:.1f} s)")
    weights = _weights(model)
    default_experts = model.config._experts_implementation  # transformers' choice: prefills
    copy_bw = _copy_bandwidth_gb_s(device) if device.type == "cuda" else None
    meta = _meta(args, device, dtype, path, weights, copy_bw, model)

    rows: list[Row] = []
    capture_failures: dict[str, str] = {}
    started = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            rows.extend(
                _measure_batch(
                    model,
                    weights,
                    batch,
                    implementations,
                    default_experts,
                    args,
                    device,
                    copy_bw,
                    capture_failures,
                )
            )
            _free(device)
    meta["measure_s"] = round(time.perf_counter() - started, 1)
    meta["wall_s"] = round(time.perf_counter() - began, 1)
    print(_markdown(meta, rows))
    if args.json_out:
        document = {**meta, "rows": [asdict(row) for row in rows]}
        Path(args.json_out).write_text(json.dumps(document, indent=1) + "\n")
        _log(f"wrote {args.json_out}")
    return 0 if any(row.eager_ms is not None for row in rows) else 1


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="h200-ref", help="embedded preset (tiny, h200-ref)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="auto", help="auto: bfloat16 on CUDA, float32 else")
    parser.add_argument(
        "--batch",
        help=f"comma-separated batch sizes (default {GPU_BATCHES} on CUDA, else {CPU_BATCHES})",
    )
    parser.add_argument("--context", type=int, default=640, help="tokens already in the cache")
    parser.add_argument(
        "--experts",
        default="grouped_mm,eager",
        help="comma-separated experts implementations (eager, grouped_mm, batched_mm, ...)",
    )
    parser.add_argument("--attn", default="sdpa", help="attention implementation")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30, help="timed steps per measurement")
    parser.add_argument("--bandwidth-gb-s", type=float, default=H200_BANDWIDTH_GB_S)
    parser.add_argument(
        "--prefill-chunk-tokens",
        type=int,
        default=16384,
        help="at most batch x chunk tokens per prefill forward",
    )
    parser.add_argument("--no-graph", action="store_true", help="eager steps only")
    parser.add_argument(
        "--compile-fallback",
        action="store_true",
        help='when capture fails, try torch.compile(mode="reduce-overhead") (slow to compile)',
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out", help="write the results here as JSON")
    parser.add_argument(
        "--trace-dir",
        help="also profile --trace-steps eager steps and graph replays with torch.profiler;"
        " the Chrome traces (gz) go here, named by batch and mode, for `servelab trace`",
    )
    parser.add_argument("--trace-steps", type=int, default=10)
    args = parser.parse_args(argv)
    if args.context < 1 or args.iters < 1 or args.warmup < 0 or args.prefill_chunk_tokens < 1:
        parser.error("--context, --iters and --prefill-chunk-tokens must be positive")
    return args


def _measure_batch(
    model: Any,
    weights: Weights,
    batch: int,
    implementations: list[str],
    prefill_experts: str,
    args: argparse.Namespace,
    device: torch.device,
    copy_bw: float | None,
    capture_failures: dict[str, str],
) -> list[Row]:
    """Prefill one cache of `batch` sequences, then measure each experts implementation."""
    rows = [Row(batch=batch, experts=name) for name in implementations]
    started = time.perf_counter()
    cache = None
    try:
        _set_experts(model, prefill_experts)
        cache = StaticCache(config=model.config, max_cache_len=args.context + 1)
        _prefill(model, cache, batch, args, device)
        kv_bytes = _kv_bytes(cache)
    except Exception as exc:  # OOM at a large batch, an API change, ...: keep the others
        for row in rows:
            row.error = f"prefill: {_describe(exc)}"
        _log(f"batch {batch}: prefill failed: {_describe(exc)}")
        return rows
    _log(f"batch {batch}: prefilled {args.context} tokens ({time.perf_counter() - started:.1f} s)")

    generator = torch.Generator().manual_seed(args.seed + batch)
    vocab = model.config.vocab_size
    ids = torch.randint(vocab, (batch, 1), generator=generator).to(device)
    positions = torch.full((batch, 1), args.context, dtype=torch.long, device=device)
    kwargs: dict[str, Any] = {
        "input_ids": ids,
        "position_ids": positions,
        _cache_keyword(model): cache,
        "use_cache": True,
    }
    if "cache_position" in inspect.signature(model.forward).parameters:  # transformers < 5
        kwargs["cache_position"] = torch.tensor([args.context], device=device)

    def rewind() -> None:
        _rewind(cache, args.context)

    def step() -> torch.Tensor:
        return model(**kwargs).logits

    for row in rows:
        try:
            _measure_one(
                row, model, weights, step, rewind, args, device, kv_bytes, copy_bw, capture_failures
            )
        except Exception as exc:
            row.error = _describe(exc)
            _log(f"batch {batch} experts={row.experts}: {row.error}")
        _free(device)
    return rows  # the cache goes with this frame; the caller empties the allocator's cache


def _measure_one(
    row: Row,
    model: Any,
    weights: Weights,
    step: Callable[[], torch.Tensor],
    rewind: Callable[[], None],
    args: argparse.Namespace,
    device: torch.device,
    kv_bytes: int,
    copy_bw: float | None,
    capture_failures: dict[str, str],
) -> None:
    """Fill `row`: experts touched, the floor, eager timing, then graph timing.

    A capture that failed for an experts implementation is not tried again at larger
    batches (a failed capture is the one thing here that could leave the device unwell).
    """
    batch = row.batch
    if row.experts == "batched_mm":
        per_expert = weights.experts / (weights.num_experts * weights.num_layers)
        gathered = batch * weights.top_k * per_expert
        if gathered > BATCHED_MM_MAX_BYTES:
            row.error = f"skipped: batched_mm would gather {gathered / 1e9:.1f} GB of weights"
            return
    _set_experts(model, row.experts)

    rewind()
    counted = _count_experts(model, step)
    if counted is None:
        row.experts_per_layer = weights.expected_experts(batch)
        row.experts_per_layer_source = "expected (uniform routing)"
    else:
        row.experts_per_layer = counted
        row.experts_per_layer_source = "measured (router choices)"
    touched = weights.touched(batch, row.experts_per_layer)
    row.weight_bytes_touched = round(touched)
    row.kv_bytes = kv_bytes
    row.floor_weights_ms = touched / (args.bandwidth_gb_s * 1e9) * 1e3
    row.floor_ms = (touched + kv_bytes) / (args.bandwidth_gb_s * 1e9) * 1e3
    if copy_bw:
        row.floor_copy_bw_ms = (touched + kv_bytes) / (copy_bw * 1e9) * 1e3

    times = _time_steps(step, rewind, device, args.warmup, args.iters)
    _trace(step, rewind, device, args, f"b{batch}-{row.experts}-eager")
    row.eager_ms, row.eager_ms_p90 = _median_p90(times)
    row.eager_tok_s = batch / row.eager_ms * 1e3
    row.eager_over_floor = row.eager_ms / row.floor_ms
    _log(f"batch {batch} experts={row.experts}: eager {row.eager_ms:.3f} ms")

    if args.no_graph:
        row.graph_error = "not requested (--no-graph)"
        return
    if device.type != "cuda":
        row.graph_error = f"CUDA graphs need a CUDA device; this run is on {device.type}"
        return
    try:
        if row.experts in capture_failures:
            raise _KnownFailure(capture_failures[row.experts])
        replay = capture_graph(step, device, warmup=args.warmup, rewind=rewind)
        row.graph_method = "torch.cuda.graph"
    except Exception as exc:
        if isinstance(exc, _KnownFailure):
            row.graph_error = str(exc)
        else:
            row.graph_error = f"capture failed: {_describe(exc)}"
            capture_failures[row.experts] = f"capture not tried again (it failed at batch {batch})"
            _log(f"batch {batch} experts={row.experts}: {row.graph_error}")
            _recover(device)
        if not args.compile_fallback:
            return
        try:
            replay = _compiled(step, rewind, device, args.warmup)
            row.graph_method = 'torch.compile(mode="reduce-overhead")'
        except Exception as compile_exc:
            row.graph_error += f"; torch.compile failed: {_describe(compile_exc)}"
            _recover(device)
            return

    rewind()
    expected = step().float()
    rewind()
    row.graph_max_abs_diff = float((replay().float() - expected).abs().max())
    times = _time_steps(replay, rewind, device, args.warmup, args.iters)
    _trace(replay, rewind, device, args, f"b{batch}-{row.experts}-graph")
    row.graph_ms, row.graph_ms_p90 = _median_p90(times)
    row.graph_tok_s = batch / row.graph_ms * 1e3
    row.graph_over_floor = row.graph_ms / row.floor_ms
    _log(f"batch {batch} experts={row.experts}: graph {row.graph_ms:.3f} ms")


def _prefill(
    model: Any, cache: Any, batch: int, args: argparse.Namespace, device: torch.device
) -> None:
    """Write `context` random tokens per sequence into `cache`, in chunks."""
    generator = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(model.config.vocab_size, (batch, args.context), generator=generator)
    ids = ids.to(device)
    chunk = max(1, min(args.context, args.prefill_chunk_tokens // batch))
    keyword = _cache_keyword(model)
    for start in range(0, args.context, chunk):
        stop = min(args.context, start + chunk)
        positions = torch.arange(start, stop, device=device).unsqueeze(0).expand(batch, -1)
        model(
            input_ids=ids[:, start:stop],
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{keyword: cache},
        )
    _synchronize(device)
    length = _cache_length(cache)
    if length != args.context:
        raise RuntimeError(f"the cache holds {length} tokens after prefill, not {args.context}")


def _trace(
    step: Callable[[], torch.Tensor],
    rewind: Callable[[], None],
    device: torch.device,
    args: argparse.Namespace,
    name: str,
) -> None:
    """`args.trace_steps` steps under torch.profiler (CPU and CUDA), as DIR/NAME.pt.trace
    .json.gz: the same kernels eager and replayed, for their busy share and time."""
    if not args.trace_dir or args.trace_steps < 1:
        return
    import gzip
    import shutil

    from torch.profiler import ProfilerActivity, profile

    folder = Path(args.trace_dir)
    folder.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(args.trace_steps):
            rewind()
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    plain = folder / f"{name}.pt.trace.json"
    prof.export_chrome_trace(str(plain))
    with plain.open("rb") as source, gzip.open(f"{plain}.gz", "wb") as target:
        shutil.copyfileobj(source, target)
    plain.unlink()
    _log(f"{name}: {args.trace_steps} steps traced")


def _compiled(
    step: Callable[[], torch.Tensor],
    rewind: Callable[[], None],
    device: torch.device,
    warmup: int,
) -> Callable[[], torch.Tensor]:
    """torch.compile(mode="reduce-overhead") of `step`, compiled and recorded by warm-up."""
    torch._dynamo.reset()
    compiled = torch.compile(step, mode="reduce-overhead", dynamic=False)

    def run() -> torch.Tensor:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled()

    for _ in range(max(warmup, 3)):
        rewind()
        run()
    _synchronize(device)
    return run


def _time_steps(
    run: Callable[[], object],
    rewind: Callable[[], None],
    device: torch.device,
    warmup: int,
    iters: int,
) -> list[float]:
    """Milliseconds of `iters` calls of `run`, each from an idle device and a rewound cache."""
    for _ in range(warmup):
        rewind()
        run()
    times: list[float] = []
    for _ in range(iters):
        rewind()
        _synchronize(device)
        times.append(elapsed_ms(run, device))
    return times


def _count_experts(model: Any, step: Callable[[], torch.Tensor]) -> float | None:
    """Mean distinct experts per MoE layer in one step, from the routers' top-k indices."""
    counts: list[int] = []

    def hook(module: Any, inputs: Any, output: Any) -> None:
        indices = output[-1] if isinstance(output, tuple) else None
        if isinstance(indices, torch.Tensor) and not indices.is_floating_point():
            counts.append(int(torch.unique(indices).numel()))

    handles = []
    for layer in getattr(getattr(model, "model", None), "layers", []):
        gate = getattr(getattr(layer, "mlp", None), "gate", None)
        if isinstance(gate, torch.nn.Module):
            handles.append(gate.register_forward_hook(hook))
    try:
        step()
    finally:
        for handle in handles:
            handle.remove()
    return statistics.fmean(counts) if counts else None


def _weights(model: Any) -> Weights:
    """Split the parameters' bytes into experts, embedding and the rest."""
    config = model.config
    total = experts = embedding = embedding_row = 0
    for name, parameter in model.named_parameters():
        size = parameter.numel() * parameter.element_size()
        total += size
        if ".experts." in name or name.endswith(".experts"):
            experts += size
        elif "embed_tokens" in name:
            embedding += size
            embedding_row = parameter.shape[-1] * parameter.element_size()
    return Weights(
        total=total,
        experts=experts,
        embedding=embedding,
        embedding_row=embedding_row,
        num_experts=config.num_experts,
        top_k=config.num_experts_per_tok,
        num_layers=config.num_hidden_layers,
    )


def _kv_bytes(cache: Any) -> int:
    """Bytes of keys and values a decode step's attention reads: every slot of every layer."""
    total = 0
    for layer in cache.layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def _cache_length(cache: Any) -> int:
    return int(cache.get_seq_length())


def _rewind(cache: Any, length: int) -> None:
    """Make every static layer hold `length` tokens again, in place (graph-safe addresses)."""
    for layer in cache.layers:
        cumulative = getattr(layer, "cumulative_length", None)
        if not isinstance(cumulative, torch.Tensor):
            raise RuntimeError(
                f"{type(layer).__name__} has no cumulative_length tensor: this transformers "
                "version's StaticCache is not supported"
            )
        cumulative.fill_(length)


def _cache_keyword(model: Any) -> str:
    """`cache` in transformers >= 5.24 (`past_key_values` deprecated), else `past_key_values`."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _set_experts(model: Any, name: str) -> None:
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(name)
    else:
        model.config._experts_implementation = name
    actual = getattr(model.config, "_experts_implementation", name)
    if actual != name:
        raise RuntimeError(f"experts implementation {name!r} was not applied (got {actual!r})")


def _copy_bandwidth_gb_s(device: torch.device) -> float | None:
    """Device-to-device copy bandwidth (bytes read + written), median of 10 copies."""
    try:
        free, _ = torch.cuda.mem_get_info(device)
        size = min(1 << 30, free // 8)
        source = torch.empty(size, dtype=torch.uint8, device=device)
        target = torch.empty_like(source)
        target.copy_(source)
        times = []
        for _ in range(10):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            target.copy_(source)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        del source, target
        _free(device)
        return 2 * size / (statistics.median(times) * 1e-3) / 1e9
    except Exception as exc:
        _log(f"copy bandwidth not measured: {_describe(exc)}")
        return None


def _meta(
    args: argparse.Namespace,
    device: torch.device,
    dtype: torch.dtype,
    path: Path,
    weights: Weights,
    copy_bw: float | None,
    model: Any,
) -> dict[str, Any]:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        capability = ".".join(map(str, torch.cuda.get_device_capability(device)))
    else:
        name, capability = platform.processor() or platform.machine(), None
    return {
        "schema": SCHEMA,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "preset": args.preset,
        "model_dir": str(path),
        "device": str(device),
        "device_name": name,
        "compute_capability": capability,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "dtype": str(dtype).removeprefix("torch."),
        "attn_implementation": model.config._attn_implementation,
        "default_experts_implementation": model.config._experts_implementation,
        "context": args.context,
        "warmup": args.warmup,
        "iters": args.iters,
        "parameters": sum(p.numel() for p in model.parameters()),
        "weight_bytes": weights.total,
        "expert_weight_bytes": weights.experts,
        "num_experts": weights.num_experts,
        "experts_per_token": weights.top_k,
        "bandwidth_gb_s": args.bandwidth_gb_s,
        "copy_bandwidth_gb_s": round(copy_bw, 1) if copy_bw else None,
    }


def _markdown(meta: dict[str, Any], rows: list[Row]) -> str:
    copy = meta["copy_bandwidth_gb_s"]
    lines = [
        f"# decode step, {meta['preset']}, {meta['device_name']} ({meta['device']}), "
        f"{meta['created']}",
        "",
        f"torch {meta['torch']} (CUDA {meta['cuda']}), transformers {meta['transformers']}, "
        f"Python {meta['python']}; {meta['dtype']}, attention {meta['attn_implementation']}",
        f"{_si(meta['parameters'])} parameters, {_si(meta['weight_bytes'])}B of "
        f"weights ({_si(meta['expert_weight_bytes'])}B in experts: "
        f"{meta['num_experts']} per layer, top-{meta['experts_per_token']}); context "
        f"{meta['context']} tokens; median of {meta['iters']} steps after {meta['warmup']}",
        f"floor = (weights touched + KV cache read) / {meta['bandwidth_gb_s']:g} GB/s"
        + (f" (measured device copy: {copy:g} GB/s)" if copy else ""),
        "",
        "| batch | experts | eager ms | graph ms | eager tok/s | graph tok/s "
        "| experts/layer | bytes read | floor ms | eager/floor | graph/floor |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        read = (
            _si(row.weight_bytes_touched + row.kv_bytes) + "B"
            if row.weight_bytes_touched is not None and row.kv_bytes is not None
            else "-"
        )
        cells = [
            str(row.batch),
            row.experts,
            _fmt(row.eager_ms, 3),
            _fmt(row.graph_ms, 3),
            _fmt(row.eager_tok_s, 0),
            _fmt(row.graph_tok_s, 0),
            _fmt(row.experts_per_layer, 1),
            read,
            _fmt_sig(row.floor_ms),
            _fmt(row.eager_over_floor, 1),
            _fmt(row.graph_over_floor, 1),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    notes: dict[str, list[str]] = {}
    for row in rows:
        where = f"{row.batch} ({row.experts})"
        if row.error:
            notes.setdefault(row.error, []).append(where)
        elif row.graph_error:
            notes.setdefault(f"graph: {row.graph_error}", []).append(where)
        if row.graph_method and row.graph_method != "torch.cuda.graph":
            notes.setdefault(f"graph column measured with {row.graph_method}", []).append(where)
        if row.graph_max_abs_diff:
            diff = f"replay's logits differ from eager's by {row.graph_max_abs_diff:.3g}"
            notes.setdefault(diff, []).append(where)
    if notes:
        lines.append("")
        lines += [f"- {message}: batch {', '.join(where)}" for message, where in notes.items()]
    lines += ["", f"measured in {meta['measure_s']} s ({meta['wall_s']} s with loading)"]
    return "\n".join(lines)


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _fmt_sig(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _si(value: float) -> str:
    """`value` with a decimal prefix and 3 significant digits: 2.6 G, 412 k."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}"
    return f"{value:.3g} "


def _median_p90(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def _dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise SystemExit(f"unknown dtype {name!r}")
    return dtype


def _int_list(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise SystemExit(f"batch sizes must be positive integers: {text!r}")
    return values


def _describe(exc: BaseException) -> str:
    """The error's type and first line, and the one it replaced (capture_end hides the cause)."""
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    cause = exc.__cause__ or exc.__context__
    if cause is not None:
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        text += f" (after {type(cause).__name__}: {first})"
    return text[:ERROR_CHARS]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _recover(device: torch.device) -> None:
    """After a failed capture: wait for the device and drop what the capture allocated."""
    try:
        _synchronize(device)
    except Exception as exc:
        _log(f"device not usable after the failed capture: {_describe(exc)}")
        raise
    _free(device)


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
