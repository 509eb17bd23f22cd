"""Flag validation: against the recorded SGLang and vLLM lists and the real transformers serve."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from importlib import resources
from pathlib import Path

import pytest

from servelab.engines.base import EngineSpec, Knobs
from servelab.engines.check import check_spec
from servelab.engines.flagcheck import (
    CliFlags,
    FlagSet,
    flags_from_help,
    installed_flags,
    recorded_flags,
    unknown_flags,
)
from servelab.engines.registry import get_adapter
from servelab.engines.sglang import KNOB_FLAGS as SGLANG_KNOBS
from servelab.engines.sglang import LAYOUT_FLAGS as SGLANG_LAYOUT
from servelab.engines.transformers_serve import KNOB_FLAGS as TRANSFORMERS_KNOBS
from servelab.engines.vllm import KNOB_FLAGS as VLLM_KNOBS
from servelab.engines.vllm import LAYOUT_FLAGS as VLLM_LAYOUT
from tests.ci import missing, require_module

VALUES = {
    "max_running_requests": 8,
    "cuda_graphs": False,
    "prefix_cache": False,
    "chunked_prefill_size": 8,
    "mem_fraction": 0.5,
    "kv_cache_dtype": "x",
    "quantization": "x",
    "attention_backend": "x",
    "moe_backend": "x",
    "max_batch_tokens": 8,
}
CONSTRAINTS = Path(__file__).parents[2] / "constraints" / "cpu.txt"


def mapped_flags(table: dict, values: dict) -> set[str]:
    """Every flag a table can produce, for both values of a switch."""
    flags: set[str] = set()
    for name, rule in table.items():
        samples = [True, False] if isinstance(values.get(name), bool) else [values.get(name, 2)]
        for sample in samples:
            flags |= {arg for arg in rule(sample) if arg.startswith("--")}
    return flags


@pytest.mark.parametrize(
    ("name", "version", "size"),
    [("sglang", "0.5.23", 500), ("vllm", "0.33.0", 400), ("transformers", "5.24.0", 25)],
)
def test_recorded_lists_name_their_version_and_source(name: str, version: str, size: int):
    text = resources.files("servelab.engines.flags").joinpath(f"{name}-{version}.txt").read_text()
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert header[0].startswith(f"# {name} {version}: ")
    assert header[1].startswith("# Source: ") and ".py" in header[1]
    flags = recorded_flags(f"{name}-{version}.txt")
    assert len(flags.flags) > size and all(flag.startswith("-") for flag in flags.flags)
    assert version in flags.source


def test_every_sglang_flag_we_map_is_in_its_recorded_list():
    accepted = recorded_flags("sglang-0.5.23.txt").flags
    wanted = mapped_flags(SGLANG_KNOBS, VALUES) | mapped_flags(SGLANG_LAYOUT, {})
    wanted |= {"--model-path", "--host", "--port", "--served-model-name", "--enable-metrics"}
    assert wanted - accepted == set()


def test_every_vllm_flag_we_map_is_in_its_recorded_list():
    accepted = recorded_flags("vllm-0.33.0.txt").flags
    wanted = mapped_flags(VLLM_KNOBS, VALUES) | mapped_flags(VLLM_LAYOUT, {"ep": True})
    wanted |= {"--host", "--port", "--served-model-name"}
    assert wanted - accepted == set()


def test_unknown_flags_get_the_closest_valid_name():
    accepted = recorded_flags("sglang-0.5.23.txt")
    args = [
        "--moe-runer-backend", "triton",
        "--tp-size", "8",
        "--max-running-request=64",
        "--chunked-prefill-size", "-1",
        "--zzzz",
    ]  # fmt: skip
    problems = unknown_flags(args, accepted, CliFlags(recorded=None))
    assert [(p.flag, p.suggestion) for p in problems] == [
        ("--moe-runer-backend", "--moe-runner-backend"),
        ("--max-running-request=64", "--max-running-requests"),
        ("--zzzz", None),
    ]


def test_vllm_spellings_its_parser_accepts():
    cli = get_adapter("vllm").cli  # type: ignore[attr-defined]
    accepted = recorded_flags("vllm-0.33.0.txt")
    fine = [
        "--max_num_seqs", "8",
        "--compilation-config.cudagraph_mode=FULL",
        "--no-enable-prefix-caching",
        "--disable-prefix-caching",
        "-tp", "2",
    ]  # fmt: skip
    assert unknown_flags(fine, accepted, cli) == []
    [problem] = unknown_flags(["--max-num-seq", "8"], accepted, cli)
    assert problem.suggestion == "--max-num-seqs"


def test_help_of_an_argparse_parser_is_read_back_exactly():
    parser = argparse.ArgumentParser(prog="engine")
    parser.add_argument("--model-path", "--model", help="Where the weights are, e.g. --foo.")
    parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8_e4m3"])
    parser.add_argument("--enable-x", action=argparse.BooleanOptionalAction)
    parser.add_argument("-q", "--quantization")
    parser.add_argument("--disable-radix-cache", action="store_true", help="non-blocking -z")
    expected = {o for action in parser._actions for o in action.option_strings}
    assert flags_from_help(parser.format_help()) == expected


def test_help_of_the_simulator_lists_its_flags():
    found, why = installed_flags([sys.executable, "-m", "servelab", "sim", "--help"])
    assert why is None and found is not None
    assert {"--max-running-requests", "--usage", "--no-usage", "--tp", "--help"} <= found.flags


def test_a_program_that_is_not_there():
    found, why = installed_flags(["/nonexistent/vllm", "serve", "--help=all"])
    assert found is None and "not installed" in (why or "")
    found, why = installed_flags([sys.executable, "-m", "no_such_engine_module", "--help"])
    assert found is None and why == f"no_such_engine_module is not installed for {sys.executable}"


def _transformers_help() -> FlagSet:
    cli = get_adapter("transformers").cli  # type: ignore[attr-defined]
    program = get_adapter("transformers").program(EngineSpec(engine="transformers"))  # type: ignore[attr-defined]
    found, why = installed_flags([*program, *cli.help_args])
    assert why is None and found is not None
    return found


def test_transformers_flags_against_its_real_help():
    require_module("transformers")  # the local extra
    cli = get_adapter("transformers").cli  # type: ignore[attr-defined]
    found = _transformers_help()
    wanted = mapped_flags(TRANSFORMERS_KNOBS, VALUES)
    wanted |= {"--continuous-batching", "--host", "--port", "--device"}
    assert wanted - found.flags == set()
    [problem] = unknown_flags(["--attn-implementaton", "sdpa"], found, cli)
    assert problem.suggestion == "--attn-implementation"


def test_the_recorded_transformers_list_is_its_help():
    require_module("transformers")  # the local extra
    recorded = get_adapter("transformers").cli.recorded  # type: ignore[attr-defined]
    version = recorded.removeprefix("transformers-").removesuffix(".txt")
    installed = importlib.metadata.version("transformers")
    if installed != version:
        missing(
            f"the recorded list {recorded} is of transformers {version}, installed is "
            f"{installed} (constraints/cpu.txt pins {version})"
        )
    assert recorded_flags(recorded).flags == _transformers_help().flags


def test_the_cpu_constraints_pin_the_transformers_of_the_recorded_list():
    recorded = get_adapter("transformers").cli.recorded  # type: ignore[attr-defined]
    version = recorded.removeprefix("transformers-").removesuffix(".txt")
    pins = CONSTRAINTS.read_text().splitlines()
    assert f"transformers=={version}" in pins


def test_check_uses_the_installed_transformers():
    require_module("transformers")  # the local extra
    spec = EngineSpec(
        engine="transformers",
        model="m",
        knobs=Knobs(max_batch_tokens=256, cuda_graphs=True),
        extra_args=["--dtype", "bfloat16", "--compil"],
    )
    result = check_spec(spec)
    assert result.flags_source is not None and "(installed)" in result.flags_source
    assert [(p.flag, p.suggestion) for p in result.unknown_flags] == [("--compil", "--compile")]


def test_check_falls_back_to_the_recorded_list():
    spec = EngineSpec(
        engine="sglang",
        model="/models/m",
        port=30000,
        env={"NCCL_IB_DISABLE": "1"},
        knobs=Knobs(max_running_requests=1024, cuda_graphs=False),
        extra_args=["--moe-runner-backend", "flashinfer_cutlass", "--enable-torch-compil"],
    )
    result = check_spec(spec, use_installed=False)
    assert result.flags_source == "recorded list sglang-0.5.23 (servelab/engines/flags)"
    assert result.env == {"NCCL_IB_DISABLE": "1"}
    assert (result.host, result.port, result.port_from_spec) == ("127.0.0.1", 30000, True)
    assert result.command[3:7] == ["--model-path", "/models/m", "--host", "127.0.0.1"]
    assert [(p.flag, p.suggestion) for p in result.unknown_flags] == [
        ("--enable-torch-compil", "--enable-torch-compile")
    ]
    assert not result.ok


def test_check_of_a_recorded_engine_when_it_is_not_installed():
    result = check_spec(EngineSpec(engine="vllm", model="m", options={"executable": "/nope/vllm"}))
    assert result.ok and result.flags_source is not None and "vllm-0.33.0" in result.flags_source
    assert any("not installed" in note for note in result.notes)


def test_check_of_an_endpoint_launches_nothing():
    result = check_spec(EngineSpec(engine="openai", url="http://127.0.0.1:1"))
    assert result.command == [] and result.ok and "not launched" in result.notes[0]


def test_flagset_is_plain_data():
    assert unknown_flags(["--a"], FlagSet(frozenset({"--a"}), "test"), CliFlags(None)) == []
