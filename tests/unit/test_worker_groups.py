"""The suite's own premise: under `--dist loadgroup` (how `make test` runs it) every test
carries its group in its id, so the scheduler keeps a file's tests, and each shared
set-up's, on one worker and makes a costly set-up once. A pytest that stops reading the
id pytest-xdist writes (9.2) splits every group; this fails then, rather than the suite
quietly making the demo run and every module fixture twice."""

from __future__ import annotations

import pytest


def test_under_loadgroup_a_test_carries_its_files_group(request: pytest.FixtureRequest):
    config = request.config
    if not hasattr(config, "workerinput") or not config.getvalue("loadgroup"):
        pytest.skip("not run by pytest-xdist with --dist loadgroup")
    file_id = request.node.nodeid.split("::", 1)[0]
    assert request.node.nodeid.endswith(f"@{file_id}"), request.node.nodeid
