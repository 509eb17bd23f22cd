"""Secrets are masked by name and scrubbed by value from whatever servelab writes."""

from __future__ import annotations

import json

import pytest

from servelab.core import redact
from servelab.core.redact import (
    MASK,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_headers,
    register_secret,
    scrub,
    scrub_bytes,
)


@pytest.fixture(autouse=True)
def _no_registered(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(redact, "_secrets", set())


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "api-key",
        "X-Api-Key",
        "Authorization",
        "OPENAI_APIKEY",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "hf_token",
        "my-auth",
    ],
)
def test_secret_names(name: str):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "max-num-batched-tokens",
        "MAX_TOKENS",
        "NCCL_IB_DISABLE",
        "tokenizer",
        "keyboard",
        "VLLM_CPU_KVCACHE_SPACE",
        "monkey",
        "step-per-token-ms",
        "step-per-context-token-ms",
        "kv-key-dtype",
    ],
)
def test_ordinary_names(name: str):
    assert not is_secret_name(name)


def test_argv_masks_option_values_in_both_spellings():
    argv = [
        "servelab",
        "bench",
        "--api-key",
        "sk-live-1",
        "--api-key=sk-live-2",
        "--max-num-batched-tokens",
        "2048",
        "--hf-token",
        "hf_abc",
    ]
    assert redact_argv(argv) == [
        "servelab",
        "bench",
        "--api-key",
        MASK,
        f"--api-key={MASK}",
        "--max-num-batched-tokens",
        "2048",
        "--hf-token",
        MASK,
    ]


def test_argv_masks_secret_headers_but_keeps_others():
    argv = [
        "--header",
        "Authorization: Bearer sk-9",
        "--header",
        "X-Trace: on",
        "-H",
        "X-Api-Key: k-77",
        "--header=x-api-key: k-78",
    ]
    assert redact_argv(argv) == [
        "--header",
        f"Authorization: {MASK}",
        "--header",
        "X-Trace: on",
        "-H",
        f"X-Api-Key: {MASK}",
        f"--header=x-api-key: {MASK}",
    ]


def test_argv_masks_env_assignments_and_url_passwords():
    argv = ["HF_TOKEN=hf_1", "NCCL_P2P_LEVEL=5", "vllm", "--url", "http://bob:hunter22@db:5432/x"]
    assert redact_argv(argv) == [
        f"HF_TOKEN={MASK}",
        "NCCL_P2P_LEVEL=5",
        "vllm",
        "--url",
        f"http://bob:{MASK}@db:5432/x",
    ]


def test_env_and_headers_keep_names():
    assert redact_env({"HF_TOKEN": "x", "NCCL_IB_DISABLE": "1"}) == {
        "HF_TOKEN": MASK,
        "NCCL_IB_DISABLE": "1",
    }
    assert redact_headers({"Authorization": "Bearer z", "Accept": "*/*"}) == {
        "Authorization": MASK,
        "Accept": "*/*",
    }


def test_registered_values_are_scrubbed_anywhere():
    register_secret("sk-planted-0123")
    register_secret("ab")  # too short to scrub by value
    text = 'error 401: invalid key "sk-planted-0123" (ab)'
    assert scrub(text) == f'error 401: invalid key "{MASK}" (ab)'
    assert scrub_bytes(text.encode()) == scrub(text).encode()
    assert redact_argv(["--note", "uses sk-planted-0123"]) == ["--note", f"uses {MASK}"]


def test_scrub_bytes_leaves_clean_data_alone():
    data = b'{"a": 1}\n'
    assert scrub_bytes(data) is data


def test_a_secret_that_reads_like_a_number_never_breaks_a_json_file(tmp_path):
    """A key of digits (or a test's "0.00") once turned "kv_usage_max": 0.0063 into
    ***63 in summary.json, which no reader could parse again: JSON files are scrubbed in
    their strings only."""
    from servelab.store import RunDir

    register_secret("0.00")
    register_secret("sk-planted-0123")
    run = RunDir.create(name="t", out=tmp_path / "run")
    run.write_json("summary.json", {"kv_usage_max": 0.0063, "note": "key sk-planted-0123"})
    run.append_jsonl("rows.jsonl", [{"t": 10.0042, "error": 'bad "0.00"'}])
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == {
        "kv_usage_max": 0.0063,
        "note": f"key {MASK}",
    }
    row = json.loads((tmp_path / "run" / "rows.jsonl").read_text())
    assert row == {"t": 10.0042, "error": f'bad "{MASK}"'}
