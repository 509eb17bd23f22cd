"""Files servelab cannot import: one ConfigError line naming the file, why, and what it
reads; through the CLI, exit 2 and that line alone, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.bench.peers import READS, import_file
from servelab.core.errors import ConfigError
from tests.peers.peerfiles import GUIDELLM, SGLANG_NEW, VLLM_C1, read_json, run_import


def _refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        import_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path} is not a result file servelab can import: ")
    assert message.endswith(f"({READS})")
    assert "\n" not in message
    return message


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_file_that_does_not_exist(tmp_path):
    assert "there is no such file" in _refusal(tmp_path / "nothing.json")


def test_a_folder(tmp_path):
    assert "it is a folder" in _refusal(tmp_path)


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_file(tmp_path, text):
    assert "it is empty" in _refusal(_write(tmp_path, "empty.json", text))


def test_not_json(tmp_path):
    message = _refusal(_write(tmp_path, "results.json", "duration: 3\ncompleted: 32\n"))
    assert "it is not JSON (Expecting value at line 1 column 1)" in message


def test_not_text(tmp_path):
    path = tmp_path / "results.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "it is not text (UTF-8)" in _refusal(path)


def test_json_of_another_shape(tmp_path):
    message = _refusal(_write(tmp_path, "other.json", '{"name": "x", "values": [1, 2]}'))
    assert "the file is JSON of no known tool's shape (keys: name, values)" in message
    assert "is a list, not a result object" in _refusal(_write(tmp_path, "l.json", "[1, 2]"))


def test_jsonl_with_one_bad_line(tmp_path):
    good = SGLANG_NEW.read_text().splitlines()[0]
    path = _write(tmp_path, "runs.jsonl", f'{good}\n{{"duration": \n{good}\n')
    assert "line 2 is not JSON (Expecting value at column 14)" in _refusal(path)


def test_jsonl_whose_lines_are_of_two_tools(tmp_path):
    sglang = SGLANG_NEW.read_text().splitlines()[0]
    vllm = json.dumps(read_json(VLLM_C1))
    path = _write(tmp_path, "mixed.jsonl", f"{sglang}\n{vllm}\n")
    assert "line 2 is a vLLM bench serve result and line 1 is not" in _refusal(path)


def test_a_known_shape_with_a_value_of_the_wrong_type(tmp_path):
    data = read_json(VLLM_C1)
    data["completed"] = "32"
    message = _refusal(_write(tmp_path, "vllm.json", json.dumps(data)))
    assert "completed is a string, not a number" in message


def test_a_known_shape_missing_a_value_it_always_has(tmp_path):
    data = read_json(VLLM_C1)
    del data["total_output_tokens"]
    assert "total_output_tokens is missing" in _refusal(
        _write(tmp_path, "v.json", json.dumps(data))
    )


def test_a_guidellm_schema_it_does_not_know(tmp_path):
    data = read_json(GUIDELLM["0.8.1"])
    data["metadata"]["version"] = 3
    message = _refusal(_write(tmp_path, "benchmarks.json", json.dumps(data)))
    assert "metadata.version 3 is a GuideLLM schema servelab does not know" in message


def test_a_guidellm_strategy_it_cannot_place(tmp_path):
    data = read_json(GUIDELLM["0.6.1"])
    data["benchmarks"][1]["config"]["strategy"]["type_"] = "sweep"
    message = _refusal(_write(tmp_path, "benchmarks.json", json.dumps(data)))
    assert "benchmarks[1]'s strategy 'sweep' is not a load servelab can place" in message


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("missing.json", None, "there is no such file"),
        ("notes.json", "not json at all", "it is not JSON"),
        ("empty.jsonl", "", "it is empty"),
        ("shape.json", '{"tool": "mine"}', "the file is JSON of no known tool's shape"),
    ],
)
def test_the_cli_says_one_line_and_exits_2(tmp_path, name, text, why):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    result = run_import(str(path), "--out", str(tmp_path / "run"))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {path} is not a result file servelab can import: {why}")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_the_cli_on_a_jsonl_with_a_bad_line(tmp_path):
    good = SGLANG_NEW.read_text().splitlines()[0]
    path = _write(tmp_path, "runs.jsonl", f"{good}\nnot json\n")
    result = run_import(str(path), "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "line 2 is not JSON" in line
