"""The trace fixtures every folder of tests replays (tests/bench/data/traces; its README
says where each came from)."""

from pathlib import Path

TRACES = Path(__file__).parent / "bench" / "data" / "traces"
MOONCAKE = TRACES / "mooncake_small.jsonl"
"""20 requests over 3.8 s in Mooncake's format, with shared blocks."""
