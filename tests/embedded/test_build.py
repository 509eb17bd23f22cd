from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from servelab.core.errors import ConfigError, EngineSetupError
from servelab.engines.embedded import build, cache_root, ensure_model, model_dir

EXPECTED_FILES = {
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}


def _contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_folder_holds_model_tokenizer_and_templates(tiny_dir: Path) -> None:
    assert {path.name for path in tiny_dir.iterdir()} == EXPECTED_FILES
    assert tiny_dir.name.startswith("tiny-")
    assert all(path.stat().st_mode & 0o044 == 0o044 for path in tiny_dir.iterdir())


def test_builds_are_byte_identical(tmp_path: Path, tiny_dir: Path) -> None:
    again = ensure_model("tiny", cache_dir=tmp_path / "other")
    assert again != tiny_dir
    assert _contents(again) == _contents(tiny_dir)


def test_second_call_reuses_the_folder(
    tmp_path: Path, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = ensure_model("tiny", cache_dir=tmp_path)
    stamps = {path.name: path.stat().st_mtime_ns for path in first.iterdir()}

    def no_rebuild(*args: object) -> None:
        raise AssertionError("rebuilt a cached model")

    monkeypatch.setattr(build, "_build_into", no_rebuild)
    assert ensure_model("tiny", cache_dir=tmp_path) == first
    assert {path.name: path.stat().st_mtime_ns for path in first.iterdir()} == stamps


def test_default_cache_root_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "explicit"
    assert model_dir("tiny").parent == tmp_path / "explicit" / "embedded"
    monkeypatch.delenv("SERVELAB_CACHE")
    assert cache_root() == tmp_path / "xdg" / "servelab"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "servelab"


def test_folder_name_changes_with_the_generator_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = model_dir("tiny", cache_dir=tmp_path)
    assert model_dir("h200-ref", cache_dir=tmp_path) != before
    real_version = metadata.version
    monkeypatch.setattr(
        build.metadata,
        "version",
        lambda name: "0.0.1" if name == "torch" else real_version(name),
    )
    assert model_dir("tiny", cache_dir=tmp_path) != before


def test_failed_build_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servelab.engines.embedded import weights

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(weights, "write_weights", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        ensure_model("tiny", cache_dir=tmp_path)
    left = {path.name for path in (tmp_path / "embedded").iterdir()}
    assert left == {model_dir("tiny", cache_dir=tmp_path).name + ".lock"}


def test_stale_staging_folders_are_cleared(tmp_path: Path) -> None:
    target = model_dir("tiny", cache_dir=tmp_path)
    stale = target.parent / f".{target.name}.tmp-999999"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    ensure_model("tiny", cache_dir=tmp_path)
    assert not stale.exists()
    assert {path.name for path in target.iterdir()} == EXPECTED_FILES


def test_concurrent_builds_make_one_complete_folder(tmp_path: Path, tiny_dir: Path) -> None:
    script = (
        "import sys; from pathlib import Path; "
        "from servelab.engines.embedded import ensure_model; "
        "print(ensure_model('tiny', cache_dir=Path(sys.argv[1])))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=120)[0].strip() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert outputs[0] == outputs[1]
    built = Path(outputs[0])
    assert sorted(path.name for path in built.parent.iterdir()) == [
        built.name,
        built.name + ".lock",
    ]
    assert _contents(built) == _contents(tiny_dir)


def test_unknown_preset_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="h200-ref"):
        ensure_model("nope", cache_dir=tmp_path)
    assert not (tmp_path / "embedded").exists()


def test_missing_torch_asks_for_the_local_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servelab.engines.embedded import _deps

    real_find_spec = _deps.find_spec
    monkeypatch.setattr(
        _deps, "find_spec", lambda name: None if name == "torch" else real_find_spec(name)
    )
    with pytest.raises(EngineSetupError, match=r"torch.*servelab\[local\]"):
        ensure_model("tiny", cache_dir=tmp_path)
