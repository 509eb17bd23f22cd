"""What one tensor-parallel decode step of the embedded model costs, and how much is comm.

Not a test: run it by hand (on a multi-GPU machine, or on the CPU with the tiny preset);
it prints a Markdown table and, with --json-out, writes the same numbers as JSON.

    python benchmarks/gpu/tp_step.py --preset h200-ref --tp 1,2,4,8 --json-out tp.json
    NCCL_P2P_DISABLE=1 python benchmarks/gpu/tp_step.py --preset h200-ref --tp 2,4,8
    .venv/bin/python benchmarks/gpu/tp_step.py --preset tiny --device cpu --tp 1,2

The model is the embedded preset's Qwen3-MoE shapes (`get_preset`) written in plain torch,
with random weights: each tensor is drawn whole from a generator seeded by its name and
then sliced, so every rank and every tp size holds slices of the same model. The script
spawns --tp processes itself (torch.multiprocessing; gloo on the CPU, NCCL on CUDA, a free
port on 127.0.0.1), once per tp size. Sharding:

- embedding: vocab-parallel; each rank holds a 1/tp slice of the vocabulary's rows, looks
  up the ids in its slice, gives zeros for the others, and an all-reduce sums the ranks'
  rows (exactly one of them is not zero);
- attention: query heads split over the ranks; KV heads split while tp <= KV heads, else
  each rank holds the one KV head its query heads use (replicated tp / KV-heads times);
  QKV column-parallel, the output projection row-parallel, then an all-reduce;
- experts, `--experts tp`: every expert's intermediate dimension split (gate/up columns,
  down rows), then an all-reduce;
- experts, `--experts ep`: whole experts split by rank; each rank owns a 1/tp slice of the
  tokens, sends each token's row to the experts it was routed to (all_to_all_single),
  gets the results back the same way, and the all-reduce after the experts sums the
  ranks' own rows (the others are zero), which is how every rank gets every token back;
- logits: the lm_head is vocab-parallel and its float32 logits are all-gathered.

These are the collectives servelab's model prices for a decode step (model/_costs.py,
`_stage`): 2 x layers + 1 all-reduces (after attention and after the experts in every
layer, and the embedding's), one all-gather of the logits (float32, as the model prices
them), and under ep 2 all-to-alls per MoE layer (dispatch and combine); at tp = 1 none. Each
collective issued is counted by kind and reported beside the model's own count for the
same layout (tp, and ep = tp under --experts ep); a mismatch fails the run.

Experts run densely: every local expert on every row it could receive, weighted by the
router's weights (zero where a token was not routed). The shapes are then fixed (no host
sync, so the step can be captured in a CUDA graph) and every expert's weights are read
once per step, as a grouped GEMM reads them at a batch that touches every expert; it does
experts / top-k times the useful FLOPs and, at a batch too small to touch every expert,
reads more weight bytes than an engine would. Under ep the dispatch is padded the same
way: a rank sends experts x its tokens rows (zero where not routed), where a variable-split
dispatch would send tokens x top-k, so it overstates the all-to-all bytes experts / top-k
times; it is dropless and capturable, which a variable split is not.

A step is one new token for each of --batch sequences whose KV cache holds --context
tokens (seeded random keys and values; the new one is written at slot `context`, so every
step is the same step). Timing, per rank, after --warmup steps: each of --iters steps
starts after a barrier from an idle device and is timed with CUDA events (the wall clock
on the CPU); a step's time is the slowest rank's, and the median over steps is reported.

- eager: the step as Python calls it, collectives included;
- graph (CUDA only): the same step captured with torch.cuda.graph, the collectives inside
  the graph, and replayed; on the CPU it is skipped and the reason recorded;
- compute: the same step with every collective replaced by a no-op of the same shapes
  (all-reduce and all-to-all return their input, the gather a broadcast view);
  comm = eager - compute (for the graph, graph - graph compute). Comm so includes the
  ranks' skew (a collective waits for the slowest), which is what a step pays; where it
  is small against the step's own noise it can read below zero.

Correctness: rank 0 also holds the whole model (tp = 1, built the same way) and runs the
same step; the logits of tp = N must match it within LOGITS_TOLERANCE. The check always
runs in float32 (on CUDA the timed model is bfloat16 by default, built a second time).
A failed check, or collectives that differ from the model's count, makes the script exit
1. Bad input (a tp size the preset cannot split, an unknown preset, more ranks than GPUs)
is one line on stderr and exit code 2.

In every process it starts it sets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1
and NVSHMEM_DISABLE_NVLS=1 unless already set, and it records NCCL_P2P_DISABLE as found.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from step_clock import elapsed_ms  # beside this script, first on sys.path
from step_graph import capture_graph

try:
    from servelab.engines.embedded import VOCAB_SIZE, EmbeddedPreset, get_preset
except ModuleNotFoundError:  # run from a source tree where servelab is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from servelab.engines.embedded import VOCAB_SIZE, EmbeddedPreset, get_preset
from servelab.model import decode_step, deploy, kernel_counts

SCHEMA = "servelab.bench.tp_step/2"
LOGITS_TOLERANCE = 1e-4
"""Largest |logit| difference allowed between tp = N and tp = 1, both float32.

Sharding changes only the order of float32 sums (a row-parallel matmul's partial sums
meet in an all-reduce, attention heads and experts are summed per rank): about 1e-7
relative per sum, ~1e-6 on these logits (|logit| < ~1 with init_std 0.02). A wrong slice
or a lost reduction moves logits by ~1e-2 or more. 1e-4 sits between the two. A router
near-tie within float32 rounding could flip one top-k choice and fail it; that is rare,
and a failure says which tp, batch and experts mode.
"""
RMS_EPS = 1e-6
"""Qwen3MoeConfig's rms_norm_eps, which the embedded checkpoint keeps."""
ROPE_THETA = 1_000_000.0
"""The embedded checkpoint's rope_theta (servelab.engines.embedded.weights)."""
PLATFORM_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""Set in every rank unless already set: NVLink multicast is off on the lent machines."""
MODES = ("tp", "ep")
GROUP_TIMEOUT = timedelta(minutes=5)
"""A collective that waits longer (a rank that failed a capture alone) ends the group."""
_ALL_GATHER = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
"""torch 2.13 renamed all_gather_into_tensor (the old name warns); older torch lacks the new."""


@dataclass(frozen=True)
class Plan:
    """What one group of ranks measures (picklable: it crosses the spawn)."""

    preset: str
    tp: int
    batches: tuple[int, ...]
    context: int
    modes: tuple[str, ...]
    warmup: int
    iters: int
    device: str
    dtype: str
    port: int
    result_path: str


@dataclass
class Row:
    """One (tp, experts mode, batch): times in ms (slowest rank, median over steps)."""

    tp: int
    experts: str
    batch: int
    kv_heads: str
    """"split" (each rank a distinct share) or "replicated" (tp exceeds the KV heads)."""
    kv_heads_per_rank: int
    collectives_per_step: dict[str, int]
    """Issued by one step, by kind (all_reduce, all_gather, all_to_all); {} at tp 1."""
    model_collectives_per_step: dict[str, int]
    """What servelab's model prices for the same step and layout, by kind (_model_collectives)."""
    collectives_match_model: bool
    eager_ms: float
    compute_ms: float
    comm_ms: float
    graph_ms: float | None
    graph_compute_ms: float | None
    graph_comm_ms: float | None
    graph_error: str | None
    graph_max_abs_diff: float | None
    """Largest |logit| difference between a replay and an eager step of the timed model."""
    max_abs_diff: float
    check_passed: bool


def main(argv: list[str] | None = None) -> int:
    """Validate, run each tp size's ranks in turn, print the table, write the JSON.

    0 when every check passed, 1 when one failed or a group crashed, 2 for bad input.
    """
    parser = _Parser(description=__doc__.splitlines()[0])
    args = _parse_args(parser, argv)
    preset = _validated_preset(parser, args)
    device = args.device
    dtype = args.dtype if args.dtype != "auto" else "bfloat16" if device == "cuda" else "float32"
    for name, value in PLATFORM_ENV.items():
        os.environ.setdefault(name, value)  # the spawned ranks inherit it; _worker checks
    meta = _meta(args, preset, dtype)
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    began = time.perf_counter()
    for tp in args.tp:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="tp_step-") as folder:
            result = Path(folder) / "rows.json"
            plan = Plan(
                preset=args.preset,
                tp=tp,
                batches=tuple(args.batch),
                context=args.context,
                modes=tuple(args.modes),
                warmup=args.warmup,
                iters=args.iters,
                device=device,
                dtype=dtype,
                port=_free_port(),
                result_path=str(result),
            )
            try:
                mp.start_processes(_worker, args=(plan,), nprocs=tp, start_method="spawn")
                rows.extend(json.loads(result.read_text()))
            except Exception as exc:  # one tp size's crash (OOM, NCCL) keeps the others
                last = (str(exc).strip().splitlines() or [""])[-1]
                errors.append(f"tp {tp}: {type(exc).__name__}: {last[-400:]}")
                _log(errors[-1])
                continue
        _log(f"tp {tp}: done ({time.perf_counter() - started:.1f} s)")
    meta["wall_s"] = round(time.perf_counter() - began, 1)
    meta["errors"] = errors
    print(_markdown(meta, rows))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
        _log(f"wrote {args.json_out}")
    failed = [row for row in rows if not row["check_passed"] or not row["collectives_match_model"]]
    for row in failed:
        where = f"tp {row['tp']} experts={row['experts']} batch {row['batch']}"
        if not row["check_passed"]:
            _log(
                f"logits check failed: {where}: max |diff| {row['max_abs_diff']:.3g} > "
                f"{LOGITS_TOLERANCE:g}"
            )
        if not row["collectives_match_model"]:
            _log(
                f"collectives differ from the model's: {where}: issued "
                f"{row['collectives_per_step']}, model {row['model_collectives_per_step']}"
            )
    return 1 if failed or errors or not rows else 0


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr (no usage block), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    parser.add_argument("--preset", default="h200-ref", help="embedded preset (tiny, h200-ref)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=_default_device())
    parser.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16"),
        default="auto",
        help="timed model's dtype; auto: bfloat16 on CUDA, float32 on the CPU (the logits"
        " check is float32 always)",
    )
    parser.add_argument("--tp", default="1,2,4,8", help="comma-separated tp sizes, run in turn")
    parser.add_argument("--batch", default="1,64", help="comma-separated batch sizes")
    parser.add_argument("--context", type=int, default=640, help="tokens already in the cache")
    parser.add_argument("--experts", choices=("tp", "ep", "both"), default="both")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30, help="timed steps per measurement")
    parser.add_argument("--json-out", help="write the results here as JSON")
    args = parser.parse_args(argv)
    args.tp = _int_list(parser, "--tp", args.tp)
    args.batch = _int_list(parser, "--batch", args.batch)
    args.modes = list(MODES) if args.experts == "both" else [args.experts]
    if args.context < 1 or args.iters < 1 or args.warmup < 0:
        parser.error("--context and --iters must be positive, --warmup not negative")
    return args


def _validated_preset(parser: argparse.ArgumentParser, args: argparse.Namespace) -> EmbeddedPreset:
    """The preset, after checking every tp size can split it on this machine."""
    try:
        preset = get_preset(args.preset)
    except Exception as exc:  # servelab's ConfigError, which names the valid presets
        parser.error(str(exc))
    heads, kv, experts = preset.num_attention_heads, preset.num_key_value_heads, preset.num_experts
    for tp in args.tp:
        if tp > heads or heads % tp:
            parser.error(f"--tp {tp} does not divide {args.preset}'s {heads} attention heads")
        if kv % tp and tp % kv:
            parser.error(f"--tp {tp}: neither splits nor replicates {args.preset}'s {kv} KV heads")
        if preset.moe_intermediate_size % tp or VOCAB_SIZE % tp:
            parser.error(f"--tp {tp}: does not divide {args.preset}'s expert or vocab width")
        if "ep" in args.modes and experts % tp:
            parser.error(f"--tp {tp}: --experts ep needs it to divide the {experts} experts")
    if args.device == "cuda":
        gpus = torch.cuda.device_count()
        if max(args.tp) > gpus:
            parser.error(f"--tp {max(args.tp)} needs that many GPUs; {gpus} visible")
    return preset


# ---------------------------------------------------------------- one rank


def _worker(rank: int, plan: Plan) -> None:
    """One rank: join the group, then check and time every (experts mode, batch)."""
    for name, value in PLATFORM_ENV.items():
        os.environ.setdefault(name, value)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(plan.port))
    if plan.device == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False  # the float32 check means float32
        dist.init_process_group(
            "nccl",
            rank=rank,
            world_size=plan.tp,
            device_id=device,
            init_method="env://",
            timeout=GROUP_TIMEOUT,
        )
    else:
        device = torch.device("cpu")
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # 127.0.0.1 only
        # Ranks share the cores: without this each takes them all and they thrash.
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // plan.tp))
        dist.init_process_group(
            "gloo", rank=rank, world_size=plan.tp, init_method="env://", timeout=GROUP_TIMEOUT
        )
    try:
        rows = _run_rank(rank, plan, device)
        if rank == 0:
            Path(plan.result_path).write_text(json.dumps([asdict(row) for row in rows]))
    finally:
        dist.destroy_process_group()


def _run_rank(rank: int, plan: Plan, device: torch.device) -> list[Row]:
    preset = get_preset(plan.preset)
    dtype = getattr(torch, plan.dtype)
    shard = _Shard.of(preset, plan.tp, rank)
    reference = (
        _build(preset, _Shard.of(preset, 1, 0), "tp", torch.float32, device) if rank == 0 else None
    )
    rows: list[Row] = []
    with torch.inference_mode():
        for mode in plan.modes:
            checked = _build(preset, shard, mode, torch.float32, device)
            timed = (
                checked if dtype == torch.float32 else _build(preset, shard, mode, dtype, device)
            )
            for batch in plan.batches:
                rows.append(
                    _measure(plan, preset, shard, mode, batch, checked, timed, reference, device)
                )
                _log(f"tp {plan.tp} rank {rank} experts={mode} batch {batch}: done", rank)
            del checked, timed
    return rows


def _measure(
    plan: Plan,
    preset: EmbeddedPreset,
    shard: _Shard,
    mode: str,
    batch: int,
    checked: _Model,
    timed: _Model,
    reference: _Model | None,
    device: torch.device,
) -> Row:
    """Check one batch's logits against rank 0's tp = 1 model, then time its step."""
    ids = torch.randint(
        VOCAB_SIZE, (batch,), generator=torch.Generator().manual_seed(preset.seed + batch)
    ).to(device)
    real = _Comm(plan.tp, enabled=plan.tp > 1)
    check_cache = _cache(preset, shard, batch, plan.context, torch.float32, device)
    logits = _step(checked, check_cache, ids, real)
    collectives = dict(real.counts)
    model = _model_collectives(plan.preset, plan.tp, mode, batch, plan.context)
    diff = 0.0
    if reference is not None:
        full = _cache(preset, _Shard.of(preset, 1, 0), batch, plan.context, torch.float32, device)
        expected = _step(reference, full, ids, _Comm(1, enabled=False))
        diff = float((logits - expected).abs().max())
        del full, expected
    del check_cache
    cache = _cache(preset, shard, batch, plan.context, timed.dtype, device)
    noop = _Comm(plan.tp, enabled=False)

    def eager() -> torch.Tensor:
        return _step(timed, cache, ids, real)

    def eager_noop() -> torch.Tensor:
        return _step(timed, cache, ids, noop)

    eager_ms = _time(eager, device, plan.warmup, plan.iters)
    compute_ms = _time(eager_noop, device, plan.warmup, plan.iters)
    graph_ms = graph_compute_ms = graph_diff = None
    graph_error: str | None = None
    if device.type != "cuda":
        graph_error = f"skipped: CUDA graphs need a CUDA device; this run is on {device.type}"
    else:
        try:
            replay, replay_noop = capture_graph(eager, device), capture_graph(eager_noop, device)
            graph_diff = float((replay().float() - eager().float()).abs().max())
            graph_ms = _time(replay, device, plan.warmup, plan.iters)
            graph_compute_ms = _time(replay_noop, device, plan.warmup, plan.iters)
        except Exception as exc:
            graph_error = f"capture failed: {type(exc).__name__}: {str(exc).strip()[:300]}"
    return Row(
        tp=plan.tp,
        experts=mode,
        batch=batch,
        kv_heads="split" if shard.kv_split else "replicated",
        kv_heads_per_rank=shard.kv_heads,
        collectives_per_step=collectives,
        model_collectives_per_step=model,
        collectives_match_model=collectives == model,
        eager_ms=eager_ms,
        compute_ms=compute_ms,
        comm_ms=eager_ms - compute_ms,
        graph_ms=graph_ms,
        graph_compute_ms=graph_compute_ms,
        graph_comm_ms=None if graph_ms is None else graph_ms - graph_compute_ms,
        graph_error=graph_error,
        graph_max_abs_diff=graph_diff,
        max_abs_diff=diff,
        check_passed=diff <= LOGITS_TOLERANCE,
    )


def _model_collectives(preset: str, tp: int, mode: str, batch: int, context: int) -> dict[str, int]:
    """The collectives servelab's model prices for this decode step, by kind (zeros left out).

    The deployment is the preset's model-catalogue twin at tp (ep = tp under --experts ep,
    as here); the GPU and the weight format change no count. all_reduce is the model's own
    count, `decode_step(...).allreduces` (2 x layers + 1 at tp > 1). The model exposes no
    count of the others, so they follow model/_costs.py `_stage`, which prices one
    all-gather of the logits on the last stage (`comm.allgather_s`) and, under ep > 1,
    2 all-to-alls per MoE layer (dispatch and combine); their sum with the all-reduces is
    checked against `kernel_counts(...).collectives`, the model's count of every collective.
    """
    dep = deploy(preset, gpu="h100", tp=tp, ep=tp if mode == "ep" else 1, weights="bf16")
    counts = {
        "all_reduce": decode_step(dep, batch, context).allreduces,
        "all_gather": 1 if tp > 1 else 0,
        "all_to_all": 2 * len(dep.model.moe_layers) if mode == "ep" and tp > 1 else 0,
    }
    total = kernel_counts(dep).collectives
    if sum(counts.values()) != total:
        raise RuntimeError(f"servelab's model counts {total} collectives, not {counts}")
    return {kind: count for kind, count in counts.items() if count}


# ---------------------------------------------------------------- the sharded model


@dataclass(frozen=True)
class _Shard:
    """Which slice of the model one rank of `tp` holds."""

    tp: int
    rank: int
    q_heads: int
    q_start: int
    kv_heads: int
    kv_start: int
    kv_split: bool

    @classmethod
    def of(cls, preset: EmbeddedPreset, tp: int, rank: int) -> _Shard:
        """Query heads in contiguous blocks; KV heads split, or the one this block uses."""
        q_heads = preset.num_attention_heads // tp
        kv = preset.num_key_value_heads
        if tp <= kv:
            kv_heads, kv_start = kv // tp, rank * (kv // tp)
        else:
            kv_heads, kv_start = 1, rank * q_heads // (preset.num_attention_heads // kv)
        return cls(tp, rank, q_heads, rank * q_heads, kv_heads, kv_start, tp <= kv)


@dataclass
class _Layer:
    qkv: torch.Tensor
    """(local q + k + v heads x head_dim, hidden): column-parallel."""
    o: torch.Tensor
    """(hidden, local q heads x head_dim): row-parallel."""
    router: torch.Tensor
    """(experts, hidden): replicated."""
    gate_up: torch.Tensor
    """(local experts, 2 x local intermediate, hidden)."""
    down: torch.Tensor
    """(local experts, hidden, local intermediate)."""


@dataclass
class _Model:
    preset: EmbeddedPreset
    shard: _Shard
    mode: str
    dtype: torch.dtype
    embed: torch.Tensor
    """(vocab / tp, hidden): vocab-parallel, this rank's rows."""
    layers: list[_Layer]
    lm_head: torch.Tensor
    """(vocab / tp, hidden): vocab-parallel."""


@dataclass
class _Cache:
    keys: list[torch.Tensor]
    """Per layer (batch, local KV heads, context + 1, head_dim); the new token at `context`."""
    values: list[torch.Tensor]
    position: int
    cos: torch.Tensor
    sin: torch.Tensor


def _build(
    preset: EmbeddedPreset, shard: _Shard, mode: str, dtype: torch.dtype, device: torch.device
) -> _Model:
    """This rank's slices of the seeded model (norm weights are 1, as in the checkpoint)."""
    h, d, inter = preset.hidden_size, preset.head_dim, preset.moe_intermediate_size
    q_rows = slice(shard.q_start * d, (shard.q_start + shard.q_heads) * d)
    kv_rows = slice(shard.kv_start * d, (shard.kv_start + shard.kv_heads) * d)
    if mode == "tp":
        experts, width = slice(None), _part(inter, shard)
    else:
        per_rank = preset.num_experts // shard.tp
        experts, width = slice(shard.rank * per_rank, (shard.rank + 1) * per_rank), slice(None)
    q_out, kv_out = preset.num_attention_heads * d, preset.num_key_value_heads * d
    stacked, stacked_down = (preset.num_experts, inter, h), (preset.num_experts, h, inter)

    def draw(name: str, shape: tuple[int, ...], index: Any) -> torch.Tensor:
        return _draw(preset, name, shape, device)[index].to(dtype).contiguous()

    layers = []
    for i in range(preset.num_hidden_layers):
        p = f"layers.{i}."
        qkv = [
            draw(p + "q", (q_out, h), q_rows),
            draw(p + "k", (kv_out, h), kv_rows),
            draw(p + "v", (kv_out, h), kv_rows),
        ]
        gate = draw(p + "gate", stacked, (experts, width))
        up = draw(p + "up", stacked, (experts, width))
        layers.append(
            _Layer(
                qkv=torch.cat(qkv),
                o=draw(p + "o", (h, q_out), (slice(None), q_rows)),
                router=draw(p + "router", (preset.num_experts, h), slice(None)),
                gate_up=torch.cat([gate, up], dim=1),
                down=draw(p + "down", stacked_down, (experts, slice(None), width)),
            )
        )
    return _Model(
        preset=preset,
        shard=shard,
        mode=mode,
        dtype=dtype,
        embed=draw("embed", (VOCAB_SIZE, h), _part(VOCAB_SIZE, shard)),
        layers=layers,
        lm_head=draw("lm_head", (VOCAB_SIZE, h), _part(VOCAB_SIZE, shard)),
    )


def _cache(
    preset: EmbeddedPreset,
    shard: _Shard,
    batch: int,
    context: int,
    dtype: torch.dtype,
    device: torch.device,
) -> _Cache:
    """`context` seeded random keys and values per sequence (the same whole cache at any tp),
    this rank's KV heads of it, and one free slot."""
    d, kv = preset.head_dim, slice(shard.kv_start, shard.kv_start + shard.kv_heads)
    shape = (batch, preset.num_key_value_heads, context, d)
    keys, values = [], []
    for i in range(preset.num_hidden_layers):
        for name, into in (("keys", keys), ("values", values)):
            whole = _draw(preset, f"cache.{batch}.{context}.{i}.{name}", shape, device, std=1.0)
            into.append(F.pad(whole[:, kv], (0, 0, 0, 1)).to(dtype))
    inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.cat([context * inv_freq] * 2)
    return _Cache(
        keys=keys,
        values=values,
        position=context,
        cos=angles.cos().to(device, dtype),
        sin=angles.sin().to(device, dtype),
    )


def _draw(
    preset: EmbeddedPreset,
    name: str,
    shape: tuple[int, ...],
    device: torch.device,
    std: float | None = None,
) -> torch.Tensor:
    """The whole tensor `name`, from a generator seeded by the preset's seed and the name,
    so each rank and each tp size slices the same numbers (per device type)."""
    generator = torch.Generator(device).manual_seed((preset.seed << 32) + zlib.crc32(name.encode()))
    scale = preset.init_std if std is None else std
    return torch.randn(shape, generator=generator, device=device) * scale


def _part(size: int, shard: _Shard) -> slice:
    step = size // shard.tp
    return slice(shard.rank * step, (shard.rank + 1) * step)


# ---------------------------------------------------------------- the step


class _Comm:
    """The step's collectives, counted by kind as issued; with enabled=False, no-ops of
    the same shapes, not counted (the compute-only run, and tp = 1, which issues none)."""

    def __init__(self, world: int, *, enabled: bool) -> None:
        self.world = world
        self.enabled = enabled
        self.counts: Counter[str] = Counter()

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            self.counts["all_reduce"] += 1
            dist.all_reduce(tensor)
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """(world, *shape): every rank's `tensor`."""
        if not self.enabled:
            return tensor.expand(self.world, *tensor.shape)
        self.counts["all_gather"] += 1
        out = tensor.new_empty((self.world * tensor.shape[0], *tensor.shape[1:]))
        _ALL_GATHER(out, tensor)
        return out.view(self.world, *tensor.shape)

    def all_to_all(self, tensor: torch.Tensor) -> torch.Tensor:
        """Dim 0 cut in `world` equal blocks, block j sent to rank j; block i of the result
        came from rank i."""
        if not self.enabled:
            return tensor
        self.counts["all_to_all"] += 1
        out = torch.empty_like(tensor)
        dist.all_to_all_single(out, tensor)
        return out


def _step(model: _Model, cache: _Cache, ids: torch.Tensor, comm: _Comm) -> torch.Tensor:
    """One decode step: a token per sequence in, float32 logits (batch, vocab) out."""
    preset, shard = model.preset, model.shard
    d, batch = preset.head_dim, ids.shape[0]
    q_width, kv_width = shard.q_heads * d, shard.kv_heads * d
    x = _embed(model, ids, comm)
    for i, layer in enumerate(model.layers):
        q, k, v = (_rms(x) @ layer.qkv.T).split([q_width, kv_width, kv_width], dim=-1)
        q = _rope(_rms(q.view(batch, shard.q_heads, 1, d)), cache)
        k = _rope(_rms(k.view(batch, shard.kv_heads, 1, d)), cache)
        cache.keys[i][:, :, cache.position : cache.position + 1] = k
        cache.values[i][:, :, cache.position : cache.position + 1] = v.view(k.shape)
        attn = F.scaled_dot_product_attention(q, cache.keys[i], cache.values[i], enable_gqa=True)
        x = x + comm.all_reduce(attn.reshape(batch, q_width) @ layer.o.T)
        moe = _experts_tp if model.mode == "tp" else _experts_ep
        x = x + moe(_rms(x), layer, preset, shard, comm)
    # Float32 before the gather: the model prices 4-byte logits.
    logits = comm.all_gather((_rms(x) @ model.lm_head.T).float())  # (tp, batch, vocab / tp)
    return logits.permute(1, 0, 2).reshape(batch, VOCAB_SIZE)


def _embed(model: _Model, ids: torch.Tensor, comm: _Comm) -> torch.Tensor:
    """Vocab-parallel lookup: this rank's rows for the ids in its slice, zeros for the
    rest, then an all-reduce (each id's row comes from the one rank holding it)."""
    rows = model.embed.shape[0]
    local = ids - model.shard.rank * rows
    outside = (local < 0) | (local >= rows)
    x = model.embed[local.clamp(0, rows - 1)].masked_fill(outside.unsqueeze(-1), 0)
    return comm.all_reduce(x)


def _experts_tp(
    x: torch.Tensor, layer: _Layer, preset: EmbeddedPreset, shard: _Shard, comm: _Comm
) -> torch.Tensor:
    """Every expert's slice of the intermediate dimension on every token, then all-reduce."""
    y = _dense_experts(x.expand(preset.num_experts, *x.shape), layer)
    return comm.all_reduce(torch.einsum("be,ebh->bh", _route(x, layer, preset), y))


def _experts_ep(
    x: torch.Tensor, layer: _Layer, preset: EmbeddedPreset, shard: _Shard, comm: _Comm
) -> torch.Tensor:
    """This rank's whole experts on the tokens routed to them, by all-to-all and back.

    Rank r owns tokens [r T, (r + 1) T) of the batch padded to tp x T; it sends row t to
    expert e's slot (e, t), zero where t was not routed to e, so the send is (experts, T,
    hidden) and every rank gets (its experts, tp x T, hidden).
    """
    tp, rank, (batch, hidden) = shard.tp, shard.rank, x.shape
    tokens = math.ceil(batch / tp)
    padded = F.pad(x, (0, 0, 0, tokens * tp - batch))
    own = padded[rank * tokens : (rank + 1) * tokens]
    weights = _route(own, layer, preset)  # (T, experts)
    # (weights.T > 0) is a transposed view: the product can come out transposed too.
    send = (own.unsqueeze(0) * (weights.T > 0).unsqueeze(-1).to(own.dtype)).contiguous()
    received = comm.all_to_all(send)  # block i: rank i's tokens for this rank's experts
    local = layer.gate_up.shape[0]
    rows = received.view(tp, local, tokens, hidden).transpose(0, 1).reshape(local, -1, hidden)
    y = _dense_experts(rows, layer).view(local, tp, tokens, hidden).transpose(0, 1)
    back = comm.all_to_all(y.reshape(-1, tokens, hidden))  # (experts, T, hidden)
    mine = torch.einsum("te,eth->th", weights, back)
    out = torch.zeros_like(padded)
    out[rank * tokens : (rank + 1) * tokens] = mine
    return comm.all_reduce(out)[:batch]


def _dense_experts(x: torch.Tensor, layer: _Layer) -> torch.Tensor:
    """(experts, rows, hidden) -> (experts, rows, hidden): SwiGLU, each expert its rows."""
    gate, up = torch.bmm(x, layer.gate_up.transpose(1, 2)).chunk(2, dim=-1)
    return torch.bmm(F.silu(gate) * up, layer.down.transpose(1, 2))


def _route(x: torch.Tensor, layer: _Layer, preset: EmbeddedPreset) -> torch.Tensor:
    """(rows, experts) weights as Qwen3-MoE routes: softmax, top-k, renormalised; 0 else."""
    probs = torch.softmax((x @ layer.router.T).float(), dim=-1)
    top, chosen = probs.topk(preset.num_experts_per_tok, dim=-1)
    top = top / top.sum(dim=-1, keepdim=True)
    return torch.zeros_like(probs).scatter(1, chosen, top).to(x.dtype)


def _rms(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm over the last dim, in float32 as transformers does (its weight is 1 here)."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + RMS_EPS)).to(x.dtype)


def _rope(x: torch.Tensor, cache: _Cache) -> torch.Tensor:
    """Rotary embedding at the cache's position (transformers' rotate_half convention)."""
    first, second = x.chunk(2, dim=-1)
    return x * cache.cos + torch.cat([-second, first], dim=-1) * cache.sin


# ---------------------------------------------------------------- timing


def _time(run: Callable[[], object], device: torch.device, warmup: int, iters: int) -> float:
    """Median over `iters` steps of the slowest rank's ms; each step starts after a barrier
    from an idle device. Every rank calls it and gets the same number."""
    for _ in range(warmup):
        run()
    times: list[float] = []
    for _ in range(iters):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(elapsed_ms(run, device))
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, times)
    return statistics.median(max(step) for step in zip(*every, strict=True))


# ---------------------------------------------------------------- helpers and output


def _meta(args: argparse.Namespace, preset: EmbeddedPreset, dtype: str) -> dict[str, Any]:
    if args.device == "cuda":
        name = torch.cuda.get_device_name(0)
    else:
        name = platform.processor() or platform.machine()
    kv, layers = preset.num_key_value_heads, preset.num_hidden_layers
    return {
        "schema": SCHEMA,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "preset": args.preset,
        "device": args.device,
        "device_name": name,
        "gpus_visible": torch.cuda.device_count() if args.device == "cuda" else 0,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if args.device == "cuda" else None,
        "backend": "nccl" if args.device == "cuda" else "gloo",
        "python": platform.python_version(),
        "dtype": dtype,
        "check_dtype": "float32",
        "tolerance": LOGITS_TOLERANCE,
        "context": args.context,
        "warmup": args.warmup,
        "iters": args.iters,
        "layers": layers,
        "hidden_size": preset.hidden_size,
        "attention_heads": preset.num_attention_heads,
        "kv_heads": kv,
        "head_dim": preset.head_dim,
        "experts": preset.num_experts,
        "experts_per_token": preset.num_experts_per_tok,
        "moe_intermediate_size": preset.moe_intermediate_size,
        "vocab_size": VOCAB_SIZE,
        "embedding": "vocab-parallel, all_reduce",
        "logits": "vocab-parallel lm_head, float32 all_gather",
        "p2p_disabled": os.environ.get("NCCL_P2P_DISABLE", "0") not in ("", "0"),
        "nccl_p2p_disable_env": os.environ.get("NCCL_P2P_DISABLE"),
        "platform_env": {name: os.environ.get(name) for name in PLATFORM_ENV},
    }


def _markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    kv = meta["kv_heads"]
    lines = [
        f"# tp decode step, {meta['preset']}, {meta['device_name']} ({meta['device']}, "
        f"{meta['backend']}), {meta['created']}",
        "",
        f"torch {meta['torch']} (CUDA {meta['cuda']}, NCCL {meta['nccl']}), Python "
        f"{meta['python']}; {meta['dtype']} timed, float32 checked against tp 1 within "
        f"{meta['tolerance']:g}; context {meta['context']} tokens; median of "
        f"{meta['iters']} steps (slowest rank) after {meta['warmup']}; "
        f"NCCL_P2P_DISABLE={meta['nccl_p2p_disable_env']}",
        f"{meta['layers']} layers, {meta['attention_heads']} heads, {kv} KV heads (split "
        f"while tp <= {kv}, replicated beyond), {meta['experts']} experts (top-"
        f"{meta['experts_per_token']}); embedding {meta['embedding']}; logits "
        f"{meta['logits']}; collectives issued / servelab model's count; "
        f"compute = the step with no-op collectives, comm = step - compute",
        "",
        "| tp | experts | batch | KV heads/rank | all-reduce | all-gather | all-to-all "
        "| eager ms | compute ms | comm ms | graph ms | graph comm ms | max abs diff | check |",
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        graph = _fmt(row["graph_ms"]) if row["graph_ms"] is not None else "skipped"
        cells = [
            str(row["tp"]),
            row["experts"],
            str(row["batch"]),
            f"{row['kv_heads_per_rank']} ({row['kv_heads']})",
            *(
                f"{row['collectives_per_step'].get(kind, 0)} / "
                f"{row['model_collectives_per_step'].get(kind, 0)}"
                for kind in ("all_reduce", "all_gather", "all_to_all")
            ),
            _fmt(row["eager_ms"]),
            _fmt(row["compute_ms"]),
            _fmt(row["comm_ms"]),
            graph,
            _fmt(row["graph_comm_ms"]),
            f"{row['max_abs_diff']:.2e}",
            "pass" if row["check_passed"] and row["collectives_match_model"] else "FAIL",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    reasons = sorted({row["graph_error"] for row in rows if row["graph_error"]})
    lines += ["", *(f"graph: {reason}" for reason in reasons)]
    lines += [f"error: {error}" for error in meta["errors"]]
    return "\n".join(lines).rstrip()


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _int_list(parser: argparse.ArgumentParser, flag: str, text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        parser.error(f"{flag} takes comma-separated integers, not {text!r}")
    if not values or min(values) < 1:
        parser.error(f"{flag} takes positive integers, not {text!r}")
    return values


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _free_port() -> int:
    """A port free on 127.0.0.1 now (the ranks' rendezvous binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _log(message: str, rank: int = 0) -> None:
    if rank == 0:
        print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
