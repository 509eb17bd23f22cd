"""Package-level promises: a light import, a clean style, the console script."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_import_does_not_load_torch_or_transformers():
    code = (
        "import sys, servelab, servelab.cli, servelab.bench.session, servelab.pipeline, "
        "servelab.engines.registry as r; r.get_adapter('embedded'); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    for args in (["check"], ["format", "--check"]):
        result = subprocess.run(
            [ruff, *args, "src", "tests", "benchmarks", "tools"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_console_script_help():
    exe = Path(sys.executable).parent / "servelab"
    result = subprocess.run([str(exe), "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    for command in ("bench", "run", "sim"):
        assert command in result.stdout


def test_a_command_imports_only_its_own_modules():
    """`servelab sim` (every simulated engine a test or trial starts) composes the group
    with itself alone: none of the benchmark, report or tuning modules are imported."""
    code = (
        "import sys; sys.argv = ['servelab', 'sim', '--help']\n"
        "from servelab.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
        "heavy = ('servelab.bench.session', 'servelab.report', 'servelab.tune', "
        "'servelab.diagnose', 'servelab.cli.bench')\n"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Serve /v1/chat/completions" in out.stdout
    assert out.stderr.strip() == "[]", out.stderr


def test_the_whole_group_lists_every_command_in_order():
    from servelab.cli import app
    from servelab.cli.group import COMMANDS

    names = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    assert names == list(COMMANDS)
