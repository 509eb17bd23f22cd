"""The embedded engine: a small Qwen3-MoE-style model with random weights and a BPE
tokenizer trained on bundled text, generated locally and deterministically, and served by
`transformers serve --continuous-batching`.

Importing this package imports neither torch nor transformers; building a model does.
"""

from servelab.engines.embedded.adapter import SERVER_ENV, EmbeddedAdapter
from servelab.engines.embedded.build import CACHE_ENV, cache_root, ensure_model, model_dir
from servelab.engines.embedded.presets import (
    DEFAULT_PRESET,
    PRESETS,
    VOCAB_SIZE,
    EmbeddedPreset,
    get_preset,
)

__all__ = [
    "CACHE_ENV",
    "DEFAULT_PRESET",
    "PRESETS",
    "SERVER_ENV",
    "VOCAB_SIZE",
    "EmbeddedAdapter",
    "EmbeddedPreset",
    "cache_root",
    "ensure_model",
    "get_preset",
    "model_dir",
]
