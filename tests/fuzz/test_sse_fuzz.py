"""The SSE decoder, fuzzed: the events never depend on how the bytes were split."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.bench.sse import SSEDecoder

BOM = b"\xef\xbb\xbf"
# Pieces that make streams look like SSE, so the interesting paths are hit often.
PIECES = [b"data:", b"data: ", b"data", b"x", b"{}", b" ", b":", b"\r", b"\n", b"\r\n", BOM]
line_ends = st.sampled_from([b"\n", b"\r", b"\r\n"])
sse_like = st.lists(st.sampled_from(PIECES) | st.binary(max_size=4), max_size=40).map(b"".join)
streams = sse_like | st.binary(max_size=200)


def decode(pieces: list[bytes]) -> list[bytes]:
    decoder = SSEDecoder()
    events = [event for piece in pieces for event in decoder.feed(piece)]
    return events + decoder.close()


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(min(c, len(stream)) for c in cuts), len(stream)]
    return [stream[a:b] for a, b in pairwise(bounds)]


@settings(max_examples=500, deadline=None)
@given(stream=streams, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_any_split_gives_the_events_of_the_whole(stream: bytes, cuts: list[int]):
    assert decode(split(stream, cuts)) == decode([stream])


@settings(max_examples=300, deadline=None)
@given(stream=streams)
def test_byte_by_byte_gives_the_events_of_the_whole(stream: bytes):
    assert decode([stream[i : i + 1] for i in range(len(stream))]) == decode([stream])


# A data line's value: any bytes but a line end (a leading space is kept: one is stripped).
values = st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
events = st.lists(st.lists(values, min_size=1, max_size=3), max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    events=events,
    ends=st.lists(line_ends, min_size=1, max_size=8),
    bom=st.booleans(),
    comments=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=8),
)
def test_written_events_read_back_whatever_the_line_ends(
    events: list[list[bytes]], ends: list[bytes], bom: bool, comments: bool, cuts: list[int]
):
    """Events written with any mix of LF, CR and CRLF, a BOM and comments decode exactly."""
    out, n = [BOM] if bom else [], 0

    def line(text: bytes) -> None:
        nonlocal n
        end = ends[n % len(ends)]
        if not text and end == b"\n" and out and out[-1].endswith(b"\r"):
            end = b"\r\n"  # CR then a bare LF would read as one CRLF, as a writer knows
        out.append(text + end)
        n += 1

    for event in events:
        if comments:
            line(b": keep-alive")
        for value in event:
            line(b"data: " + value)
        line(b"")
    stream = b"".join(out)
    assert decode(split(stream, cuts)) == [b"\n".join(event) for event in events]
