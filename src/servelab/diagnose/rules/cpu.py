"""`cpu_bound` and `cpu_contention`: on a CPU engine, the cores decided the knee.

On a CPU the engine's compute is its threads: once they are busy every step, more load
only queues. What shows it, independently:

- the engine's processes' CPU time over each level (`engine_cpu`, from /proc): at the knee
  they keep at least SATURATED of the engine's threads busy (OMP_NUM_THREADS from its
  spec, else every core it may use);
- the sweep: past the knee TPOT grows with the batch (each step computes for more
  sequences) while throughput stays;
- the machine: the cores busy in all (/proc/stat) against the cores there are, which says
  whether a core is free to give the engine.

When the engine got fewer cores than its threads while the machine was busy anyway, the
limit was other work on the machine (the load generator, another program): the run then
measured a share of the engine, and `cpu_contention` says so with the numbers. An engine
that had idle threads and a machine with idle cores was not held by the CPU: neither
finding is made.
"""

from __future__ import annotations

import math
from typing import Any

from servelab.diagnose.actions import text_action
from servelab.diagnose.deployment import launched_spec
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import (
    Action,
    ActionTarget,
    Evidence,
    ExpectedGain,
    Finding,
    FindingKind,
    Severity,
    Tally,
)
from servelab.diagnose.signals import engine_on_cpu, fmt
from servelab.probe.sysfs import parse_cpulist
from servelab.telemetry.process_cpu import EngineCpu

__all__ = ["HOST_BUSY", "SATURATED", "rule"]

SATURATED = 0.85
"""The engine's threads count as busy at 85% of them: between steps the server's own
Python (HTTP, detokenising) runs on one of them, and a sample spans the level's ramp."""
HOST_BUSY = 0.9
"""The machine counts as busy with 90% of its cores in use: a core less than that stays
for the kernel, interrupts and the reading itself."""

_THREAD_ENV = ("OMP_NUM_THREADS",)
_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
"""vLLM's CPU build runs one compute thread per core its binding lists."""
_THREAD_ENGINES = frozenset({"embedded", "transformers"})
"""Engines whose compute threads are torch's intra-op pool, sized by OMP_NUM_THREADS."""
_WEIGHTS = {"engine cpu": 0.6, "sweep": 0.3, "machine": 0.3}


def rule(facts: RunFacts) -> list[Finding]:
    device = engine_on_cpu(facts.summary, facts.probe)
    knee = _busiest_from_the_knee(facts)
    if device is None or knee is None or knee.summary.engine_cpu is None:
        return []
    cpu = knee.summary.engine_cpu
    threads, threads_source = _threads(facts, cpu)
    if threads is None:
        return []
    used = Evidence(
        what=f"cores the engine kept busy at {knee.label}",
        value=fmt(cpu.cores),
        unit=f"of {threads} thread(s)",
        source=f"{knee.source} engine_cpu ({cpu.source})",
    )
    thread_evidence = Evidence(
        what="the engine's compute threads", value=threads, source=threads_source
    )
    seen = [device, used, thread_evidence, *_starved(facts)]
    if cpu.cores >= SATURATED * threads:
        return [_bound(facts, knee, cpu, threads, seen)]
    if _host_busy(cpu):
        return [_contention(knee, cpu, threads, seen)]
    return []


def _starved(facts: RunFacts) -> list[Evidence]:
    """The launcher's own word that no core was left to the load generator (a machine of
    one usable core: engines.cpu_share), where it said so."""
    share = (facts.summary.engine or {}).get("cpu_share")
    if not isinstance(share, dict) or not share.get("starved"):
        return []
    return [
        Evidence(
            what="cores left to the load generator when the engine was launched",
            value=0,
            source=f"summary.json engine cpu_share: {share['starved']}",
        )
    ]


def _bound(
    facts: RunFacts, knee: LevelFacts, cpu: EngineCpu, threads: int, seen: list[Evidence]
) -> Finding:
    tally = Tally()
    tally.add("engine cpu", _WEIGHTS["engine cpu"], seen)
    tally.add("sweep", _WEIGHTS["sweep"], _tpot_grows(facts, facts.knee_level() or knee))
    free = _free_cores(cpu)
    if free is not None:
        tally.note(
            Evidence(
                what=f"cores busy on the machine at {knee.label}",
                value=fmt(cpu.host_busy_cores or 0.0),
                unit=f"of {cpu.host_cores}",
                source=f"{knee.source} engine_cpu (/proc/stat)",
            )
        )
    more = math.floor(free) if free is not None else 0
    actions: list[Action]
    gain = None
    if more >= 1:
        actions = [_threads_action(facts, threads + more, more)]
        gain = ExpectedGain(
            factor=fmt((threads + more) / threads),
            metric="total throughput",
            at=knee.label,
            source="engine threads (an upper bound: compute scales at most with its threads)",
            text=f"at most {(threads + more) / threads:.2g}x, if the steps scale with threads",
            low=1.0,
            high=fmt((threads + more) / threads),
        )
    else:
        busy = (
            f"{cpu.host_busy_cores:.1f} of {cpu.host_cores} cores were busy"
            if free is not None
            else "the machine's idle cores were not measured"
        )
        # Not a setting of this engine on this machine: a thread on a core the load
        # generator also uses stalls the steps (OpenMP threads spin while they wait). What
        # has to change first is the machine (more cores) or where the load is sent from.
        actions = [
            Action(
                target=ActionTarget.OUTSIDE,
                text=f"no whole core was idle to give it on this machine ({busy} at "
                f"{knee.label}), and a thread sharing the load generator's core stalls the "
                "steps; with more cores, or the load sent from another machine (servelab "
                "bench --url), give it more threads (env OMP_NUM_THREADS)",
                available=False,
            )
        ]
    return Finding(
        kind=FindingKind.CPU_BOUND,
        title=f"the engine's {threads} CPU thread(s) were busy past the knee ({knee.label})",
        severity=Severity.WARNING,
        confidence=tally.confidence,
        evidence=tally.evidence,
        explanation=(
            f"On the CPU the engine computes on its {threads} thread(s); at {knee.label} they "
            f"were {cpu.cores / threads:.0%} busy, so each step of a larger batch took "
            "longer and throughput stopped growing: more load only queued."
        ),
        actions=actions,
        expected_gain=gain,
        missing=[] if free is not None else ["the machine's busy cores (/proc/stat)"],
        levels=[lv.level for lv in [knee, *facts.after_knee()]],
        impact=max(0.0, 1 - 1 / gain.factor) if gain else 0.2,
    )


def _contention(knee: LevelFacts, cpu: EngineCpu, threads: int, seen: list[Evidence]) -> Finding:
    client = _client_cores(knee)
    other = max(0.0, (cpu.host_busy_cores or 0.0) - cpu.cores - client)
    evidence = [
        *seen,
        Evidence(
            what=f"cores busy on the machine at {knee.label}",
            value=fmt(cpu.host_busy_cores or 0.0),
            unit=f"of {cpu.host_cores}",
            source=f"{knee.source} engine_cpu (/proc/stat)",
        ),
        Evidence(
            what="the load generator's cores (busiest worker x workers, at most)",
            value=fmt(client),
            source=f"{knee.source} client",
        ),
    ]
    return Finding(
        kind=FindingKind.CPU_CONTENTION,
        title=f"the engine got {cpu.cores:.2g} core(s) for {threads} thread(s): the machine "
        f"was busy ({knee.label})",
        severity=Severity.WARNING,
        confidence=0.6,
        evidence=evidence,
        explanation=(
            f"The machine's {cpu.host_cores} cores were {cpu.host_busy_cores or 0:.1f} busy "
            f"while the engine used {cpu.cores:.2g} of its {threads} thread(s): the load "
            f"generator took about {client:.2g} and other work about {other:.2g}. The run "
            "measured the share of the CPU the engine was given, not the engine."
        ),
        actions=[
            text_action(
                "stop the other work on this machine, or measure on a quiet one; with the "
                "client on another machine (servelab bench --url) its cores go to the engine"
            )
        ],
        levels=[knee.level],
        impact=0.3,
        missing=[
            "what the engine measures with the cores the other work took: this run "
            "measured the share it was given, so no gain is stated"
        ],
    )


def _busiest_from_the_knee(facts: RunFacts) -> LevelFacts | None:
    """The level, from the knee on (the last level without a knee), where the engine used
    the most CPU: saturation shows where the load is highest, and the knee's own level may
    still be ramping up to it."""
    knee = facts.knee_level()
    levels = [knee, *facts.after_knee()] if knee is not None else facts.closed[-1:]
    measured = [lv for lv in levels if lv.summary.engine_cpu is not None]
    if not measured:
        return None
    return max(measured, key=lambda lv: lv.summary.engine_cpu.cores if lv.summary.engine_cpu else 0)


def _threads(facts: RunFacts, cpu: EngineCpu) -> tuple[int | None, str]:
    env = _spec(facts).get("env")
    if not isinstance(env, dict):
        env = {}
    for name in _THREAD_ENV:
        text = str(env.get(name, ""))
        if text.isdigit() and int(text) > 0:
            return int(text), f"summary.json engine spec env {name}"
    bound = _bound_cpus(str(env.get(_BIND_ENV, "")))
    if bound:
        return bound, f"summary.json engine spec env {_BIND_ENV} (one thread a core)"
    return cpu.host_cores, "the cores it may use (no thread count in its spec)"


def _bound_cpus(text: str) -> int | None:
    """The CPUs a vLLM CPU binding lists ("0-3|4,5": each rank's cpulist), or None where it
    names none (`auto`, `nobind`, unset)."""
    try:
        return sum(len(parse_cpulist(rank)) for rank in text.split("|")) or None
    except ValueError:
        return None


def _spec(facts: RunFacts) -> dict[str, Any]:
    return launched_spec(facts.summary) or {}


def _host_busy(cpu: EngineCpu) -> bool:
    if cpu.host_busy_cores is None or not cpu.host_cores:
        return False
    return cpu.host_busy_cores >= HOST_BUSY * cpu.host_cores


def _free_cores(cpu: EngineCpu) -> float | None:
    if cpu.host_busy_cores is None or not cpu.host_cores:
        return None
    return max(0.0, cpu.host_cores - cpu.host_busy_cores)


def _client_cores(level: LevelFacts) -> float:
    client = level.summary.client
    return 0.0 if client is None else client.workers * client.max_cpu_pct / 100


def _tpot_grows(facts: RunFacts, knee: LevelFacts) -> list[Evidence]:
    """TPOT past the knee above the knee's: steps got longer as the batch grew."""
    after = facts.after_knee()
    base = knee.tpot_ms
    if not after or base is None or base <= 0:
        return []
    last = after[-1]
    if last.tpot_ms is None or last.tpot_ms <= base:
        return []
    return [
        Evidence(
            what=f"TPOT at {last.label} / at {knee.label}",
            value=fmt(last.tpot_ms / base),
            unit="x",
            source=f"{knee.source}, {last.source}",
        )
    ]


def _threads_action(facts: RunFacts, threads: int, more: int) -> Action:
    name = facts.engine.name or ""
    if name in _THREAD_ENGINES:
        return Action(
            target=ActionTarget.ENGINE,
            text=f"give the engine {more} more thread(s), on cores that were idle: "
            f"env: {{OMP_NUM_THREADS: {threads}}} in its spec",
            knob="env.OMP_NUM_THREADS",
            value=threads,
            engine=name,
            flags=[f"OMP_NUM_THREADS={threads}"],
        )
    setting = f"env {_BIND_ENV}" if name == "vllm" else "its own thread setting"
    return text_action(
        f"give the engine {more} more thread(s) on the cores that were idle ({setting})",
        ActionTarget.ENGINE,
    )
