"""The engine spec loader, fuzzed: any file or value gives a spec or one ConfigError line.

Files are free text, YAML written from generated documents (spec keys, misspelt keys,
values of every YAML type) and YAML's own corners (impossible dates, deep nesting, tags).
A spec that is valid reads back from the YAML written of it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.core.errors import ConfigError
from servelab.engines.base import KNOB_NAMES, LAYOUT_NAMES, EngineSpec
from servelab.engines.spec import load_spec, parse_assignments, parse_spec, spec_with

FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
FIELDS = [*EngineSpec.model_fields, "layout"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(),
    st.text(max_size=10),
)
keys = st.one_of(
    st.sampled_from([*FIELDS, *KNOB_NAMES, *LAYOUT_NAMES, "engin", "knob", "TP"]),
    st.text(max_size=6),
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=8,
)
documents = st.dictionaries(keys, values, max_size=6)
spec_like = st.fixed_dictionaries(
    {"engine": st.sampled_from(["sim", "sglang", "vllm", "embedded", "nope"])},
    optional={
        "model": values,
        "tp": values,
        "port": values,
        "layout": st.dictionaries(keys, values, max_size=3) | values,
        "knobs": st.dictionaries(st.sampled_from([*KNOB_NAMES, "max_runing_requests"]), values)
        | values,
        "env": st.dictionaries(keys, values, max_size=3) | values,
        "extra_args": st.text(max_size=12) | values,
        "options": values,
        "startup_timeout_s": values,
    },
)
YAML_CORNERS = [
    "engine: sim\nmodel: 2001-02-30\n",  # a date that does not exist
    "engine: sim\noptions: {since: 0000-01-01}\n",
    "engine: sim\noptions: " + "[" * 600 + "\n",  # deeper than the recursion limit
    "engine: sim\nlayout: {1: 2, tp: 3}\n",  # keys of two types
    "engine: !!python/object:os.system x\n",
    'engine: sim\nextra_args: "--a \'b"\n',  # an unclosed quote
    "engine: sim\n? [a, b]\n: c\n",
    "engine: sim\n<<: {model: m}\n",
    "\ufeffengine: sim\n",
    "engine: sim\x00\n",
    "- engine: sim\n",
    "",
]
texts = st.one_of(
    st.text(max_size=60),
    st.sampled_from(YAML_CORNERS),
    documents.map(lambda document: yaml.safe_dump(document, allow_unicode=True)),
    spec_like.map(lambda document: yaml.safe_dump(document, allow_unicode=True)),
)


def outcome(text: str, path: Path) -> EngineSpec | ConfigError:
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        return load_spec(path)
    except ConfigError as error:
        assert str(error) and "\n" not in str(error)
        return error


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    return tmp_path / "spec.yaml"


@FUZZ
@given(text=texts)
def test_any_file_is_a_spec_or_one_error_line(text: str, spec_file: Path):
    spec = outcome(text, spec_file)
    if isinstance(spec, EngineSpec):
        assert all(size >= 1 for size in spec.layout.values())
        assert all(isinstance(arg, str) for arg in spec.extra_args)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in spec.env.items())
        assert spec.startup_timeout_s > 0 and not math.isnan(spec.startup_timeout_s)


@FUZZ
@given(data=documents | spec_like)
def test_any_mapping_is_a_spec_or_one_error_line(data: dict[Any, Any]):
    try:
        parse_spec(data, source="spec")
    except ConfigError as error:
        assert str(error).startswith("spec: ") and "\n" not in str(error)


@FUZZ
@given(
    engine=st.sampled_from(["sim", "sglang", "vllm", "openai"]) | st.text(max_size=6),
    fields=st.fixed_dictionaries(
        {}, optional={"model": st.text(max_size=8), "port": scalars, "tp": scalars}
    ),
    knobs=st.lists(st.text(max_size=24), max_size=3),
    env=st.lists(st.text(max_size=12), max_size=3),
    extra_args=st.lists(st.text(max_size=8), max_size=3),
)
def test_command_line_values_are_a_spec_or_one_error_line(
    engine: str, fields: dict[str, Any], knobs: list[str], env: list[str], extra_args: list[str]
):
    """What `engine up --engine E --knob K=V --env K=V --extra-args ...` builds a spec from."""
    try:
        spec_with(
            None,
            fields={"engine": engine, **fields},
            knobs=parse_assignments(knobs, option="--knob", typed=True),
            env=parse_assignments(env, option="--env", typed=False),
            extra_args=extra_args,
            source="command line",
        )
    except ConfigError as error:
        assert "\n" not in str(error)


@FUZZ
@given(data=spec_like)
def test_a_valid_spec_reads_back_from_its_yaml(data: dict[str, Any], spec_file: Path):
    try:
        spec = parse_spec(data, source="spec")
    except ConfigError:
        return
    text = yaml.safe_dump(spec.model_dump(exclude_defaults=True), allow_unicode=True)
    read = outcome(text, spec_file)
    assert isinstance(read, EngineSpec)
    # Compared as written again: a NaN among the options is equal to nothing, itself too.
    assert yaml.safe_dump(read.model_dump(exclude_defaults=True), allow_unicode=True) == text
