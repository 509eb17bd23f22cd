import pytest

from servelab.core.errors import ConfigError
from servelab.core.units import parse_duration_s, parse_number_list, parse_slos


@pytest.mark.parametrize(
    ("text", "seconds"), [("200ms", 0.2), ("30s", 30), ("2m", 120), ("1.5h", 5400)]
)
def test_durations_need_units(text, seconds):
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["30", "abc", "-1s", "0s", "5 minutes"])
def test_bad_durations(text):
    with pytest.raises(ConfigError):
        parse_duration_s(text)


def test_number_lists():
    assert parse_number_list("1,8, 32", what="x", integer=True) == [1, 8, 32]
    assert parse_number_list("0.5,2", what="x", integer=False) == [0.5, 2.0]
    for bad in ("1,,2", "0", "-3", "1.5", "a"):
        with pytest.raises(ConfigError):
            parse_number_list(bad, what="x", integer=True)


def test_slos_in_ms():
    assert parse_slos("ttft=200ms,tpot=50ms,e2e=2s") == {"ttft": 200, "tpot": 50, "e2e": 2000}
    for bad in ("ttft=200", "latency=1s", "ttft"):
        with pytest.raises(ConfigError):
            parse_slos(bad)
