"""One tiny model per session, built into its own temporary cache.

Session-scoped, so it is built before the function-scoped SERVELAB_CACHE isolation of
tests/conftest.py applies: the cache folder is therefore passed explicitly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.engines.embedded import ensure_model


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny preset's folder."""
    return ensure_model("tiny", cache_dir=tmp_path_factory.mktemp("tiny-cache"))
