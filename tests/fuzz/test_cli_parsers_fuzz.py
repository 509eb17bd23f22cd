"""The parsers of option values, fuzzed: each gives a value that works or a ConfigError.

Any other exception is a crash a user would see as an internal error; hypothesis shrinks
it to the smallest input that causes it. Inputs mix free text with text shaped like the
option's syntax, so the parsers' inner branches are reached.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlparse

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from servelab.cli import app
from servelab.cli.options import check_range, parse_extra_body, parse_headers, parse_url
from servelab.core.errors import ConfigError
from servelab.core.units import SLO_KEYS, parse_duration_s, parse_number_list, parse_slos
from servelab.engines.spec import parse_assignments
from servelab.model.layout import LAYOUT_KEYS, parse_layout
from servelab.telemetry.gpu import resolve_gpus
from tests.telemetry.fakes import FakeGpuReader

T = TypeVar("T")
DEEP = "[" * 600  # deeper than the parsers' recursion allows
FUZZ = settings(max_examples=200, deadline=None)

# Characters that reach the parsers' edge cases: digits of other scripts (int() reads
# them, isdigit() says yes to more), signs, exponents, separators, blanks and controls.
TRICKY = "0123456789٣²½.,:=-+_eE \t\n\r\x00\x7f/[]@?#%~é＃"
numbers = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**400).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-0", "0", "1_000", "٣", "²", ".5", "5.", "1e-400", ""]),
    st.text(alphabet=TRICKY, max_size=8),
)
units = st.sampled_from(["ms", "s", "m", "h", "", " s", "S", "sec", "µs"])
durations = st.one_of(
    st.builds("{}{}".format, numbers, units),
    st.text(max_size=20),
    st.builds("{}{}".format, st.text("9", min_size=300, max_size=400), units),
)


def outcome(parse: Callable[..., T], *args: Any, **kwargs: Any) -> T | ConfigError:
    """What the parser returns, or the ConfigError it raises; anything else fails the test."""
    try:
        return parse(*args, **kwargs)
    except ConfigError as error:
        assert str(error) and "\n" not in str(error)
        return error


@FUZZ
@given(text=durations)
def test_durations(text: str):
    seconds = outcome(parse_duration_s, text, what="--timeout")
    if not isinstance(seconds, ConfigError):
        assert math.isfinite(seconds) and seconds > 0


@FUZZ
@given(count=st.integers(min_value=1, max_value=10**6), unit=units)
def test_whole_durations_in_each_unit(count: int, unit: str):
    # Seconds per unit; blanks may stand between the number and its unit.
    factor = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}.get(unit.lstrip())
    seconds = outcome(parse_duration_s, f"{count}{unit}")
    if factor is None:
        assert isinstance(seconds, ConfigError)
    else:
        assert seconds == pytest.approx(count * factor)


lists = st.one_of(st.lists(numbers, max_size=5).map(",".join), st.text(max_size=30))


@FUZZ
@given(text=lists, integer=st.booleans())
def test_number_lists(text: str, integer: bool):
    values = outcome(parse_number_list, text, what="--concurrency", integer=integer)
    if not isinstance(values, ConfigError):
        assert values and all(v > 0 for v in values)
        if integer:
            assert all(isinstance(v, int) for v in values)  # finite however long
        else:
            assert all(math.isfinite(v) for v in values)


@FUZZ
@given(counts=st.lists(st.integers(min_value=1, max_value=4096), min_size=1, max_size=8))
def test_a_written_list_reads_back(counts: list[int]):
    assert parse_number_list(",".join(map(str, counts)), what="x", integer=True) == counts


slo_keys = st.sampled_from([*SLO_KEYS, "TTFT", " e2e ", "latency", ""])
slos = st.one_of(
    st.lists(st.builds("{}={}".format, slo_keys, durations), max_size=4).map(",".join),
    st.text(max_size=30),
)


@FUZZ
@given(text=slos)
def test_slos(text: str):
    parsed = outcome(parse_slos, text)
    if not isinstance(parsed, ConfigError):
        assert parsed and set(parsed) <= set(SLO_KEYS)
        assert all(math.isfinite(ms) and ms > 0 for ms in parsed.values())


layout_keys = st.sampled_from([*LAYOUT_KEYS, "TP", " pp", "xp", ""])
layouts = st.one_of(
    st.lists(st.builds("{}={}".format, layout_keys, numbers), max_size=4).map(",".join),
    st.text(max_size=30),
)


@FUZZ
@given(text=layouts)
def test_layouts(text: str):
    parsed = outcome(parse_layout, text)
    if not isinstance(parsed, ConfigError):
        assert parsed and set(parsed) <= set(LAYOUT_KEYS)
        assert all(isinstance(size, int) and size > 0 for size in parsed.values())


hosts = st.one_of(
    st.sampled_from(["127.0.0.1", "localhost", "[::1]", "[::1", "é.com", "a..b", "", "a b"]),
    st.text(alphabet=string.ascii_lowercase + TRICKY, max_size=12),
)
ports = st.one_of(st.just(""), st.builds(":{}".format, numbers))
paths = st.sampled_from(["", "/", "/v1", "/v1/", "/x/v1", "?q=1", "#f", "/\n", " "])
urls = st.one_of(
    st.builds(
        "{}://{}{}{}".format,
        st.sampled_from(["http", "https", "HTTP", "ftp", ""]),
        hosts,
        ports,
        paths,
    ),
    st.text(max_size=40),
)


@FUZZ
@given(url=urls)
@example(url="http://127.0.0.1://v1")  # an empty path segment before the /v1
def test_urls(url: str):
    base = outcome(parse_url, url)
    if isinstance(base, ConfigError):
        return
    parsed = urlparse(base)
    assert parsed.scheme in ("http", "https") and parsed.hostname
    assert parsed.port is None or 1 <= parsed.port <= 65535
    assert not parsed.query and not parsed.fragment
    assert not base.endswith(("/", "/v1"))
    assert all(c.isprintable() and not c.isspace() for c in base)


header_names = st.one_of(
    st.sampled_from(["X-Api-Key", "Authorization", "a b", "é", "", " x "]),
    st.text(alphabet=string.ascii_letters + TRICKY, max_size=10),
)
header_values = st.text(alphabet=string.printable + TRICKY + "\x01\x0b\udcff", max_size=12)
headers = st.lists(
    st.one_of(st.builds("{}:{}".format, header_names, header_values), st.text(max_size=20)),
    max_size=4,
)
# RFC 9110: a field name is a token; a field value holds no control character but HTAB.
TOKEN = set(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")


@FUZZ
@given(items=headers, api_key=st.none() | header_values)
def test_headers(items: list[str], api_key: str | None):
    parsed = outcome(parse_headers, items, api_key)
    if isinstance(parsed, ConfigError):
        return
    for name, value in parsed.items():
        assert name and set(name) <= TOKEN
        assert not any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value)
    if api_key:
        assert parsed["Authorization"] == f"Bearer {api_key}"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=10,
)
bodies = st.one_of(
    json_values.map(lambda value: orjson.dumps(value).decode()),
    st.sampled_from(
        ['{"a": NaN}', '{"a": 1e400}', '{"a": Infinity}', '{"a": "\\ud800"}', "{" * 600, "[" * 1100]
    ),
    st.builds('{{"n": {}}}'.format, st.text("9", min_size=20, max_size=5000)),
    st.text(max_size=30),
)


@FUZZ
@given(text=bodies)
def test_extra_bodies(text: str):
    body = outcome(parse_extra_body, text)
    if not isinstance(body, ConfigError):
        assert isinstance(body, dict)
        orjson.dumps(body)  # what the client sends it with


@FUZZ
@given(value=st.floats() | st.none(), low=st.floats(-10, 10), inclusive=st.booleans())
def test_ranges(value: float | None, low: float, inclusive: bool):
    checked = outcome(check_range, "--x", value, low=low, high=100.0, low_inclusive=inclusive)
    if not isinstance(checked, ConfigError) and value is not None:
        assert (value >= low if inclusive else value > low) and value <= 100.0


gpu_items = st.one_of(
    numbers, st.sampled_from(["GPU-0000-fake-aaaa", "0000-fake-bbbb", "gpu-", "GPU-x"])
)
gpu_lists = st.one_of(st.lists(gpu_items, max_size=4).map(",".join), st.text(max_size=20))


@FUZZ
@given(text=gpu_lists)
def test_gpu_lists(text: str):
    indices = outcome(resolve_gpus, text, FakeGpuReader((250.0, 250.0)))
    if not isinstance(indices, ConfigError):
        assert indices and set(indices) <= {0, 1} and len(set(indices)) == len(indices)


assignments = st.lists(
    st.one_of(
        st.builds("{}={}".format, st.text(max_size=8), st.one_of(numbers, st.text(max_size=12))),
        st.sampled_from(["k=2001-02-30", "k=0000-01-01", "k=" + DEEP, "k=!!binary x"]),
        st.text(max_size=12),
    ),
    max_size=4,
)


@FUZZ
@given(items=assignments, typed=st.booleans())
def test_key_value_lists(items: list[str], typed: bool):
    parsed = outcome(parse_assignments, items, option="--knob", typed=typed)
    if not isinstance(parsed, ConfigError):
        assert all(key and key == key.strip() for key in parsed)
        assert all(isinstance(v, str | int | float | bool) for v in parsed.values())


runner = CliRunner()


@settings(max_examples=40, deadline=None)
@given(compare=layouts, tp=numbers)
def test_the_model_command_never_fails_inside(compare: str, tp: str):
    """Through the CLI: any --compare and --tp is a result (0) or one error line (2)."""
    result = runner.invoke(
        app, ["model", "--model", "llama-3.1-8b", "--gpu", "h100", "--tp", tp, "--compare", compare]
    )
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
