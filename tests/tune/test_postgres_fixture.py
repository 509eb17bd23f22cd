"""The throwaway PostgreSQL cluster: its version, Optuna studies on it, and a stop that
leaves no process behind."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import psycopg
import pytest
import sqlalchemy

from servelab.core.processes import proc_stat
from tests.tune import postgres
from tests.tune.postgres import (
    PostgresCluster,
    child_pids,
    require_postgres,
    start_cluster,
    stop_cluster,
)


def test_cluster_is_postgres_15_on_loopback_only(postgres_url: str) -> None:
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            version = connection.execute(sqlalchemy.text("select version()")).scalar_one()
            listen = connection.execute(sqlalchemy.text("show listen_addresses")).scalar_one()
            connections = connection.execute(sqlalchemy.text("show max_connections")).scalar()
    finally:
        engine.dispose()
    assert version.startswith("PostgreSQL 15.")
    assert listen == "127.0.0.1"
    assert int(connections) == postgres.MAX_CONNECTIONS


def test_fresh_database_is_empty_and_apart(fresh_database: str, postgres_url: str) -> None:
    assert fresh_database != postgres_url
    engine = sqlalchemy.create_engine(fresh_database)
    try:
        assert sqlalchemy.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


@pytest.mark.filterwarnings(
    "ignore:Argument ``heartbeat_interval``:optuna.exceptions.ExperimentalWarning"
)
def test_two_optuna_studies_share_a_database(fresh_database: str) -> None:
    first = _storage(fresh_database)
    for name, x in (("alpha", 1.0), ("beta", 2.0)):
        study = optuna.create_study(study_name=name, storage=first)
        study.optimize(lambda trial, x=x: trial.suggest_float("x", x, x) ** 2, n_trials=2)

    second = _storage(fresh_database)
    try:
        names = sorted(s.study_name for s in optuna.get_all_study_summaries(second))
        assert names == ["alpha", "beta"]
        for name, x in (("alpha", 1.0), ("beta", 2.0)):
            trials = optuna.load_study(study_name=name, storage=second).trials
            assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2
            assert [t.value for t in trials] == [x**2, x**2]
    finally:
        first.engine.dispose()
        second.engine.dispose()


def test_stop_leaves_no_process_and_no_folder() -> None:
    cluster = start_cluster(require_postgres())
    processes = _cluster_processes(cluster)
    stop_cluster(cluster)
    _assert_gone(cluster, processes)


def test_stop_signals_the_cluster_when_pg_ctl_fails() -> None:
    cluster = start_cluster(require_postgres())
    processes = _cluster_processes(cluster)
    # No pg_ctl there: stop_cluster signals the postmaster itself.
    stop_cluster(dataclasses.replace(cluster, bindir=Path("/nonexistent")))
    _assert_gone(cluster, processes)


@pytest.mark.parametrize("ci", ["", "true", "1"])
def test_missing_postgres_skips_or_fails_with_ci(ci: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "find_bindir", lambda: None)
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected) as raised:
        require_postgres()
    assert str(raised.value).startswith((f"CI={ci} and " if ci else "") + "no PostgreSQL 15 ")
    assert postgres.INSTALL_HINT in str(raised.value)


def _storage(url: str) -> optuna.storages.RDBStorage:
    return optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=3)


def _cluster_processes(cluster: PostgresCluster) -> list[int]:
    """The postmaster and its children (checkpointer, walwriter, ... at least)."""
    children = child_pids(cluster.pid)
    assert children, "a running postmaster has background processes"
    return [cluster.pid, *children]


def _assert_gone(cluster: PostgresCluster, processes: list[int]) -> None:
    assert cluster.process.returncode is not None, "the postmaster was reaped"
    assert [pid for pid in processes if _running(pid)] == []
    assert not cluster.folder.exists()
    with pytest.raises(psycopg.OperationalError):
        cluster.connect().close()


def _running(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has)."""
    stat = proc_stat(pid)
    return stat is not None and stat.state != "Z"
