from __future__ import annotations

import subprocess
import sys


def test_importing_the_engine_loads_neither_torch_nor_transformers() -> None:
    code = (
        "import sys, servelab.engines.embedded; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
