"""vLLM for real: launched from a spec, its log matched, its flags checked by itself."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from servelab.core.errors import ConfigError, EngineLaunchError
from servelab.engines.base import EngineSpec, Knobs
from servelab.engines.cpu_share import SCHEDULER_NICE, engine_cpu_share
from servelab.engines.flagcheck import installed_flags
from servelab.engines.registry import get_adapter
from servelab.engines.signatures import EventKind, LogEvent, LogScan
from servelab.engines.vllm import (
    API_SERVER_MODULE,
    KNOB_FLAGS,
    LAYOUT_FLAGS,
    OMP_BIND_ENV,
    is_cpu_build,
)
from servelab.engines.watched import launch_watched
from servelab.store import RunDir
from servelab.telemetry.scrape import parse_metrics
from tests.conftest import SERVELAB
from tests.vllm.conftest import (
    CAP,
    KV_BLOCK_TOKENS,
    KV_BLOCKS,
    KV_CACHE_GIB,
    MAX_MODEL_LEN,
    VLLM_PYTHON,
    TuneRun,
    VllmEngine,
    vllm_processes,
)

# The tiny preset's KV bytes per token: 2 layers x (K and V) x 2 KV heads x 64 x 4 bytes.
KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 64 * 4


def _events(engine: VllmEngine, kind: EventKind) -> list[LogEvent]:
    scan = engine.watched.scan()
    assert scan is not None
    return [event for event in scan.events if event.kind is kind]


def _trial_scan(study: TuneRun) -> LogScan:
    """What the capped trial's engine log said (its engine_events.json)."""
    scan = RunDir(study.run_dir(study.trial_at_cap(CAP))).load_engine_events(LogScan)
    assert scan is not None
    return scan


def test_the_adapter_leaves_the_load_generator_its_cores(vllm_kv_limited: VllmEngine):
    """vLLM's CPU build as the product launches it: compute threads on the first half of the
    usable cores, every thread of its scheduler (the EngineCore's sched_yield spin) at nice
    10 while its worker and API server keep the launcher's priority; what was set is in
    the engine's record."""
    engine = vllm_kv_limited.engine
    share = engine_cpu_share()
    settled = engine.settled
    assert settled[OMP_BIND_ENV] == ",".join(map(str, share.engine))
    assert engine.spec.env[OMP_BIND_ENV] == settled[OMP_BIND_ENV]
    assert (settled["engine_cpus"], settled["client_cpus"]) == (
        list(share.engine),
        list(share.client),
    )
    own = os.getpriority(os.PRIO_PROCESS, 0)
    schedulers = settled["scheduler_pids"]
    assert schedulers and settled["scheduler_nice"] == SCHEDULER_NICE != own
    titles = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in vllm_processes()}
    for pid, title in titles.items():
        if os.getsid(pid) != engine.pgid:
            continue
        threads = {
            os.getpriority(os.PRIO_PROCESS, int(t.name))
            for t in Path(f"/proc/{pid}/task").iterdir()
        }
        expected = SCHEDULER_NICE if title.startswith(b"VLLM::EngineCore") else own
        assert threads == {expected}, (title[:40], threads)
    assert set(schedulers) <= set(titles)


def test_an_engine_starts_within_three_minutes_and_serves_metrics(vllm_kv_limited: VllmEngine):
    assert vllm_kv_limited.startup_s < 180
    command = vllm_kv_limited.engine.command
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert command[command.index("--max-num-seqs") + 1] == "64"
    assert "--device" not in command
    with urllib.request.urlopen(vllm_kv_limited.url + "/metrics", timeout=10) as response:
        parsed = parse_metrics(response.read().decode())
    assert parsed.engine == "vllm"
    assert parsed.value("running") == 0 and parsed.value("queued") == 0


def test_real_lines_match_readiness_capacity_and_scheduler_limits(vllm_tune_study: TuneRun):
    scan = _trial_scan(vllm_tune_study)

    def events(kind: EventKind) -> list[LogEvent]:
        return [event for event in scan.events if event.kind is kind]

    (ready,) = events(EventKind.ENGINE_READY)
    assert ready.text.endswith("Application startup complete.")
    (version,) = events(EventKind.ENGINE_VERSION)
    assert version.fields["version"] == "0.32.0"
    # 1 GiB of KV cache at 2,048 bytes a token
    (capacity,) = events(EventKind.KV_CACHE_CAPACITY)
    tokens = KV_CACHE_GIB * 2**30 // KV_BYTES_PER_TOKEN
    assert capacity.fields == {"device": "CPU", "tokens": tokens}
    (concurrency,) = events(EventKind.MAX_CONCURRENCY)
    assert concurrency.fields == {
        "max_model_len": MAX_MODEL_LEN,
        "concurrency": tokens / MAX_MODEL_LEN,
    }
    limits = {e.signature: e.fields for e in events(EventKind.SCHEDULER_LIMITS)}
    assert limits["vllm.max_model_len"] == {"max_model_len": MAX_MODEL_LEN}
    assert limits["vllm.scheduler_args"] == {
        "max_num_seqs": CAP,
        "max_model_len": MAX_MODEL_LEN,
        "max_running_requests": CAP,
    }
    assert not [e for e in scan.events if e.severity.value == "error"]


def test_the_kv_limited_engine_logs_its_12_blocks(vllm_kv_limited: VllmEngine):
    capacity = {
        e.signature: e.fields for e in _events(vllm_kv_limited, EventKind.KV_CACHE_CAPACITY)
    }
    assert capacity["vllm.num_gpu_blocks_override"]["blocks"] == KV_BLOCKS
    assert capacity["vllm.kv_cache_size_tokens"]["tokens"] == KV_BLOCKS * KV_BLOCK_TOKENS


def test_the_installed_vllm_is_the_cpu_build_and_refuses_gpu_knobs(
    vllm_spec: Callable[..., EngineSpec],
):
    spec = vllm_spec()
    assert is_cpu_build(spec)
    with pytest.raises(ConfigError, match="VLLM_CPU_KVCACHE_SPACE"):
        get_adapter("vllm").command(
            spec.model_copy(update={"knobs": Knobs(mem_fraction=0.5)}), host="127.0.0.1", port=1
        )


def test_every_flag_a_knob_maps_to_is_in_the_installed_vllm_help():
    accepted, why = installed_flags([str(VLLM_PYTHON), "-m", API_SERVER_MODULE, "--help=all"])
    assert accepted is not None, why
    switches = {"cuda_graphs", "prefix_cache", "ep"}
    wanted = {"--model", "--host", "--port", "--served-model-name"}
    for table in (KNOB_FLAGS, LAYOUT_FLAGS):
        for name, rule in table.items():
            for sample in [True, False] if name in switches else [2]:
                wanted |= {arg for arg in rule(sample) if arg.startswith("--")}
    assert wanted - accepted.flags == set()


def test_a_misspelt_flag_is_rejected_by_the_installed_vllm(
    vllm_spec: Callable[..., EngineSpec], tmp_path: Path
):
    spec = vllm_spec(extra_args=["--dtype", "float32", "--num-gpu-block-override", "12"])
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_defaults=True)))
    result = subprocess.run(
        [*SERVELAB, "engine", "check", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    check = json.loads(result.stdout)
    assert "(installed)" in check["flags_source"]
    assert [(p["flag"], p["suggestion"]) for p in check["unknown_flags"]] == [
        ("--num-gpu-block-override", "--num-gpu-blocks-override")
    ]


def test_a_flag_value_vllm_rejects_ends_the_launch_with_its_log_tail(
    vllm_spec: Callable[..., EngineSpec], tmp_path: Path
):
    """vLLM's own parser refuses the value before any engine process starts: not one of
    the suite's launches."""
    before = vllm_processes()
    spec = vllm_spec(extra_args=["--dtype", "float32", "--max-num-seqs", "many"])
    with pytest.raises(EngineLaunchError) as caught:
        launch_watched(spec, log_path=tmp_path / "engine.log")
    error = caught.value
    assert "vllm exited with code 2 while starting" in str(error)
    assert any(
        "argument --max-num-seqs: invalid int value: 'many'" in line for line in error.log_tail
    )
    assert any(finding.startswith("bad_argument: ") for finding in error.findings)
    assert vllm_processes() - before == set()
