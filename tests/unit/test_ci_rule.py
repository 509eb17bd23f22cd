"""Any CI other than empty, 0 or false is CI: there a missing prerequisite fails."""

from __future__ import annotations

import pytest

from tests.ci import in_ci, missing, require_module


@pytest.mark.parametrize(
    ("value", "ci"),
    [("true", True), ("1", True), ("yes", True), ("TRUE", True), ("gitlab", True),
     ("", False), ("0", False), ("false", False), ("False", False), (None, False)],
)  # fmt: skip
def test_what_counts_as_ci(monkeypatch: pytest.MonkeyPatch, value: str | None, ci: bool):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert in_ci() is ci


def test_a_missing_prerequisite_fails_in_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI=1 and no_such_module_here"):
        require_module("no_such_module_here")
    monkeypatch.setenv("CI", "0")
    with pytest.raises(pytest.skip.Exception, match="no_such_module_here is not installed"):
        require_module("no_such_module_here")
    with pytest.raises(pytest.skip.Exception, match="a reason"):
        missing("a reason")
