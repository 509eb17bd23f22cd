"""A throwaway PostgreSQL 15 cluster for the tests of shared Optuna studies.

`start_cluster` runs `initdb` into a fresh folder under the temporary directory and starts
`postgres` on 127.0.0.1 (nothing else: `listen_addresses`), on a free port, with its unix
socket in that folder; `stop_cluster` stops it (`pg_ctl stop -m immediate`; if that fails,
SIGQUIT to the postmaster's group, then SIGKILL) and removes the folder. Authentication is
`trust`: the cluster lives for one test session and only this machine can reach it.

initdb, pg_ctl and postgres all refuse to run as root. As root (CI, containers) the folder is
chowned to the `postgres` user and they run as that user: `Popen(user=, group=,
extra_groups=[])` drops to it in the child, with no PAM session and no `runuser` to depend
on, and with the folder as working directory (postgres cannot read root's). The folder's
parents must let `postgres` through, so it goes under the first of `$TMPDIR` and /tmp that
does (pytest's own tmp folders under /tmp/pytest-of-root are 0700). As any other user the
programs run as that user.

`require_postgres` skips the calling test where PostgreSQL 15 is missing, or fails it with
`CI=true`; `tools/install-test-services.sh` installs it (Debian's `postgresql-15`).
"""

from __future__ import annotations

import functools
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from servelab.core.net import LOCALHOST, free_port
from servelab.core.processes import (
    all_proc_stats,
    describe_exit,
    request_parent_death_signal,
    signal_group,
)
from tests.ci import missing

__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "DEFAULT_STOP_TIMEOUT_S",
    "INSTALL_HINT",
    "MAX_CONNECTIONS",
    "SUPERUSER",
    "PostgresCluster",
    "PostgresError",
    "child_pids",
    "create_database",
    "find_bindir",
    "require_postgres",
    "start_cluster",
    "stop_cluster",
]

DEFAULT_START_TIMEOUT_S = 30.0
"""Limit for initdb and for the server to accept connections; both take about a second."""

DEFAULT_STOP_TIMEOUT_S = 10.0
"""How long `pg_ctl stop -m immediate` may take before the process group is killed."""

MAX_CONNECTIONS = 100
"""Enough for four tuning workers, each with an Optuna RDBStorage whose SQLAlchemy pool
(5 + 10 overflow) its heartbeat thread shares, plus the tests' own connections."""

SUPERUSER = "postgres"
"""The cluster's superuser (`initdb -U`), whoever runs the tests; also the OS user the
programs run as when the tests run as root."""

INSTALL_HINT = "tools/install-test-services.sh (as root) installs Debian's postgresql-15"

_MAJOR = 15
_DEBIAN_BINDIR = Path(f"/usr/lib/postgresql/{_MAJOR}/bin")
_PROGRAMS = ("initdb", "pg_ctl", "postgres")

_SERVER_SETTINGS = {
    "listen_addresses": LOCALHOST,
    "max_connections": str(MAX_CONNECTIONS),
    "shared_buffers": "16MB",
    # Durability buys nothing for a cluster deleted at the end of the session.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}

_SOCKET_PATH_MAX = 107
"""Longest unix socket path Linux takes (`sun_path` less its NUL)."""

_SOCKET_SUFFIX_LEN = len("/servelab-pg-XXXXXXXX/.s.PGSQL.65535")
_PORT_ATTEMPTS = 3
"""Starts tried on fresh ports when another process takes the free port first."""

_PORT_TAKEN = "Address already in use"
_POLL_S = 0.05
_LOG_TAIL_LINES = 20

_QUIT_WITH_TESTS = functools.partial(request_parent_death_signal, signal.SIGQUIT)
"""A postmaster whose pytest was SIGKILLed shuts down at once (SIGQUIT) instead of lingering."""


class PostgresError(RuntimeError):
    """The cluster could not be made, started or reached; the message ends with the log."""


@dataclass(frozen=True)
class PostgresCluster:
    """A running throwaway cluster; `process` is its postmaster, leader of its own group."""

    bindir: Path
    folder: Path
    """Holds `data/`, `server.log` and the unix socket; removed by `stop_cluster`."""
    port: int
    process: subprocess.Popen[bytes]
    run_as: pwd.struct_passwd | None
    """The `postgres` user when the tests run as root, else None (the programs run as us)."""

    @property
    def pid(self) -> int:
        """The postmaster's pid, which is also its process group's id."""
        return self.process.pid

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of `database` on this cluster (psycopg 3 driver)."""
        return f"postgresql+psycopg://{SUPERUSER}@{LOCALHOST}:{self.port}/{database}"

    def connect(self, database: str = "postgres") -> psycopg.Connection[Any]:
        """An autocommit psycopg connection as the superuser, over TCP."""
        return psycopg.connect(
            host=LOCALHOST,
            port=self.port,
            user=SUPERUSER,
            dbname=database,
            connect_timeout=2,
            autocommit=True,
        )


def find_bindir() -> Path | None:
    """The folder with PostgreSQL 15's initdb, pg_ctl and postgres: Debian's, else
    `pg_config --bindir`, else the one on PATH; None where none is 15."""
    for bindir in _candidate_bindirs():
        if _is_wanted_major(bindir):
            return bindir
    return None


def require_postgres() -> Path:
    """PostgreSQL 15's bindir; where it is missing, skip the calling test, or fail it with
    CI=true. As root, a `postgres` user to run it as is needed too."""
    bindir = find_bindir()
    if bindir is None:
        why = (
            f"no PostgreSQL {_MAJOR} (initdb, pg_ctl, postgres) in {_DEBIAN_BINDIR}, "
            f"pg_config --bindir or PATH ({INSTALL_HINT})"
        )
    elif os.geteuid() == 0 and _service_user() is None:
        why = f"running as root and no {SUPERUSER!r} user to run initdb as ({INSTALL_HINT})"
    else:
        return bindir
    missing(why)


def start_cluster(bindir: Path, *, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> PostgresCluster:
    """initdb a new cluster and start it on a free loopback port; return once it accepts
    connections, or raise PostgresError (nothing is left behind then)."""
    run_as = _service_user() if os.geteuid() == 0 else None
    if os.geteuid() == 0 and run_as is None:
        raise PostgresError(f"running as root and no {SUPERUSER!r} user to run initdb as")
    folder = _make_folder(run_as)
    try:
        _run(
            [
                str(bindir / "initdb"),
                *("-D", str(folder / "data"), "-U", SUPERUSER, "-A", "trust"),
                *("-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"),
            ],
            run_as=run_as,
            cwd=folder,
            timeout_s=timeout_s,
        )
        deadline = time.monotonic() + timeout_s
        for _ in range(_PORT_ATTEMPTS):
            cluster = _spawn(bindir, folder, free_port(), run_as)
            try:
                if _wait_ready(cluster, deadline, timeout_s):
                    return cluster
            except BaseException:
                _kill(cluster.process)
                raise
        raise PostgresError(
            f"postgres found its port taken {_PORT_ATTEMPTS} times; its log ends:\n"
            f"{_log_tail(folder / 'server.log')}"
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def stop_cluster(cluster: PostgresCluster, *, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
    """Stop the cluster with `pg_ctl stop -m immediate`, or `_kill` it if that fails, and
    remove its folder. The postmaster is reaped: no process of the cluster is left."""
    try:
        if cluster.process.poll() is None:
            try:
                _run(
                    [
                        str(cluster.bindir / "pg_ctl"),
                        *("stop", "-D", str(cluster.data), "-m", "immediate"),
                        *("-w", "-t", str(max(1, round(timeout_s)))),
                    ],
                    run_as=cluster.run_as,
                    cwd=cluster.folder,
                    timeout_s=timeout_s + 5,
                )
                cluster.process.wait(timeout=timeout_s)
            except (PostgresError, subprocess.TimeoutExpired):
                _kill(cluster.process, grace_s=timeout_s)
    finally:
        shutil.rmtree(cluster.folder, ignore_errors=True)


def create_database(cluster: PostgresCluster, name: str) -> str:
    """Create an empty database `name` on the cluster and return its SQLAlchemy URL."""
    with cluster.connect() as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return cluster.url(name)


def _candidate_bindirs() -> list[Path]:
    candidates = [_DEBIAN_BINDIR]
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        try:
            printed = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            printed = ""
        if printed:
            candidates.append(Path(printed))
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(Path(initdb).parent)
    return candidates


def _is_wanted_major(bindir: Path) -> bool:
    """All three programs are there and `postgres --version` says 15.x."""
    if not all(os.access(bindir / name, os.X_OK) for name in _PROGRAMS):
        return False
    try:
        printed = subprocess.run(
            [str(bindir / "postgres"), "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    found = re.search(r"\(PostgreSQL\) (\d+)", printed)
    return found is not None and int(found.group(1)) == _MAJOR


def _service_user() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(SUPERUSER)
    except KeyError:
        return None


def _make_folder(run_as: pwd.struct_passwd | None) -> Path:
    """A new 0700 folder for the cluster, owned by the user the programs run as."""
    bases = [tempfile.gettempdir(), "/tmp"]
    usable = [
        base
        for base in bases
        if len(base) + _SOCKET_SUFFIX_LEN <= _SOCKET_PATH_MAX
        and (run_as is None or _traversable(Path(base), run_as))
    ]
    if not usable:
        who = f"the {SUPERUSER!r} user" if run_as else "us"
        raise PostgresError(
            f"none of {', '.join(dict.fromkeys(bases))} can hold the cluster: a parent "
            f"{who} cannot enter, or a unix socket path over {_SOCKET_PATH_MAX} bytes"
        )
    folder = Path(tempfile.mkdtemp(prefix="servelab-pg-", dir=usable[0]))
    if run_as is not None:
        os.chown(folder, run_as.pw_uid, run_as.pw_gid)
    return folder


def _traversable(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether `user` (its primary group only, as `_child_options` leaves it) may enter
    `path` and every folder above it."""
    for folder in [path.resolve(), *path.resolve().parents]:
        info = folder.stat()
        if info.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif info.st_gid == user.pw_gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return False
    return True


def _child_options(run_as: pwd.struct_passwd | None, cwd: Path) -> dict[str, Any]:
    """Popen options that run a PostgreSQL program as `run_as` (None: as us), in `cwd`."""
    options: dict[str, Any] = {"cwd": cwd, "stdin": subprocess.DEVNULL}
    if run_as is not None:
        options.update(user=run_as.pw_uid, group=run_as.pw_gid, extra_groups=[])
    return options


def _run(
    command: list[str], *, run_as: pwd.struct_passwd | None, cwd: Path, timeout_s: float
) -> None:
    """Run initdb or pg_ctl to the end; PostgresError with its output if it fails."""
    name = Path(command[0]).name
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            **_child_options(run_as, cwd),
        )
    except subprocess.TimeoutExpired:
        raise PostgresError(f"{name} timed out after {timeout_s:g} s") from None
    except OSError as error:
        raise PostgresError(f"cannot run {command[0]}: {error}") from error
    if done.returncode != 0:
        output = "\n".join((done.stdout + done.stderr).splitlines()[-_LOG_TAIL_LINES:])
        raise PostgresError(f"{name} failed ({describe_exit(done.returncode)}):\n{output}")


def _spawn(
    bindir: Path, folder: Path, port: int, run_as: pwd.struct_passwd | None
) -> PostgresCluster:
    """Start the postmaster in its own process group, its output in server.log (this
    attempt's only: a retry on another port starts it afresh)."""
    settings = {**_SERVER_SETTINGS, "port": str(port), "unix_socket_directories": str(folder)}
    command = [str(bindir / "postgres"), "-D", str(folder / "data")]
    for name, value in settings.items():
        command += ["-c", f"{name}={value}"]
    with open(folder / "server.log", "wb") as log:
        try:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_QUIT_WITH_TESTS,
                **_child_options(run_as, folder),
            )
        except OSError as error:
            raise PostgresError(f"cannot start {command[0]}: {error}") from error
    return PostgresCluster(bindir=bindir, folder=folder, port=port, process=process, run_as=run_as)


def _wait_ready(cluster: PostgresCluster, deadline: float, timeout_s: float) -> bool:
    """True once the server accepts a connection; False if it exited because its port was
    taken (the caller tries another); PostgresError for any other exit or at the deadline."""
    while True:
        code = cluster.process.poll()
        if code is not None:
            if _PORT_TAKEN in cluster.log.read_text(errors="replace"):
                return False
            raise PostgresError(
                f"postgres exited ({describe_exit(code)}) before accepting connections; "
                f"its log ends:\n{_log_tail(cluster.log)}"
            )
        try:
            with cluster.connect():
                return True
        except psycopg.OperationalError as error:
            last = error
        if time.monotonic() > deadline:
            raise PostgresError(
                f"postgres did not accept connections on {LOCALHOST}:{cluster.port} within "
                f"{timeout_s:g} s ({str(last).strip()}); its log ends:\n{_log_tail(cluster.log)}"
            )
        time.sleep(_POLL_S)


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from /proc (empty where there is no /proc)."""
    return [proc.pid for proc in all_proc_stats() if proc.ppid == pid]


def _kill(process: subprocess.Popen[bytes], *, grace_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
    """End the postmaster without pg_ctl, then reap it.

    First SIGQUIT to its group, what `pg_ctl stop -m immediate` sends: the postmaster reaps
    its children before it exits. Where it is still there after `grace_s`, SIGKILL to its
    group and to its children's (every postmaster child calls setsid, so each leads a group
    of its own); those are then orphans for init to reap. Signalled only while the
    postmaster is unreaped: until then its pid names no other process, and its children
    are still its own."""
    if process.returncode is None:
        signal_group(process.pid, signal.SIGQUIT)
        try:
            process.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            for pid in [process.pid, *child_pids(process.pid)]:
                signal_group(pid, signal.SIGKILL)
    process.wait()


def _log_tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as error:
        return f"(cannot read {log}: {error})"
    return "\n".join(lines[-_LOG_TAIL_LINES:]) or "(empty)"
