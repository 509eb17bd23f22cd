from servelab.bench.sse import SSEDecoder


def test_events_split_across_arbitrary_pieces():
    stream = b'data: {"a": 1}\n\ndata: {"b": 2}\r\n\r\n: comment\n\ndata: [DONE]\n\n'
    for size in (1, 2, 3, 7, len(stream)):
        decoder = SSEDecoder()
        events = []
        for i in range(0, len(stream), size):
            events += decoder.feed(stream[i : i + size])
        events += decoder.close()
        assert events == [b'{"a": 1}', b'{"b": 2}', b"[DONE]"]


def test_multi_line_data_is_joined_and_other_fields_ignored():
    decoder = SSEDecoder()
    assert decoder.feed(b"event: x\nid: 3\ndata: line1\ndata:line2\n\n") == [b"line1\nline2"]


def test_unterminated_last_event_counts_at_close():
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"x": 1}') == []
    assert decoder.close() == [b'{"x": 1}']


def decode_in_pieces(stream: bytes, size: int) -> list[bytes]:
    decoder = SSEDecoder()
    events = []
    for i in range(0, len(stream), size):
        events += decoder.feed(stream[i : i + size])
    return events + decoder.close()


def test_lone_cr_ends_a_line_even_when_the_lf_question_spans_two_pieces():
    stream = b"data: a\r\rdata: b\r\n\r\ndata: c\r\r\n"
    for size in (1, 2, 3, len(stream)):
        assert decode_in_pieces(stream, size) == [b"a", b"b", b"c"], size


def test_a_leading_bom_is_dropped_once():
    stream = b"\xef\xbb\xbfdata: a\n\n"
    for size in (1, 2, 4, len(stream)):
        assert decode_in_pieces(stream, size) == [b"a"], size
    assert decode_in_pieces(b"\xef\xbb\xbf" + stream, 100) == []  # a second BOM is data


def test_empty_data_is_an_event_with_empty_data():
    decoder = SSEDecoder()
    assert decoder.feed(b"data:\n\ndata\n\n: ping\n\n") == [b"", b""]
