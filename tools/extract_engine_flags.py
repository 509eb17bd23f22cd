"""Make a recorded flag list from an engine's own argument parser (a maintainer's tool).

    python tools/extract_engine_flags.py sglang /tmp/sglang-wheel   # an unpacked wheel
    python tools/extract_engine_flags.py vllm /tmp/vllm-wheel
    python tools/extract_engine_flags.py transformers              # the installed one

SGLang and vLLM build their parsers from dataclass fields, so the flags are not in the
source as literal `add_argument("--...")` calls: the only faithful list is the parser
itself. A child interpreter imports the engine's parser builder from the unpacked wheel
and lists `parser._option_string_actions` (hidden spellings included). The engines'
runtime dependencies (CUDA kernels, ZeroMQ...) are not needed to build a parser; each
one missing is replaced by an inert stand-in module and the child is run again.
SGLang's parser does need `msgspec` and `pybase64` for real. transformers serve is
Typer: its `--help` is parsed like an installed engine's.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

from servelab.engines.flagcheck import installed_flags

__all__ = ["main"]

_MAX_STUBS = 80
_STUB_ENV = "SERVELAB_EXTRACT_STUBS"

_SOURCES = {
    "sglang": (
        "python -m sglang.launch_server",
        "sglang/srt/server_args.py ServerArgs.add_cli_args (fields under "
        "sglang/srt/arg_groups/fields/)",
    ),
    "vllm": (
        "vllm serve",
        "vllm/entrypoints/common/cli_args.py make_arg_parser (engine flags from "
        "vllm/engine/arg_utils.py EngineArgs.add_cli_args)",
    ),
    "transformers": (
        "transformers serve",
        "src/transformers/cli/serve.py Serve.__init__ (Typer options), read from its --help",
    ),
}


FLAGS_DIR = Path(__file__).resolve().parents[1] / "src" / "servelab" / "engines" / "flags"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1])
        return
    """Write `<engine>-<version>.txt` into --out (default: this folder)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=sorted(_SOURCES))
    parser.add_argument("source", nargs="?", type=Path, help="the unpacked wheel (sglang, vllm)")
    parser.add_argument("--out", type=Path, default=FLAGS_DIR)
    args = parser.parse_args(argv)
    if args.engine == "transformers":
        version, flags = _transformers()
        origin = f"transformers {version} as installed"
    else:
        if args.source is None:
            parser.error(f"{args.engine} needs the folder of its unpacked wheel")
        version, flags = _from_parser(args.engine, args.source)
        origin = f"the {args.engine} {version} wheel"
    program, source = _SOURCES[args.engine]
    header = [
        f"# {args.engine} {version}: the option strings `{program}` accepts.",
        f"# Source: {source}, in {origin}.",
        f"# Made with: python tools/extract_engine_flags.py {args.engine}"
        + (" <unpacked wheel>" if args.engine != "transformers" else ""),
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.engine}-{version}.txt"
    path.write_text("\n".join([*header, *sorted(flags)]) + "\n")
    sys.stderr.write(f"wrote {len(flags)} flags to {path}\n")


def _transformers() -> tuple[str, list[str]]:
    version = subprocess.run(
        [sys.executable, "-c", "import transformers; print(transformers.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    found, why = installed_flags(
        [sys.executable, "-m", "transformers.cli.transformers", "serve", "--help"]
    )
    if found is None:
        raise SystemExit(why)
    return version, sorted(found.flags)


def _from_parser(engine: str, source: Path) -> tuple[str, list[str]]:
    """Run the child until it builds the parser, stubbing one missing module per try."""
    stubs: list[str] = []
    path = os.pathsep.join(filter(None, [str(source), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "VLLM_TARGET_DEVICE": "cpu"}
    for _ in range(_MAX_STUBS):
        env[_STUB_ENV] = ",".join(stubs)
        result = subprocess.run(
            [sys.executable, __file__, "--child", engine],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        answer: dict[str, Any] = json.loads(result.stdout or "{}")
        if "flags" in answer:
            return answer["version"], answer["flags"]
        missing = answer.get("missing")
        if not missing or missing == engine or missing in stubs:
            raise SystemExit(result.stderr[-3000:] or f"no answer from the {engine} child")
        stubs.append(missing)
    raise SystemExit(f"gave up after stubbing {len(stubs)} modules: {', '.join(stubs)}")


def _child(engine: str) -> None:
    """In the child: build the parser and write its flags (or the missing module) as JSON."""
    sys.meta_path.insert(0, _StubFinder(set(filter(None, os.environ[_STUB_ENV].split(",")))))
    try:
        parser, version = _build(engine)
    except ModuleNotFoundError as error:
        sys.stdout.write(json.dumps({"missing": (error.name or "").split(".")[0]}))
        raise
    flags = sorted(o for o in parser._option_string_actions if o.startswith("-"))
    sys.stdout.write(json.dumps({"version": version, "flags": flags}))


def _build(engine: str) -> tuple[argparse.ArgumentParser, str]:
    if engine == "sglang":
        from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]
        from sglang.version import __version__  # type: ignore[import-not-found]

        parser = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        return parser, str(__version__)
    from vllm.entrypoints.common.cli_args import (  # type: ignore[import-not-found]
        make_arg_parser,
    )
    from vllm.utils.argparse_utils import (  # type: ignore[import-not-found]
        FlexibleArgumentParser,
    )

    from vllm import __version__ as vllm_version  # type: ignore[import-not-found]

    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve")), str(vllm_version)


class _Inert(type):
    """A stand-in class: every attribute, call, subscript or union is another stand-in."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _inert(name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _inert("instance")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__


def _any_schema(cls: type, source: Any, handler: Any) -> Any:
    """Lets pydantic models hold a stand-in type."""
    from pydantic_core import core_schema

    return core_schema.any_schema()


def _inert(name: str) -> type:
    return _Inert(name, (), {"__get_pydantic_core_schema__": classmethod(_any_schema)})


class _StubModule(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []  # a package, so submodules import too

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = sys.modules.get(f"{self.__name__}.{name}") or _inert(name)
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of the named top-level modules (and below) with stand-ins."""

    def __init__(self, names: set[str]) -> None:
        self._names = names

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] not in self._names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        """A stand-in has no code to run."""


if __name__ == "__main__":
    main()
