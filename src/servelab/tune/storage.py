"""Where a study lives: a SQLite file in its folder, or a database several hosts share.

Both are Optuna RDB storages with a heartbeat: a worker that dies mid-trial stops beating,
and once its trial is two heartbeats stale the next worker to start a trial marks it failed
and enqueues a copy (RetryHeartbeatStaleTrialCallback), so the settings are measured after
all. `postgresql://` is read with psycopg 3 when psycopg2 is not installed.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from servelab.core.errors import ConfigError

if TYPE_CHECKING:
    import optuna

__all__ = [
    "DEFAULT_HEARTBEAT_S",
    "STUDY_DB",
    "display_url",
    "open_storage",
    "storage_url",
]

STUDY_DB = "study.db"
DEFAULT_HEARTBEAT_S = 30
"""A running trial's worker writes a heartbeat this often; twice as long without one and
the trial counts as its worker's death."""
MAX_RETRIES = 2
_SCHEMES = ("sqlite", "postgresql", "mysql")


def storage_url(given: str | None, study_dir: Path) -> str:
    """The SQLAlchemy URL of the study's storage: `given`, or study.db in its folder."""
    if given is None:
        return f"sqlite:///{(study_dir / STUDY_DB).resolve()}"
    scheme = urlsplit(given).scheme
    family = scheme.split("+", 1)[0]
    if family not in _SCHEMES:
        raise ConfigError(
            f"--storage {display_url(given)!r} is not a database URL",
            hint="sqlite:///path/study.db or postgresql://user@host:5432/db",
        )
    if scheme == "postgresql" and importlib.util.find_spec("psycopg2") is None:
        if importlib.util.find_spec("psycopg") is None:
            raise ConfigError(
                "no PostgreSQL driver installed", hint="pip install 'servelab[postgres]'"
            )
        return "postgresql+psycopg" + given[len("postgresql") :]
    return given


def display_url(url: str) -> str:
    """The URL with its password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    netloc = f"{parts.username}:***@{host}" if parts.username else f"***@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


def open_storage(url: str, *, heartbeat_s: int = DEFAULT_HEARTBEAT_S) -> optuna.storages.RDBStorage:
    """The storage, with the heartbeat and the retry of dead workers' trials; a storage that
    cannot be reached is one ConfigError line."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    if heartbeat_s < 1:
        raise ConfigError("the heartbeat interval must be at least 1 s")
    engine_kwargs = (
        {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    )
    with warnings.catch_warnings():
        # The heartbeat is marked experimental in Optuna; it is what retries dead trials.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat_s,
                grace_period=2 * heartbeat_s,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                    max_retry=MAX_RETRIES
                ),
            )
        except (SQLAlchemyError, OSError, ValueError, ImportError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"cannot open the study storage {display_url(url)}: {reason}"
            ) from None
