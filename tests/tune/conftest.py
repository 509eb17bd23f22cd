"""Fixtures of the tune tests: a throwaway PostgreSQL 15 cluster for shared Optuna studies.

One cluster serves the whole session (initdb and start take about a second); a test that
must not see other tests' studies takes `fresh_database`, an empty database of its own.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest

from tests.tune.postgres import (
    PostgresCluster,
    create_database,
    require_postgres,
    start_cluster,
    stop_cluster,
)

_DATABASE_NUMBERS = itertools.count(1)
_NAME_MAX = 63
"""PostgreSQL's longest identifier (NAMEDATALEN - 1), in bytes."""


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """The session's cluster on a free 127.0.0.1 port; stopped, its folder removed, at the
    end. Skips where PostgreSQL 15 is missing (fails with CI=true)."""
    cluster = start_cluster(require_postgres())
    yield cluster
    stop_cluster(cluster)


@pytest.fixture(scope="session")
def postgres_url(postgres_cluster: PostgresCluster) -> str:
    """The SQLAlchemy URL of a database the whole session shares:
    `postgresql+psycopg://postgres@127.0.0.1:PORT/servelab`."""
    return create_database(postgres_cluster, "servelab")


@pytest.fixture
def fresh_database(postgres_cluster: PostgresCluster, request: pytest.FixtureRequest) -> str:
    """The SQLAlchemy URL of a new empty database for this test alone, named after it."""
    test = re.sub(r"[^a-z0-9_]+", "_", request.node.name.lower())
    name = f"t{next(_DATABASE_NUMBERS)}_{test}"[:_NAME_MAX]
    return create_database(postgres_cluster, name)
