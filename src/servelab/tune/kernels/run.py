"""Running an engine's own tuner, and staging the file it wrote where the engine reads it.

The tuner runs in a folder of its own (SGLang's writes into its working folder, vLLM's
into `--save-dir`), in its own process group so a timeout or Ctrl-C stops every worker it
started (both tuners fan out over the GPUs with Ray). What it wrote is checked: the file
this plan names, holding a table of batch size -> kernel config. A file under another
name means the plan and the tuner disagree about the shape, and is reported as such.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError, EngineSetupError
from servelab.core.processes import describe_exit, signal_group
from servelab.tune.kernels.plan import TUNER_SCRIPTS, KernelPlan

__all__ = ["DEFAULT_TUNER_TIMEOUT_S", "TUNER_LOG", "TunerRun", "run_tuner", "stage_config"]

DEFAULT_TUNER_TIMEOUT_S = 6 * 3600.0
"""A full search (about 2,000 tile configs at 18 batch sizes) takes hours on one GPU."""
TUNER_LOG = "tuner.log"
_STOP_GRACE_S = 10.0

TunerStatus = Literal["ok", "failed", "timeout", "no_file", "bad_file"]


class TunerRun(BaseModel):
    """What one run of the tuner did."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    argv: list[str]
    work_dir: str
    log: str = Field(description="The tuner's stdout and stderr.")
    status: TunerStatus
    exit_code: int | None = Field(description="None when it was stopped at the timeout.")
    elapsed_s: float
    file: str | None = Field(description="The file this plan names, when it wrote it.")
    other_files: list[str] = Field(description="Config files it wrote under other names.")
    batch_sizes: list[int] = Field(description="The batch sizes its table covers.")
    message: str | None = Field(description="What went wrong, in one line.")

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def run_tuner(
    plan: KernelPlan,
    *,
    work_dir: Path,
    timeout_s: float = DEFAULT_TUNER_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> TunerRun:
    """Run the plan's tuner in `work_dir` (created), with `env` over this environment."""
    if plan.tuner is None:
        raise ConfigError(plan.tuner_unavailable or f"no tuner for {plan.engine}")
    if not plan.tuner.script_found:
        raise EngineSetupError(
            f"no {plan.engine} tuner at {plan.tuner.script}: {TUNER_SCRIPTS[plan.engine]} is in "
            f"{plan.engine}'s source tree, not its wheel; give --tuner PATH"
        )
    work_dir.mkdir(parents=True, exist_ok=True)
    argv = plan.tuner.argv_in(work_dir)
    log_path = work_dir / TUNER_LOG
    started = time.monotonic()
    with log_path.open("wb") as log:
        try:
            process = subprocess.Popen(
                argv,
                cwd=work_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        except OSError as exc:
            raise EngineSetupError(f"cannot start the tuner {argv[0]}: {exc.strerror}") from None
        code = _wait(process, timeout_s)
    elapsed = time.monotonic() - started

    def result(status: TunerStatus, message: str | None, **found: object) -> TunerRun:
        return TunerRun.model_validate(
            {
                "argv": argv,
                "work_dir": str(work_dir),
                "log": str(log_path),
                "status": status,
                "exit_code": code,
                "elapsed_s": round(elapsed, 3),
                "file": None,
                "other_files": [],
                "batch_sizes": [],
                "message": message,
                **found,
            }
        )

    if code is None:
        return result("timeout", f"the tuner ran past {timeout_s:g} s and was stopped")
    if code != 0:
        return result(
            "failed", f"the tuner ended with {describe_exit(code)}: {_last_line(log_path)}"
        )
    target = work_dir / plan.file_name
    if not target.is_file():
        others = sorted(p.name for p in work_dir.glob("E=*.json"))
        why = f"it wrote {', '.join(others)} instead" if others else "it wrote no config file"
        return result("no_file", f"no {plan.file_name}: {why}", other_files=others)
    sizes = _batch_sizes(target)
    if sizes is None:
        return result("bad_file", f"{target} is not a table of batch size -> kernel config")
    return result("ok", None, file=str(target), batch_sizes=sizes)


def stage_config(plan: KernelPlan, tuned: Path, root: Path) -> Path:
    """A new folder `root` for the plan's user-folder variable, holding `tuned` where the
    engine looks and every file it would have found without the variable; returns `root`.

    vLLM reads its own folder after the user's, so only a user folder already set is
    copied; SGLang reads the user's in place of its own, so its configs/ tree is.
    """
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ConfigError(f"staging folder {root} exists and is not empty")
    root.mkdir(parents=True, exist_ok=True)
    if plan.engine == "vllm":
        if plan.user_folder and Path(plan.user_folder).is_dir():
            for existing in Path(plan.user_folder).glob("*.json"):
                shutil.copy2(existing, root / existing.name)
    else:
        configs = Path(plan.user_folder) / "configs" if plan.user_folder else None
        configs = configs or (Path(plan.config_dir) if plan.config_dir else None)
        if configs is not None and configs.is_dir():
            shutil.copytree(configs, root / "configs", dirs_exist_ok=True)
    target = plan.staged_path(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(tuned, target)
    return root


def _wait(process: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """The exit code, or None after stopping the whole group at the timeout."""
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(process)
        return None
    except BaseException:  # Ctrl-C: the tuner's GPU workers must not outlive us
        _stop(process)
        raise


def _stop(process: subprocess.Popen[bytes]) -> None:
    signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        signal_group(process.pid, signal.SIGKILL)
        process.wait()
    signal_group(process.pid, signal.SIGKILL)  # what is left of the group


def _batch_sizes(path: Path) -> list[int] | None:
    """The table's batch sizes; None unless it is {int: {param: value}} (vLLM adds
    "triton_version")."""
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(table, dict):
        return None
    rows = {k: v for k, v in table.items() if k != "triton_version"}
    if not rows or not all(k.isdigit() and isinstance(v, dict) and v for k, v in rows.items()):
        return None
    return sorted(int(k) for k in rows)


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else "no output"
