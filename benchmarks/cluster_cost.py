"""What spreading the client over a Ray cluster costs: one host's processes against a
two-node Ray cluster, both against the simulator's own send stamps.

Not a test (pytest does not collect it): run it by hand; it prints Markdown tables and
exits 0 (it measures, it does not assert).

    .venv/bin/python benchmarks/cluster_cost.py [--concurrency 256] [--workers 2]

One run, one machine: for each concurrency a fresh simulator (client_fidelity.py's: 20 ms
TTFT and between tokens, 128 in / 256 out tokens, `--record` truth log) is driven by
`servelab bench --workers N` (worker processes on this host) and by `servelab bench
--cluster auto` on a two-node Ray cluster started here (`ray.cluster_utils.Cluster`,
both nodes on 127.0.0.1, N/2 workers per node, the dashboard and usage stats off, an
explicit object store). Same workload, same worker count. Compared, as in
client_fidelity.py: TTFT error (the client's mean TTFT minus the server's), its split
into the request's way up and the first chunk's way down, and output throughput against
the ideal (concurrency x 50 tok/s); for the cluster also each node's measured clock
offset and its bound. Both nodes share this host's clock, so their true offset is 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from client_fidelity import (
    INPUT_LEN,
    ITL_MS,
    OUTPUT_LEN,
    TTFT_MS,
    WARMUP,
    _match,
    _run_client,
    _simulator,
    _truth,
)

RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Ray would "resolve" 127.0.0.1 to this machine's outward address; this keeps loopback."""
OBJECT_STORE_BYTES = 100 * 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="256", help="comma-separated levels")
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--sim-workers", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="client workers, both ways")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    print(
        f"# cluster cost: server `servelab sim --ttft-ms {TTFT_MS:g} --itl-ms {ITL_MS:g}"
        f" --workers {args.sim_workers}`; {INPUT_LEN} in / {OUTPUT_LEN} out tokens,"
        f" {args.requests_per_stream} requests per stream, {WARMUP} warm-up;"
        f" {args.workers} client workers; {os.cpu_count()} CPUs\n"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="cluster-cost-") as tmp, _ray_cluster(Path(tmp)) as env:
        for concurrency in levels:
            for how in ("processes", "ray"):
                run_dir = Path(tmp) / f"{how}-c{concurrency}"
                run_dir.mkdir()
                try:
                    rows.append(_measure(how, concurrency, run_dir, args, env))
                except RuntimeError as exc:
                    print(f"{how} at concurrency {concurrency} failed: {exc}", file=sys.stderr)
    _print(rows)


def _measure(
    how: str, concurrency: int, run_dir: Path, args: argparse.Namespace, env: dict[str, str]
) -> dict:
    n = args.requests_per_stream * concurrency
    record = run_dir / "truth.jsonl"
    with _simulator(record, args.sim_workers, run_dir / "sim.log") as url:
        command = [
            *(sys.executable, "-m", "servelab", "bench", "--url", url),
            *("--concurrency", str(concurrency), "--num-requests", str(n)),
            *("--warmup", str(WARMUP), "--input-len", str(INPUT_LEN)),
            *("--output-len", str(OUTPUT_LEN)),
            *("--out", str(run_dir / "run"), "--runs-dir", str(run_dir / "runs")),
        ]
        if how == "ray":
            per_node = str(max(1, args.workers // 2))
            command += ["--cluster", "auto", "--workers-per-node", per_node]
        else:
            command += ["--workers", str(args.workers)]
        saved = os.environ.copy()
        os.environ.update(env)
        try:
            _run_client(command, run_dir / "client.log")
        finally:
            os.environ.clear()
            os.environ.update(saved)
    truth = _truth(record)
    level = json.loads((run_dir / "run" / "summary.json").read_text())["levels"][0]
    return {
        "how": how,
        "concurrency": concurrency,
        "level": level,
        "truth_ttft_ms": truth.mean_ttft_ms,
        "matched": _match(run_dir / "run" / "requests.jsonl", truth),
    }


@contextmanager
def _ray_cluster(tmp: Path) -> Iterator[dict[str, str]]:
    """Two Ray nodes on 127.0.0.1; yields what a `--cluster auto` process needs to join."""
    os.environ.update(RAY_ENV)  # before Ray is imported: it reads them once
    temp = tempfile.mkdtemp(prefix="slray", dir="/tmp")  # short: unix socket paths
    os.environ["RAY_TMPDIR"] = temp
    from ray.cluster_utils import Cluster

    node = {
        "node_ip_address": "127.0.0.1",
        "num_cpus": 2,
        "object_store_memory": OBJECT_STORE_BYTES,
        "include_dashboard": False,
    }
    cluster = Cluster(initialize_head=True, head_node_args=node)
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        yield {**RAY_ENV, "RAY_TMPDIR": temp, "RAY_ADDRESS": cluster.address}
    finally:
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def _print(rows: list[dict]) -> None:
    print(
        "| streams | client | completed | mean TTFT ms | truth TTFT ms | TTFT error ms"
        " | up ms | down ms | delivery p99 ms | p99 ITL ms | output tok/s | / ideal"
        " | client_bound |"
    )
    print("|---" * 13 + "|")
    for row in rows:
        level, m = row["level"], row["matched"]
        ideal = row["concurrency"] * 1000.0 / ITL_MS
        print(
            f"| {row['concurrency']} | {row['how']} | {level['completed']}"
            f" | {level['mean_ttft_ms']:.2f} | {row['truth_ttft_ms']:.2f}"
            f" | {level['mean_ttft_ms'] - row['truth_ttft_ms']:.2f}"
            f" | {m['up_mean']:.2f} | {m['down_mean']:.2f} | {m['delivery_p99']:.2f}"
            f" | {level['p99_itl_ms']:.2f} | {level['output_throughput']:,.0f}"
            f" | {level['output_throughput'] / ideal:.3f}"
            f" | {level['client']['client_bound']} |"
        )
    print()
    for row in rows:
        reason = row["level"]["client"]["client_bound_reason"]
        if reason:
            print(f"- {row['concurrency']} streams, {row['how']}: client_bound ({reason})")
        for node in row["level"]["client"].get("nodes") or []:
            print(
                f"- {row['concurrency']} streams, node {node['address']} ({node['node']}):"
                f" {node['workers']} workers, {node['requests']} requests, clock offset"
                f" {node['clock_offset_ms']:+.3f} ms ± {node['clock_error_ms']:.3f} ms,"
                f" p99 loop lag {node['p99_loop_lag_ms']:.2f} ms"
            )
    by = {(r["how"], r["concurrency"]): r for r in rows}
    for (how, concurrency), row in by.items():
        if how != "ray" or ("processes", concurrency) not in by:
            continue
        one = by[("processes", concurrency)]
        ideal = concurrency * 1000.0 / ITL_MS
        error = [r["level"]["mean_ttft_ms"] - r["truth_ttft_ms"] for r in (one, row)]
        share = [r["level"]["output_throughput"] / ideal for r in (one, row)]
        print(
            f"\n{concurrency} streams: TTFT error {error[0]:.2f} ms (processes) against"
            f" {error[1]:.2f} ms (Ray); output / ideal {share[0]:.3f} against {share[1]:.3f}"
        )


if __name__ == "__main__":
    main()
