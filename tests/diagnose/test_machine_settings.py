"""diagnose reads the launched spec (summary.json) against the run's probe.json."""

from __future__ import annotations

from pathlib import Path

from servelab.diagnose.findings import FindingKind
from servelab.engines.base import EngineSpec
from servelab.engines.spec import spec_yaml
from servelab.probe.verdict import Severity
from tests.diagnose.builders import diagnose, level, summary, write_run
from tests.diagnose.probes import story_vm_probe

STORY = EngineSpec(
    engine="sglang",
    model="glm-5-nvfp4",
    tp=8,
    env={"NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "5", "NCCL_MIN_NCHANNELS": "8"},
)


def _run(tmp_path: Path, spec: EngineSpec | None, *, probe: bool = True) -> Path:
    engine = None if spec is None else {"engine": spec.engine, "spec": spec_yaml(spec)}
    levels = [level(0, 32, total_tps=438.67, tpot_ms=114.58, ttft_ms=900)]
    path = story_vm_probe(tmp_path / "probe", with_facts=True) if probe else None
    return write_run(tmp_path / "run", summary(levels, engine=engine), probe=path)


def test_the_story_run_names_the_p2p_level_and_the_tp_group(tmp_path: Path) -> None:
    found = [
        f
        for f in diagnose(_run(tmp_path, STORY)).findings
        if f.kind is FindingKind.SETTINGS_CONTRADICT_MACHINE
    ]
    titles = [f.title for f in found]
    assert titles[0].startswith("NCCL_P2P_LEVEL=5 asks for P2P between GPUs")
    assert any(t.startswith("The tensor-parallel group of 8 GPUs has no P2P") for t in titles)
    level_finding = found[0]
    assert level_finding.severity is Severity.WARNING
    whats = {e.what: e.value for e in level_finding.evidence}
    assert whats["NCCL_P2P_LEVEL=5 (in the spec)"].startswith("NCCL reads it as SYS")
    assert "Drop NCCL_P2P_LEVEL" in level_finding.actions[0].text
    assert level_finding.actions[0].target == "engine"  # the spec's env, not the machine


def test_no_spec_or_no_probe_says_nothing(tmp_path: Path) -> None:
    for run in (_run(tmp_path / "a", None), _run(tmp_path / "b", STORY, probe=False)):
        kinds = [f.kind for f in diagnose(run).findings]
        assert FindingKind.SETTINGS_CONTRADICT_MACHINE not in kinds
