"""Engine settings read against the machine: the story's launch on the story's VM, and
each rule on recorded GPU boxes (an NVSwitch box with P2P, the same box on PCIe only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.engines.base import EngineSpec
from servelab.engines.machine_check import machine_verdicts
from servelab.probe.verdict import Severity, Verdict
from tests.diagnose.probes import story_vm_probe
from tests.probe.test_gpus import inventory, nvlink_box, nvlink_box_sysfs

STORY_ENV = {"NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "5", "NCCL_MIN_NCHANNELS": "8"}


@pytest.fixture
def story(tmp_path: Path) -> dict[str, Any]:
    """The story's KVM box: P2P NS on every pair, 12 KB copies in 13.7 µs, no InfiniBand."""
    return json.loads(story_vm_probe(tmp_path / "story", with_facts=True).read_text())


def box(tmp_path: Path, *, nvlink: bool = True, infiniband: list[str] | None = None) -> dict:
    """Eight H200s with P2P on every pair: over NVSwitch, or (nvlink=False) over PCIe."""
    document = nvlink_box()
    if not nvlink:
        for device in document["devices"]:
            device["nvlinks"] = []
    found = inventory(document, nvlink_box_sysfs(tmp_path / f"sysfs-{nvlink}"))
    return {
        "schema": "servelab.probe/1",
        "gpus": found.model_dump(mode="json"),
        "host": {"infiniband_devices": infiniband or []},
    }


def check(document: dict, env: dict[str, str] | None = None, **layout: Any) -> dict[str, Verdict]:
    spec = EngineSpec(engine="sglang", model="glm-5-nvfp4", env=env or {}, **layout)
    verdicts = machine_verdicts(spec, spec.env, document, source="probe.json")
    return {v.code: v for v in verdicts}


def test_the_story_launch_gets_the_p2p_level_warning(story: dict) -> None:
    found = check(story, STORY_ENV, tp=8)
    level = found["nccl-p2p-level-without-p2p"]
    assert level.severity is Severity.WARNING
    assert "NCCL_P2P_LEVEL=5 (in the spec): NCCL reads it as SYS" in level.evidence[0]
    assert "28 of 28 pairs" in level.evidence[1]
    assert "13.7 µs" in level.evidence[2]
    assert "Drop NCCL_P2P_LEVEL" in level.action
    ib = found["nccl-ib-without-infiniband"]
    assert ib.severity is Severity.INFO and "harmless" in ib.title
    assert "nccl-channels-out-of-range" not in found  # 8 channels are within NCCL's range
    group = found["tp-group-without-p2p"]
    model = next(line for line in group.evidence if line.startswith("model ("))
    assert "calibrated by the probe" in model and "tp 4 x pp 2 gives" in model
    assert "x from tp 4 x pp 2" in group.title


def test_through_the_cli_with_a_probe_file(tmp_path: Path) -> None:
    probe = story_vm_probe(tmp_path / "story", with_facts=True)
    env = [arg for name, value in STORY_ENV.items() for arg in ("--env", f"{name}={value}")]
    base = ["engine", "check", "--engine", "sglang", "--model", "glm-5-nvfp4", "--recorded"]
    result = CliRunner().invoke(app, [*base, "--tp", "8", *env, "--probe", str(probe), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    codes = [v["code"] for v in document["machine"]]
    assert codes[:2] == ["nccl-p2p-level-without-p2p", "tp-group-without-p2p"]
    assert document["machine_source"] == str(probe)
    text = CliRunner().invoke(app, [*base, "--tp", "8", *env, "--probe", str(probe)])
    assert "warning  nccl-p2p-level-without-p2p" in text.stdout
    assert "fix: Drop NCCL_P2P_LEVEL" in text.stdout


def test_a_layout_larger_than_the_machine_exits_2_in_one_line(tmp_path: Path) -> None:
    probe = story_vm_probe(tmp_path / "story", with_facts=True)
    args = ["engine", "check", "--engine", "sglang", "--model", "m", "--recorded"]
    result = CliRunner().invoke(app, [*args, "--tp", "8", "--dp", "2", "--probe", str(probe)])
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("error: The layout needs 16 GPUs (tp 8 x pp 1 x dp 2); 8 are visible")
    )


def test_levels_that_do_not_reach_the_pairs_and_unknown_levels(story: dict) -> None:
    assert "nccl-p2p-level-without-p2p" not in check(story, {"NCCL_P2P_LEVEL": "LOC"}, tp=8)
    assert "nccl-p2p-level-without-p2p" not in check(story, {"NCCL_P2P_LEVEL": "PIX"}, tp=8)
    assert "nccl-p2p-level-without-p2p" in check(story, {"NCCL_P2P_LEVEL": "PHB"}, tp=8)
    ignored = check(story, {"NCCL_P2P_LEVEL": "sys"}, tp=8)["nccl-env-ignored"]
    assert "not one of LOC" in ignored.title  # NCCL compares case-sensitively


def test_p2p_disabled_where_p2p_works(tmp_path: Path) -> None:
    document = box(tmp_path)
    disabled = check(document, {"NCCL_P2P_DISABLE": "1"}, tp=8)["nccl-p2p-disabled"]
    assert disabled.severity is Severity.WARNING and "all 28 pairs (NVL)" in disabled.evidence[1]
    assert "nccl-env-ignored" in check(document, {"NCCL_P2P_DISABLE": "true"}, tp=8)
    assert check(document, {"NCCL_P2P_LEVEL": "SYS"}, tp=8) == {}


def test_shm_disabled_costs_most_without_p2p(story: dict, tmp_path: Path) -> None:
    env = {"NCCL_SHM_DISABLE": "1"}
    assert check(story, env, tp=8)["nccl-shm-disabled"].severity is Severity.WARNING
    assert check(box(tmp_path), env, tp=8)["nccl-shm-disabled"].severity is Severity.INFO


@pytest.mark.parametrize(
    ("env", "words", "severity"),
    [
        ({"NCCL_MAX_NCHANNELS": "0"}, "below 1", Severity.WARNING),
        ({"NCCL_MIN_NCHANNELS": "128"}, "capped at 64", Severity.INFO),
        ({"NCCL_MAX_NCHANNELS": "48"}, "before 2.25 caps it at 32", Severity.INFO),
        ({"NCCL_MIN_NCHANNELS": "16", "NCCL_MAX_NCHANNELS": "8"}, "contradict", Severity.WARNING),
    ],
)
def test_channel_counts(story: dict, env: dict, words: str, severity: Severity) -> None:
    found = check(story, env)["nccl-channels-out-of-range"]
    assert words in found.title and found.severity is severity


def test_nvls_needs_an_nvswitch_and_ib_variables_need_a_device(tmp_path: Path) -> None:
    env = {"NCCL_NVLS_ENABLE": "1", "NCCL_IB_HCA": "mlx5_0"}
    on_switch = check(box(tmp_path, infiniband=["mlx5_0"]), env, tp=8)
    assert on_switch == {}
    on_pcie = check(box(tmp_path, nvlink=False), env, tp=8)
    assert on_pcie["nccl-nvls-without-nvswitch"].severity is Severity.INFO
    assert "no NVLink between the GPUs" in on_pcie["nccl-nvls-without-nvswitch"].evidence
    assert "nccl-ib-without-infiniband" in on_pcie


def test_cuda_visible_devices_naming_gpus_that_are_not_there(tmp_path: Path) -> None:
    document = box(tmp_path)
    found = check(document, {"CUDA_VISIBLE_DEVICES": "0,1,9,2"}, tp=2)
    absent = found["cuda-visible-devices-absent"]
    assert absent.severity is Severity.ERROR and "9, 2" in absent.title
    by_uuid = "GPU-00000000-0000-0000-0000-000000000103,GPU-00000000-0000-0000-0000-000000000105"
    assert check(document, {"CUDA_VISIBLE_DEVICES": by_uuid}, tp=2) == {}
    too_few = check(document, {"CUDA_VISIBLE_DEVICES": "0,1"}, tp=4)["layout-exceeds-gpus"]
    assert "2 left by CUDA_VISIBLE_DEVICES=0,1" in too_few.evidence[1]


def test_a_probe_with_only_measurements_still_gives_the_p2p_rules(tmp_path: Path) -> None:
    document = json.loads(story_vm_probe(tmp_path / "comm-only").read_text())
    assert "gpus" not in document
    found = check(document, {"NCCL_P2P_LEVEL": "SYS"}, tp=8)
    assert "nccl-p2p-level-without-p2p" in found and "tp-group-without-p2p" in found
