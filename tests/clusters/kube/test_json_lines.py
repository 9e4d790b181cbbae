"""The watch stream's line splitter: the same lines whatever the chunking."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from clusters.kube.json_lines import JsonLines

line_bytes = st.binary(min_size=0, max_size=40).map(lambda b: b.replace(b"\n", b"x"))
blank = st.sampled_from([b"", b" ", b"\r", b" \t "])


@given(
    lines=st.lists(st.one_of(line_bytes, blank), max_size=30),
    tail=line_bytes,
    cuts=st.lists(st.integers(min_value=0, max_value=2_000), max_size=20),
)
def test_every_chunking_gives_the_stream_s_non_blank_lines(lines: list[bytes], tail: bytes, cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines) + tail
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    splitter = JsonLines()
    seen: list[bytes] = []
    for start, end in itertools.pairwise(points):
        seen.extend(splitter.feed(stream[start:end]))
    assert seen == [line for line in lines if line.strip()]
    assert splitter.pending == len(tail)


def test_a_line_spread_over_many_chunks_comes_out_whole() -> None:
    body = b'{"type":"ADDED","object":{"metadata":{"name":"' + b"a" * 10_000 + b'"}}}'
    splitter = JsonLines()
    out: list[bytes] = []
    for i in range(0, len(body), 7):
        out.extend(splitter.feed(body[i : i + 7]))
    assert out == []
    out.extend(splitter.feed(b"\n{}\n{"))
    assert out == [body, b"{}"]
    assert splitter.pending == 1
