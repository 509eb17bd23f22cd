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
