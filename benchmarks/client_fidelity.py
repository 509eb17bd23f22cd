"""How close servelab's and SGLang's clients come to what the server really did.

Not a test (pytest does not collect it): run it by hand; it prints Markdown tables and
whether the goal was met, and exits 0 (it measures, it does not assert).

    .venv/bin/python benchmarks/client_fidelity.py --concurrency 256,1024

For each concurrency and each client it starts a fresh simulator (`servelab sim`, its own
process, 20 ms between tokens, `--record` truth log), drives one closed-loop level
(`--requests-per-stream` x concurrency requests of 128 input and 256 output tokens, one
warm-up request) and stops the simulator. The truth is the server's own stamps: a
request's true TTFT is its first chunk's send time minus its receive time, so time the
server spent late is not charged to a client. Compared:

- TTFT error: the client's mean TTFT minus the truth's mean TTFT, in ms.
- p99 ITL, in ms, against the 20 ms the server keeps (its own p99 gap is printed too).
- output throughput against the ideal, concurrency x 1000 / ITL tok/s.

SGLang's client is `python -m sglang.bench_serving --backend sglang-oai-chat --dataset-name
random-ids` from `sglang==0.5.23`, installed with `--no-deps` into its own virtual
environment under `.bench-venvs/` (created here when missing) together with the modules
it imports when run (`SGLANG_DEPS`), and run with HF_HUB_OFFLINE=1 on the tokenizer of
servelab's embedded tiny model. servelab runs as `servelab bench`; its records are also
matched to the truth log request by request (X-Request-Id), which splits its TTFT error
into the request's way up (send to server receive) and the first chunk's way down.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from servelab.sim import TruthRecord, read_truth

ROOT = Path(__file__).resolve().parents[1]
VENVS = ROOT / ".bench-venvs"
SGLANG = "sglang==0.5.23"
SGLANG_DEPS = (
    "aiohttp==3.14.5",
    "apache-tvm-ffi==0.1.15.post2",
    "compressed-tensors==0.20.1",
    "datasets==5.2.0",
    "gguf==0.19.0",
    "ipython==9.18.1",
    "msgspec==0.22.0",
    "numpy==2.4.6",
    "orjson==3.13.0",
    "packaging==26.4",
    "pillow==13.0.0",
    "psutil==7.2.2",
    "pybase64==1.5.1",
    "pydantic==2.14.4",
    "pyzmq==27.3.0",
    "requests==2.34.2",
    "sentencepiece==0.2.3",
    "starlette==1.10.0",
    "torch==2.14.1",
    "torchvision==0.29.1",
    "tqdm==4.70.1",
    "transformers==5.24.0",
    "triton==3.8.0",
)
"""What `python -m sglang.bench_serving` imports when run (it loads the sglang package,
hence torch); pinned to the versions that resolved when this benchmark was written."""

ITL_MS = 20.0
TTFT_MS = 20.0
"""Server TTFT = ITL: 256 tokens then take 256 x 20 ms, so one stream ideally gets 50 tok/s."""
OUTPUT_LEN = 256
INPUT_LEN = 128
WARMUP = 1
TTFT_ERROR_GOAL = 0.25
"""At the largest concurrency, servelab's TTFT error at most this share of SGLang's."""
THROUGHPUT_GOAL = 0.95
"""At the largest concurrency, servelab's output throughput at least this share of ideal."""
CLIENT_TIMEOUT_S = 600
SIM_START_TIMEOUT_S = 30


@dataclass(frozen=True)
class Truth:
    """What the server did for the measured requests (warm-up excluded)."""

    requests: int
    mean_ttft_ms: float
    p99_gap_ms: float
    """p99 of the server's own gaps between consecutive chunks of a request."""
    p50_lag_ms: float
    p99_lag_ms: float
    max_lag_ms: float
    """Send lag: a chunk's send time minus its due time."""
    by_id: dict[str, TruthRecord]


@dataclass(frozen=True)
class Measured:
    """One client's run against one fresh simulator."""

    client: str
    concurrency: int
    completed: int
    mean_ttft_ms: float
    p99_itl_ms: float
    output_throughput: float
    client_cpu_s: float
    truth: Truth
    matched: dict[str, float] | None = None
    """servelab only: per-request comparison with the truth (see `_match`)."""

    @property
    def ttft_error_ms(self) -> float:
        return self.mean_ttft_ms - self.truth.mean_ttft_ms

    @property
    def ideal_throughput(self) -> float:
        return self.concurrency * 1000.0 / ITL_MS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="256,1024", help="comma-separated levels")
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--sim-workers", type=int, default=2)
    parser.add_argument("--servelab-workers", type=int, help="default: servelab's own choice")
    parser.add_argument("--clients", default="servelab,sglang", help="which clients to run")
    parser.add_argument("--keep", type=Path, help="keep logs, truth logs and results here")
    parser.add_argument(
        "--sglang-python",
        type=Path,
        help="an interpreter that already imports sglang (default: its own venv, made here)",
    )
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    clients = args.clients.split(",")

    python = args.sglang_python or (_sglang_python() if "sglang" in clients else None)
    tokenizer = _tokenizer_folder(python)
    print_header("client fidelity", args)
    results: list[Measured] = []
    with _work_dir(args.keep) as work:
        for concurrency in levels:
            for client in clients:
                run_dir = work / f"{client}-c{concurrency}"
                run_dir.mkdir(parents=True, exist_ok=True)
                try:
                    results.append(
                        _measure(
                            client, concurrency, run_dir, args, tokenizer=tokenizer, python=python
                        )
                    )
                except RuntimeError as exc:
                    print(f"{client} at concurrency {concurrency} failed: {exc}", file=sys.stderr)
    _print_results(results, levels)


# --- one measurement -------------------------------------------------------------------


def _measure(
    client: str,
    concurrency: int,
    run_dir: Path,
    args: argparse.Namespace,
    *,
    tokenizer: Path,
    python: Path | None,
) -> Measured:
    n = args.requests_per_stream * concurrency
    record = run_dir / "truth.jsonl"
    with _simulator(record, args.sim_workers, run_dir / "sim.log") as url:
        if client == "servelab":
            command = [
                *(sys.executable, "-m", "servelab", "bench", "--url", url),
                *("--concurrency", str(concurrency), "--num-requests", str(n)),
                *("--warmup", str(WARMUP), "--input-len", str(INPUT_LEN)),
                *("--output-len", str(OUTPUT_LEN), "--tokenizer", str(tokenizer)),
                *("--out", str(run_dir / "run"), "--runs-dir", str(run_dir / "runs")),
            ]
            if args.servelab_workers:
                command += ["--workers", str(args.servelab_workers)]
        else:
            assert python is not None
            command = [
                *(str(python), "-m", "sglang.bench_serving", "--backend", "sglang-oai-chat"),
                *("--base-url", url, "--dataset-name", "random-ids"),
                *("--tokenizer", str(tokenizer), "--random-range-ratio", "1"),
                *("--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN)),
                *("--num-prompts", str(n), "--max-concurrency", str(concurrency)),
                *("--request-rate", "inf", "--warmup-requests", str(WARMUP)),
                *("--output-file", str(run_dir / "sglang.jsonl"), "--disable-tqdm"),
            ]
        cpu_s = _run_client(command, run_dir / "client.log")
    truth = _truth(record)
    if client == "servelab":
        level = json.loads((run_dir / "run" / "summary.json").read_text())["levels"][0]
        matched = _match(run_dir / "run" / "requests.jsonl", truth)
    else:
        level = json.loads((run_dir / "sglang.jsonl").read_text().splitlines()[-1])
        matched = None
    return Measured(
        client=client,
        concurrency=concurrency,
        completed=level["completed"],
        mean_ttft_ms=level["mean_ttft_ms"],
        p99_itl_ms=level["p99_itl_ms"],
        output_throughput=level["output_throughput"],
        client_cpu_s=cpu_s,
        truth=truth,
        matched=matched,
    )


@contextmanager
def _simulator(record: Path, workers: int, log: Path) -> Iterator[str]:
    """A fresh `servelab sim` on a free port of 127.0.0.1; yields its URL, stops it after."""
    command = [
        *(sys.executable, "-m", "servelab", "sim", "--host", "127.0.0.1", "--port", "0"),
        *("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--workers", str(workers)),
        *("--record", str(record)),
    ]
    with log.open("w") as log_file:
        sim = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            yield _wait_for_url(sim, log)
        finally:
            _stop(sim)


def _wait_for_url(sim: subprocess.Popen, log: Path) -> str:
    """The URL the simulator prints once it listens (`serving on URL`)."""
    for _ in range(SIM_START_TIMEOUT_S * 10):
        for line in log.read_text().splitlines():
            if line.startswith("serving on "):
                return line.removeprefix("serving on ").strip()
        if sim.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"the simulator did not start; see {log}")


def _run_client(command: list[str], log: Path) -> float:
    """Run a client to completion; return the CPU seconds its process tree used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log.open("w") as log_file:
        client = subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=os.environ | {"HF_HUB_OFFLINE": "1"},
            start_new_session=True,
        )
        try:
            code = client.wait(CLIENT_TIMEOUT_S)
        finally:
            _stop(client)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        tail = " | ".join(log.read_text(errors="replace").splitlines()[-5:])
        raise RuntimeError(f"{command[2]} exited with {code}; {log} ends: {tail}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM (the simulator flushes its truth log on it), then SIGKILL if need be."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- truth ----------------------------------------------------------------------------


def _truth(record: Path) -> Truth:
    """The measured requests of a truth log: servelab's by X-Request-Id, else by order."""
    records = sorted(read_truth(record), key=lambda r: r.t_recv_ns)
    if any(r.request_id.startswith("servelab-") for r in records):
        measured = [r for r in records if "-m" in r.request_id]
    else:
        measured = records[WARMUP:]
    ttft = [r.chunk_sent_ns[0] - r.t_recv_ns for r in measured]
    gaps = np.concatenate([np.diff(r.chunk_sent_ns) for r in measured])
    lags = np.concatenate([r.chunk_lag_ns for r in measured])
    return Truth(
        requests=len(measured),
        mean_ttft_ms=float(np.mean(ttft)) / 1e6,
        p99_gap_ms=float(np.percentile(gaps, 99)) / 1e6,
        p50_lag_ms=float(np.percentile(lags, 50)) / 1e6,
        p99_lag_ms=float(np.percentile(lags, 99)) / 1e6,
        max_lag_ms=float(np.max(lags)) / 1e6,
        by_id={r.request_id: r for r in measured},
    )


def _match(requests_jsonl: Path, truth: Truth) -> dict[str, float]:
    """servelab's records against the server's, request by request, in ms.

    `up`: t_send to the server's receive; `down`: the first chunk's send to its arrival
    (their sum is the request's TTFT error); `delivery_p99`: p99 over every chunk of
    arrival minus send, how late the client read what the server had sent.
    """
    up, down, delivery, errors = [], [], [], []
    for line in requests_jsonl.read_text().splitlines():
        rec = json.loads(line)
        if rec["warmup"] or not rec["ok"]:
            continue
        server = truth.by_id[f"servelab-{rec['level']}-m{rec['index']}"]
        arrivals = np.asarray(rec["chunk_offsets_ns"]) + rec["t_send_ns"]
        sent = np.asarray(server.chunk_sent_ns)
        up.append(server.t_recv_ns - rec["t_send_ns"])
        down.append(arrivals[0] - sent[0])
        errors.append(rec["chunk_offsets_ns"][0] - (sent[0] - server.t_recv_ns))
        delivery.append(arrivals - sent)
    return {
        "ttft_error_mean": float(np.mean(errors)) / 1e6,
        "up_mean": float(np.mean(up)) / 1e6,
        "down_mean": float(np.mean(down)) / 1e6,
        "delivery_p50": float(np.percentile(np.concatenate(delivery), 50)) / 1e6,
        "delivery_p99": float(np.percentile(np.concatenate(delivery), 99)) / 1e6,
    }


# --- report ---------------------------------------------------------------------------


def _print_results(results: list[Measured], levels: list[int]) -> None:
    print(
        "| concurrency | client | completed | mean TTFT ms | truth TTFT ms | TTFT error ms"
        " | p99 ITL ms | server p99 gap ms | output tok/s | ideal tok/s | / ideal"
        " | server lag p50 / p99 / max ms | client CPU s |"
    )
    print("|---" * 13 + "|")
    for m in results:
        t = m.truth
        print(
            f"| {m.concurrency} | {m.client} | {m.completed} | {m.mean_ttft_ms:.2f}"
            f" | {t.mean_ttft_ms:.2f} | {m.ttft_error_ms:.2f} | {m.p99_itl_ms:.2f}"
            f" | {t.p99_gap_ms:.2f} | {m.output_throughput:,.0f} | {m.ideal_throughput:,.0f}"
            f" | {m.output_throughput / m.ideal_throughput:.3f}"
            f" | {t.p50_lag_ms:.2f} / {t.p99_lag_ms:.2f} / {t.max_lag_ms:.1f}"
            f" | {m.client_cpu_s:.1f} |"
        )
    matched = [m for m in results if m.matched]
    if matched:
        print(
            "\nservelab, request by request (ms): mean TTFT error = mean up + mean down;"
            " delivery = chunk arrival - chunk send\n"
        )
        print("| concurrency | mean TTFT error | mean up | mean down | delivery p50 | p99 |")
        print("|---" * 6 + "|")
        for m in matched:
            d = m.matched or {}
            print(
                f"| {m.concurrency} | {d['ttft_error_mean']:.2f} | {d['up_mean']:.2f}"
                f" | {d['down_mean']:.2f} | {d['delivery_p50']:.2f} | {d['delivery_p99']:.2f} |"
            )
    print()
    by_key = {(m.client, m.concurrency): m for m in results}
    for concurrency in levels:
        ours, theirs = by_key.get(("servelab", concurrency)), by_key.get(("sglang", concurrency))
        parts = []
        if ours and theirs:
            ratio = ours.ttft_error_ms / theirs.ttft_error_ms
            parts.append(f"TTFT error servelab / SGLang = {ratio:.3f}")
        for m in (ours, theirs):
            if m:
                share = m.output_throughput / m.ideal_throughput
                parts.append(f"{m.client} throughput / ideal = {share:.3f}")
        print(f"concurrency {concurrency}: " + "; ".join(parts))
    top = max(levels)
    ours, theirs = by_key.get(("servelab", top)), by_key.get(("sglang", top))
    if ours and theirs:
        ratio = ours.ttft_error_ms / theirs.ttft_error_ms
        share = ours.output_throughput / ours.ideal_throughput
        met = ratio <= TTFT_ERROR_GOAL and share >= THROUGHPUT_GOAL
        print(
            f"goal at concurrency {top} (TTFT error ratio <= {TTFT_ERROR_GOAL},"
            f" throughput >= {THROUGHPUT_GOAL:.0%} of ideal): {'met' if met else 'NOT met'}"
            f" ({ratio:.3f}, {share:.1%})"
        )


# --- environment ----------------------------------------------------------------------


def print_header(title: str, args: argparse.Namespace) -> None:
    """The run's first lines: when, where, and the server and workload every client met."""
    print(f"# {title}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {_machine()}")
    print(
        f"server: servelab sim --ttft-ms {TTFT_MS:g} --itl-ms {ITL_MS:g} --workers"
        f" {args.sim_workers}; {INPUT_LEN} in / {OUTPUT_LEN} out tokens,"
        f" {args.requests_per_stream} requests per stream, {WARMUP} warm-up\n"
    )


def _sglang_python() -> Path:
    """SGLang's venv under .bench-venvs/, created and filled when missing (idempotent)."""
    venv = VENVS / SGLANG.replace("==", "-")
    python = venv / "bin" / "python"
    marker = venv / "servelab-installed.txt"
    wanted = "\n".join((SGLANG, *SGLANG_DEPS)) + "\n"
    if marker.is_file() and marker.read_text() == wanted:
        return python
    print(f"installing {SGLANG} into {venv} (once)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", SGLANG], check=True)
    subprocess.run([*pip, *SGLANG_DEPS], check=True)
    marker.write_text(wanted)
    return python


def _tokenizer_folder(python: Path | None) -> Path:
    """The embedded tiny model's folder; a transformers-4 copy if SGLang's venv needs one.

    Its tokenizer_config.json names TokenizersBackend, a transformers-5 class; for an older
    transformers the same tokenizer.json is served as a PreTrainedTokenizerFast.
    """
    from servelab.engines.embedded import ensure_model

    folder = ensure_model("tiny")
    if python is None or not _transformers_4(python):
        return folder
    legacy = VENVS / "tiny-tokenizer-transformers4"
    legacy.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / "tokenizer.json", legacy / "tokenizer.json")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (legacy / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return legacy


def _transformers_4(python: Path) -> bool:
    probe = "import importlib.metadata as m; print(m.version('transformers'))"
    version = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return version.startswith("4.")


def _machine() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{platform.node()}: {os.cpu_count()} CPUs, load average {load}"


@contextmanager
def _work_dir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        work = keep / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        work.mkdir(parents=True)
        yield work
        return
    with tempfile.TemporaryDirectory(prefix="client-fidelity-") as tmp:
        yield Path(tmp)


if __name__ == "__main__":
    main()
