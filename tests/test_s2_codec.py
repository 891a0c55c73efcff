"""Unit and property tests of the S2 stream codec (rillet.cluster.s2).

* Round trips at every writer level, the stream fed to the reader in random pieces and one byte at a time.
* Hand-built S2 blocks: every literal length form, the three copy forms, S2's repeat codes (each length
  form), overlapping copies, with outputs worked out by hand.
* The fast decode path (Snappy's C decoder on the block, or on the block with its repeats rewritten as
  copies) against the plain element-by-element decoder, on random element sequences and random bytes.
* Snappy-framed input; skippable, padding and index chunks; the identifier repeated mid-stream.
* Every kind of corrupt input refused with S2Error, and the reader staying failed.
* A real S2 stream: nats-server's JetStream snapshot is written with klauspost/compress's s2.NewWriter
  (fast level), so decoding one checks this reader against the reference encoder, repeat codes included.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import tempfile
import time

import cramjam
import google_crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rillet.cluster import s2
from rillet.cluster.s2 import (S2Error, S2Reader, S2Writer, STREAM_IDENTIFIER, compress_block,
                               decompress_block)
from tests.helpers import free_port

LEVELS = ("uncompressed", "fast", "better", "best")


# ---------------------------------------------------------------------------------------------------
# Building blocks and chunks by hand (independently of the module under test)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def lit(data: bytes, form: int | None = None) -> bytes:
    """A literal; ``form`` None: the 1-byte tag (length <= 60), else 60..63 (1..4 length bytes)."""
    n = len(data) - 1
    if form is None:
        assert n < 60
        return bytes([n << 2]) + data
    nbytes = form - 59
    assert n < 1 << (8 * nbytes)
    return bytes([form << 2]) + n.to_bytes(nbytes, "little") + data


def copy1(offset: int, length: int) -> bytes:
    assert 1 <= offset < 2048 and 4 <= length <= 11
    return bytes([(offset >> 8) << 5 | (length - 4) << 2 | 1, offset & 0xFF])


def copy2(offset: int, length: int) -> bytes:
    assert 1 <= length <= 64
    return bytes([(length - 1) << 2 | 2]) + offset.to_bytes(2, "little")


def copy4(offset: int, length: int) -> bytes:
    assert 1 <= length <= 64
    return bytes([(length - 1) << 2 | 3]) + offset.to_bytes(4, "little")


def repeat(length: int, code: int | None = None) -> bytes:
    """S2's repeat of the last offset: a copy1 tag with offset 0; codes 0-4 lengths 4-8, 5-7 extra bytes."""
    if code is None:
        code = length - 4 if length <= 8 else 5 if length <= 263 else 6 if length <= 65795 else 7
    if code <= 4:
        assert length == code + 4
        return bytes([code << 2 | 1, 0])
    base, nbytes = {5: (8, 1), 6: (260, 2), 7: (65540, 3)}[code]
    return bytes([code << 2 | 1, 0]) + (length - base).to_bytes(nbytes, "little")


def block(n: int, *elements: bytes) -> bytes:
    return uvarint(n) + b"".join(elements)


def masked(data: bytes) -> int:
    c = google_crc32c.value(bytes(data))
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def chunk(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "little") + body


def data_chunk(plain: bytes, blk: bytes | None = None, crc: int | None = None) -> bytes:
    """A 0x00 chunk holding ``blk`` (or a 0x01 chunk with ``plain`` when blk is None)."""
    c = (masked(plain) if crc is None else crc).to_bytes(4, "little")
    return chunk(0x00, c + blk) if blk is not None else chunk(0x01, c + plain)


def read_all(stream: bytes, pieces: list[int] | None = None, **kw) -> bytes:
    r = S2Reader(**kw)
    if pieces is None:
        return r.feed(stream)
    out = []
    pos = 0
    for size in pieces:
        out.append(r.feed(stream[pos:pos + size]))
        pos += size
    out.append(r.feed(stream[pos:]))
    return b"".join(out)


def one_byte_at_a_time(stream: bytes) -> bytes:
    r = S2Reader()
    return b"".join(r.feed(stream[i:i + 1]) for i in range(len(stream)))


def chunks_of(stream: bytes) -> list[tuple[int, int]]:
    out = []
    pos = 0
    while pos < len(stream):
        kind = stream[pos]
        length = int.from_bytes(stream[pos + 1:pos + 4], "little")
        out.append((kind, length))
        pos += 4 + length
    assert pos == len(stream)
    return out


def cyclic(pattern: bytes, n: int) -> bytes:
    return (pattern * (n // len(pattern) + 1))[:n]


NATS_TEXT = b"".join(b"RMSG $G foo.bar.%d %d\r\nhello %d\r\n" % (i % 13, len(b"hello %d" % i), i)
                     for i in range(5000))


# ---------------------------------------------------------------------------------------------------
# Round trips


def test_empty_input():
    w = S2Writer()
    assert w.encode(b"") == b""
    assert w.encode(bytearray()) == b""
    r = S2Reader()
    assert r.feed(b"") == b""
    assert r.feed(STREAM_IDENTIFIER) == b""  # an identifier alone holds nothing
    assert r.feed(data_chunk(b"")) == b""  # nor does an empty data chunk
    assert r.feed(data_chunk(b"", compress_block(b""))) == b""


@pytest.mark.parametrize("level", LEVELS)
def test_round_trip_every_level(level):
    w = S2Writer(level)
    first = w.encode(NATS_TEXT)
    assert first.startswith(STREAM_IDENTIFIER)
    second = w.encode(memoryview(b"tail " * 40))
    assert STREAM_IDENTIFIER not in second  # the identifier only before the first chunk ever written
    third = w.encode(bytearray(os.urandom(1000)))
    stream = first + second + third
    assert read_all(stream) == NATS_TEXT + b"tail " * 40 + third_plain(third)
    kinds = {k for k, _ in chunks_of(stream)}
    if level == "uncompressed":
        assert kinds == {0xFF, 0x01}
    else:
        assert 0x00 in kinds and len(first) < len(NATS_TEXT) / 3
        assert chunks_of(third) == [(0x01, 1004)]  # random bytes do not compress: sent as they are


def third_plain(third: bytes) -> bytes:
    (kind, length), = chunks_of(third)
    assert kind == 0x01
    return third[8:]


def test_any_buffer_is_taken_as_its_bytes():
    import array
    words = array.array("I", range(1000))
    stream = S2Writer().encode(memoryview(words))
    assert stream == S2Writer().encode(words.tobytes())
    assert read_all(stream) == words.tobytes()
    if len(stream) % 2:
        stream += chunk(0xFE, b"\x00")  # padding, to an even length
    halfwords = array.array("H")
    halfwords.frombytes(stream)
    assert S2Reader().feed(memoryview(halfwords)) == words.tobytes()


def test_unknown_level_is_refused():
    with pytest.raises(ValueError, match="level"):
        S2Writer("fastest")


def test_large_input_is_split_at_the_block_size():
    data = bytes(range(256)) * ((5 << 20) // 256) + b"end"
    stream = S2Writer("uncompressed").encode(data)
    sizes = [length - 4 for kind, length in chunks_of(stream) if kind != 0xFF]
    assert sizes == [1 << 20] * 5 + [3]
    assert read_all(stream) == data
    stream = S2Writer().encode(data)
    assert [kind for kind, _ in chunks_of(stream)] == [0xFF] + [0x00] * 5 + [0x01]  # 3 bytes: not worth it
    assert read_all(stream, [70000] * 20) == data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(st.binary(max_size=3000),
                      st.lists(st.sampled_from([b"RMSG $G foo.bar 5\r\n", b"hello\r\n", b"\x00" * 40, b"PING\r\n",
                                                b"+OK\r\n", b"x"]), max_size=300).map(b"".join)),
       level=st.sampled_from(LEVELS), seed=st.integers(0, 2**32))
def test_round_trip_any_split(data, level, seed):
    w = S2Writer(level)
    rnd = random.Random(seed)
    # the data written in several encode calls, the stream read in random pieces
    cuts = sorted(rnd.sample(range(len(data) + 1), min(3, len(data) + 1)))
    stream = b"".join(w.encode(data[a:b]) for a, b in zip([0] + cuts, cuts + [len(data)]))
    pieces = [rnd.randrange(1, 40) for _ in range(len(stream) // 10)]
    assert read_all(stream, pieces) == data
    if len(stream) < 1200:
        assert one_byte_at_a_time(stream) == data


def test_reader_holds_a_one_byte_at_a_time_multi_block_stream():
    data = NATS_TEXT * 3 + os.urandom(300_000)
    stream = S2Writer().encode(data) + S2Writer("uncompressed").encode(b"more")[len(STREAM_IDENTIFIER):]
    assert one_byte_at_a_time(stream) == data + b"more"


# ---------------------------------------------------------------------------------------------------
# Hand-built blocks


@pytest.mark.parametrize("form,size", [(None, 1), (None, 60), (60, 1), (60, 61), (60, 256), (61, 257),
                                       (61, 65536), (62, 65537), (62, 200_000), (63, 70_000)])
def test_literal_length_forms(form, size):
    data = cyclic(bytes(range(251)), size)
    assert decompress_block(block(size, lit(data, form))) == data


def test_copy_forms():
    # copy1, no overlap, and an offset above 255 (upper offset bits in the tag)
    head = cyclic(b"abcdefgh", 300)
    assert decompress_block(block(304, lit(head, 61), copy1(300, 4))) == head + b"abcd"
    assert decompress_block(block(11, lit(b"abc"), copy1(3, 8))) == b"abcabcabcab"
    assert decompress_block(block(16, lit(b"abcdefgh"), copy1(8, 8))) == b"abcdefgh" * 2
    # copy1 with offset 256: low byte 0 but not a repeat
    assert decompress_block(block(304, lit(head, 61), copy1(256, 4))) == head + head[44:48]
    # overlapping copies repeat the pattern
    assert decompress_block(block(13, lit(b"ab"), copy1(2, 11))) == b"ababababababa"
    assert decompress_block(block(65, lit(b"z"), copy2(1, 64))) == b"z" * 65
    assert decompress_block(block(15, lit(b"xxxxxhello"), copy2(5, 5))) == b"xxxxxhellohello"
    assert decompress_block(block(43, lit(b"abc"), copy2(3, 40))) == cyclic(b"abc", 43)
    # copy4 reaching back further than 65535, then a repeat of that offset
    big = cyclic(bytes(range(256)), 70_000)
    out = decompress_block(block(70_074, lit(big, 62), copy4(70_000, 64), repeat(10, 5)))
    assert out == big + big[:64] + big[64:74]
    # a copy4 with a small offset is fine too
    assert decompress_block(block(9, lit(b"abc"), copy4(3, 6))) == b"abcabcabc"


def test_repeat_codes():
    # after a copy at offset 10 every repeat continues the cycle of "0123456789"
    lengths = [(4, 0), (5, 1), (6, 2), (7, 3), (8, 4), (8, 5), (263, 5), (208, None), (260, 6),
               (65795, 6), (1260, None), (65540, 7), (65545, None), (200_000, 7)]
    elements = [lit(b"0123456789"), copy1(10, 4)] + [repeat(n, code) for n, code in lengths]
    total = 14 + sum(n for n, _ in lengths)
    assert decompress_block(block(total, *elements)) == cyclic(b"0123456789", total)


def test_repeat_offsets_overlap_and_follow_the_last_copy():
    # offset 1, then a long repeat of it: a run
    assert decompress_block(block(305, lit(b"q"), copy1(1, 4), repeat(300))) == b"q" * 305
    # "abcdef", copy offset 3 length 4 -> "defd", repeat 5 at offset 3 -> "efdef",
    # copy offset 2 length 4 -> "efef", repeat 4 at offset 2 -> "efef"
    out = decompress_block(block(23, lit(b"abcdef"), copy2(3, 4), repeat(5), copy1(2, 4), repeat(4)))
    assert out == b"abcdef" + b"defd" + b"efdef" + b"efef" + b"efef"
    # offsets past 65535 in the rewritten form (copy4), and a repeat crossing 64-byte pieces
    big = os.urandom(70_000)
    out = decompress_block(block(70_000 + 4 + 1000, lit(big, 62), copy4(69_990, 4), repeat(1000)))
    assert out == big + big[10:14] + big[14:1014]


def _no_plain_decoder(monkeypatch):
    def refuse(*args):
        raise AssertionError("the plain decoder ran: the fast path did not take this block")
    monkeypatch.setattr(s2, "_decode_elements", refuse)


def test_valid_s2_blocks_take_the_fast_path(monkeypatch):
    """Repeats are rewritten as copies for the C decoder: the plain Python decoder is not needed for them."""
    big = cyclic(bytes(range(256)), 70_000)
    cases = [
        (block(305, lit(b"q"), copy1(1, 4), repeat(300)), b"q" * 305),
        (block(23, lit(b"abcdef"), copy2(3, 4), repeat(5), copy1(2, 4), repeat(4)), b"abcdef" + b"defd" + b"efdef" + b"efef" + b"efef"),
        (block(70_074, lit(big, 62), copy4(70_000, 64), repeat(10, 5)), big + big[:64] + big[64:74]),
        (block(70_000 + 4 + 1000, lit(big, 62), copy4(69_990, 4), repeat(1000)), big + big[10:14] + big[14:1014]),
        (block(14 + 65545, lit(b"0123456789"), copy1(10, 4), repeat(65545)), cyclic(b"0123456789", 14 + 65545)),
    ]
    _no_plain_decoder(monkeypatch)
    for blk, expected in cases:
        assert decompress_block(blk) == expected
    with pytest.raises(AssertionError, match="plain decoder ran"):
        decompress_block(block(4, repeat(4)))  # corrupt: the plain decoder is asked why


def test_s2_blocks_need_the_extension():
    """The hand-built repeat blocks are not Snappy: a Snappy decoder refuses them (so the S2 path ran)."""
    blk = block(305, lit(b"q"), copy1(1, 4), repeat(300))
    with pytest.raises(cramjam.DecompressionError):
        cramjam.snappy.decompress_raw(blk)


# ---------------------------------------------------------------------------------------------------
# The fast path against the plain decoder


LIMIT = 4 << 20


def _plain(blk: bytes) -> bytes | S2Error:
    try:
        dlen, pos = s2._uvarint(blk, 0)
        if dlen > LIMIT:
            raise S2Error("s2: decoded block is too large")
        return bytes(s2._decode_elements(blk, pos, dlen))
    except S2Error as e:
        return e


def _fast(blk: bytes) -> bytes | S2Error:
    try:
        return decompress_block(blk, LIMIT)
    except S2Error as e:
        return e


@st.composite
def element_blocks(draw):
    """Mostly valid S2 blocks (literals, copies of every form, repeats), with now and then a bad offset,
    a bad length or a wrong declared size."""
    out = b""
    elements = []
    n = 0
    copied = False
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["lit", "lit", "copy1", "copy2", "copy4", "repeat", "repeat"]))
        if kind == "lit" or n == 0:
            data = draw(st.binary(min_size=1, max_size=80))
            form = None if len(data) <= 60 and draw(st.booleans()) else draw(st.sampled_from([60, 61, 62, 63]))
            elements.append(lit(data, form))
            n += len(data)
            continue
        bad = draw(st.integers(0, 30)) == 0
        off = draw(st.integers(1, n)) if not bad else draw(st.integers(0, n + 3))
        if kind == "copy1":
            off = max(1, min(off, 2047))
            length = draw(st.integers(4, 11))
            elements.append(copy1(off, length))
        elif kind == "copy2":
            off = min(off, 65535)
            length = draw(st.integers(1, 64))
            elements.append(copy2(off, length))
        elif kind == "copy4":
            length = draw(st.integers(1, 64))
            elements.append(copy4(off, length))
        else:
            length = draw(st.sampled_from([4, 5, 6, 7, 8, 9, 100, 263, 264, 1000, 65795, 65796]))
            elements.append(repeat(length))
            if not copied:
                n += length
                continue
        copied = True
        n += length
    declared = n + draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
    out = b"".join(elements)
    return uvarint(max(declared, 0)) + out


@settings(max_examples=300, deadline=None)
@given(blk=element_blocks())
def test_fast_path_agrees_with_the_plain_decoder(blk):
    plain, fast = _plain(blk), _fast(blk)
    if isinstance(plain, S2Error):
        assert isinstance(fast, S2Error), (blk, fast)
    else:
        assert fast == plain


@settings(max_examples=300, deadline=None)
@given(blk=st.binary(max_size=60))
def test_random_bytes_fast_and_plain_agree(blk):
    plain, fast = _plain(blk), _fast(blk)
    if isinstance(plain, S2Error):
        assert isinstance(fast, S2Error)
    else:
        assert fast == plain


def test_snappy_blocks_decode_both_ways():
    for data in (NATS_TEXT, os.urandom(5000), b"\x00" * 100_000, b""):
        blk = bytes(cramjam.snappy.compress_raw(data))
        assert _plain(blk) == data and _fast(blk) == data


# ---------------------------------------------------------------------------------------------------
# Corrupt blocks


CORRUPT_BLOCKS = {
    "empty": (b"", "truncated block length"),
    "truncated varint": (b"\x80", "truncated block length"),
    "truncated varint 4": (b"\x80\x80\x80\x80", "truncated block length"),
    "varint too long": (b"\x80\x80\x80\x80\x80\x01", "longer than 5 bytes"),
    "varint over 32 bits": (b"\xff\xff\xff\xff\x1f", "32 bits"),
    "repeat first": (block(4, repeat(4)), "offset 0"),
    "repeat before any copy": (block(8, lit(b"abcd"), repeat(4)), "offset 0"),
    "copy2 offset 0": (block(8, lit(b"abcd"), copy2(0, 4)), "offset 0"),
    "copy4 offset 0": (block(8, lit(b"abcd"), copy4(0, 4)), "offset 0"),
    "offset beyond output": (block(6, lit(b"ab"), copy1(3, 4)), "before the start"),
    "copy4 offset beyond output": (block(6, lit(b"ab"), copy4(1 << 31, 4)), "before the start"),
    "literal longer than declared": (block(5, lit(b"abcdef")), "literal"),
    "literal past the end of input": (uvarint(10) + bytes([9 << 2]) + b"abc", "literal"),
    "literal length bytes missing": (uvarint(10) + bytes([61 << 2, 1]), "truncated"),
    "huge literal length": (uvarint(10) + bytes([63 << 2]) + b"\xff\xff\xff\xff" + b"abc", "literal"),
    "copy longer than declared": (block(6, lit(b"ab"), copy1(2, 8)), "declared block length"),
    "repeat longer than declared": (block(12, lit(b"ab"), copy1(2, 4), repeat(70_000)), "declared"),
    "shorter than declared": (block(3, lit(b"ab")), "shorter than its declared length"),
    "trailing bytes": (block(2, lit(b"ab")) + lit(b"c"), "literal"),
    "trailing copy": (block(2, lit(b"ab")) + copy1(1, 4), "declared block length"),
    "truncated copy2": (block(6, lit(b"ab")) + b"\x0e\x01", "truncated"),
    "truncated copy4": (block(6, lit(b"ab")) + b"\x0f\x01\x00\x00", "truncated"),
    "truncated repeat length": (block(20, lit(b"abcd"), copy1(4, 4)) + bytes([6 << 2 | 1, 0, 5]), "truncated"),
}


@pytest.mark.parametrize("name", list(CORRUPT_BLOCKS))
def test_corrupt_blocks_are_refused(name):
    blk, message = CORRUPT_BLOCKS[name]
    with pytest.raises(S2Error, match=message):
        decompress_block(blk)
    assert isinstance(_plain(blk), S2Error) or name.startswith(("empty", "truncated varint", "varint"))


def test_declared_length_limit_is_checked_before_decoding():
    with pytest.raises(S2Error, match="too large"):
        decompress_block(block(1 << 20, lit(b"a")), max_len=(1 << 20) - 1)
    # a hostile repeat chain cannot blow up the rewritten block: the repeats are counted against dlen
    with pytest.raises(S2Error):
        decompress_block(block(100, lit(b"ab"), copy1(2, 4)) + repeat((1 << 24) + 65539) * 10_000)


# ---------------------------------------------------------------------------------------------------
# Streams: framing


def test_snappy_framed_stream_is_accepted():
    data = NATS_TEXT + os.urandom(70_000)
    framed = bytes(cramjam.snappy.compress(data))
    assert framed.startswith(b"\xff\x06\x00\x00sNaPpY")
    assert read_all(framed) == data
    assert read_all(framed, [7] * 500) == data


def test_skippable_padding_and_index_chunks_are_skipped():
    stream = (STREAM_IDENTIFIER + chunk(0xFE, b"\x00" * 100) + data_chunk(b"one")
              + chunk(0x99, b"s2idx\x00" + b"z" * 50) + chunk(0x80, b"") + chunk(0xFD, os.urandom(3000))
              + data_chunk(b"two", compress_block(b"two")))
    assert read_all(stream) == b"onetwo"
    assert one_byte_at_a_time(stream) == b"onetwo"


def test_large_skippable_chunk_is_not_buffered():
    r = S2Reader()
    assert r.feed(STREAM_IDENTIFIER + bytes([0x99]) + ((1 << 24) - 1).to_bytes(3, "little")) == b""
    piece = b"\x00" * 65536
    for _ in range(255):
        assert r.feed(piece) == b""
        assert len(r._buf) == 0
    rest = (1 << 24) - 1 - 255 * 65536
    assert r.feed(b"\x00" * rest + data_chunk(b"after")) == b"after"


def test_identifier_may_repeat_mid_stream():
    """nats-server resets its writer on every flush, so each flush starts with the identifier again."""
    w1, w2 = S2Writer(), S2Writer()
    stream = w1.encode(b"first flush ") + w2.encode(b"second flush ") + bytes(cramjam.snappy.compress(b"snappy"))
    assert read_all(stream) == b"first flush second flush snappy"


# ---------------------------------------------------------------------------------------------------
# Streams: corrupt input


GOOD = data_chunk(b"hello")


@pytest.mark.parametrize("stream,message", [
    (STREAM_IDENTIFIER + data_chunk(b"hello", crc=masked(b"hello") ^ 1), "crc mismatch"),
    (STREAM_IDENTIFIER + data_chunk(b"hello", compress_block(b"hellO")), "crc mismatch"),
    (b"\xff\x06\x00\x00S2sTwX" + GOOD, "bad stream identifier"),
    (b"\xff\x07\x00\x00S2sTwOO" + GOOD, "stream identifier chunk of 7 bytes"),
    (GOOD, "does not start with a stream identifier"),
    (chunk(0xFE, b"") + STREAM_IDENTIFIER + GOOD, "does not start with a stream identifier"),
    (STREAM_IDENTIFIER + chunk(0x02, b"abcd"), "reserved unskippable chunk type 0x02"),
    (STREAM_IDENTIFIER + chunk(0x7F, b""), "reserved unskippable chunk type 0x7f"),
    (STREAM_IDENTIFIER + chunk(0x00, b"abc"), "shorter than its checksum"),
    (STREAM_IDENTIFIER + chunk(0x01, b""), "shorter than its checksum"),
    (STREAM_IDENTIFIER + chunk(0x00, b"\x00\x00\x00\x00"), "truncated block length"),
    (STREAM_IDENTIFIER + data_chunk(b"a" * 8, block(8, lit(b"abcd"), repeat(4))), "offset 0"),
    (STREAM_IDENTIFIER + data_chunk(b"ab", block(2, lit(b"ab")) + b"\x00"), "literal"),
])
def test_corrupt_streams_are_refused(stream, message):
    with pytest.raises(S2Error, match=message):
        read_all(stream)
    with pytest.raises(S2Error, match=message):
        read_all(stream, [1] * len(stream))


def test_reader_stays_failed():
    r = S2Reader()
    assert r.feed(STREAM_IDENTIFIER + GOOD) == b"hello"
    with pytest.raises(S2Error, match="reserved"):
        r.feed(chunk(0x03, b""))
    assert r.failed
    with pytest.raises(S2Error, match="reserved"):
        r.feed(GOOD)
    with pytest.raises(S2Error, match="reserved"):
        r.feed(b"")


def test_oversized_chunks_are_refused_from_their_header():
    """A hostile peer cannot make the reader buffer or allocate past the block limit: the header suffices."""
    r = S2Reader(max_block=1 << 16)
    with pytest.raises(S2Error, match="uncompressed chunk of 65537 bytes exceeds"):
        r.feed(STREAM_IDENTIFIER + b"\x01" + (4 + (1 << 16) + 1).to_bytes(3, "little"))
    r = S2Reader()
    with pytest.raises(S2Error, match="uncompressed chunk"):
        r.feed(STREAM_IDENTIFIER + b"\x01" + ((1 << 24) - 1).to_bytes(3, "little"))
    r = S2Reader(max_block=1 << 16)
    with pytest.raises(S2Error, match="compressed chunk of"):
        r.feed(STREAM_IDENTIFIER + b"\x00" + (s2._max_encoded_len(1 << 16) + 5).to_bytes(3, "little"))
    # the decoded length is checked before the block is decoded
    blk = block(1 << 16 + 1, lit(b"a"))
    with pytest.raises(S2Error, match="too large"):
        read_all(STREAM_IDENTIFIER + data_chunk(b"a", blk), max_block=1 << 16)
    with pytest.raises(ValueError):
        S2Reader(max_block=(4 << 20) + 1)
    # exactly at the limit is fine
    assert read_all(STREAM_IDENTIFIER + data_chunk(b"x" * 65536), max_block=1 << 16) == b"x" * 65536


def test_compression_bomb_is_refused():
    """21-byte chunks that each decode to 4 MiB: one read may not expand past max_output."""
    size = 4 << 20
    blk = block(size, lit(b"a"), copy1(1, 4), repeat(size - 5))
    bomb = data_chunk(b"a" * size, blk)
    assert len(bomb) == 21
    assert read_all(STREAM_IDENTIFIER + bomb * 4, max_output=16 << 20) == b"a" * (16 << 20)
    r = S2Reader(max_output=16 << 20)
    with pytest.raises(S2Error, match="expands to more than 16777216 bytes"):
        r.feed(STREAM_IDENTIFIER + bomb * 5)
    assert r.failed
    # the limit is per feed: the same chunks in separate reads are fine
    r = S2Reader(max_output=16 << 20)
    assert sum(len(r.feed(p)) for p in [STREAM_IDENTIFIER + bomb * 4, bomb * 4]) == 32 << 20
    assert s2.MAX_FEED_OUTPUT == S2Reader().max_output == 256 << 20


def test_snappy_framed_blocks_are_limited_to_64k():
    big = b"y" * 65537
    ident = b"\xff\x06\x00\x00sNaPpY"
    with pytest.raises(S2Error, match="65537 bytes exceeds the block limit of 65536"):
        read_all(ident + data_chunk(big))
    with pytest.raises(S2Error, match="too large"):
        read_all(ident + data_chunk(big, compress_block(big)))
    # the same chunks after an S2 identifier are fine
    assert read_all(STREAM_IDENTIFIER + data_chunk(big) + data_chunk(big, compress_block(big))) == big * 2


def test_caller_buffer_is_not_pinned():
    """The reader keeps no view of the caller's buffer, even after an error, so it can be resized."""
    buf = bytearray(STREAM_IDENTIFIER + GOOD + b"\x00\x05\x00\x00")
    r = S2Reader()
    assert r.feed(buf) == b"hello"
    buf.extend(b"x" * 10)
    bad = bytearray(STREAM_IDENTIFIER + chunk(0x05, b""))
    with pytest.raises(S2Error):
        S2Reader().feed(bad)
    bad.extend(b"x" * 10)


# ---------------------------------------------------------------------------------------------------
# A real S2 encoder: nats-server


needs_go = pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server binary not on PATH")


def _element_forms(blk: bytes) -> set[str]:
    """The element forms a block uses (tags only), to show which paths a real stream exercised."""
    forms = set()
    dlen, s = s2._uvarint(blk, 0)
    while s < len(blk):
        tag = blk[s]
        kind = tag & 3
        if kind == 0:
            x = tag >> 2
            extra = max(0, x - 59)
            n = (int.from_bytes(blk[s + 1:s + 1 + extra], "little") if extra else x) + 1
            forms.add(f"lit{extra}")
            s += 1 + extra + n
        elif kind == 1:
            if (tag & 0xE0) == 0 and blk[s + 1] == 0:
                code = (tag >> 2) & 7
                forms.add(f"repeat{code}")
                s += 2 + max(0, code - 4)
            else:
                forms.add("copy1")
                s += 2
        else:
            forms.add("copy2" if kind == 2 else "copy4")
            s += 3 if kind == 2 else 5
    return forms


@needs_go
async def test_decodes_nats_server_s2_output(tmp_path, monkeypatch):
    """A JetStream snapshot from nats-server is an S2 stream from s2.NewWriter: decode it, check every
    chunk's CRC (the reader does) and find every published message in the plain bytes."""
    import nats

    port = free_port()
    conf = tmp_path / "s.conf"
    conf.write_text(json.dumps({"listen": f"127.0.0.1:{port}", "jetstream": {"store_dir": str(tmp_path / "js")}}))
    proc = subprocess.Popen(["nats-server", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        nc = None
        deadline = time.monotonic() + 10
        while nc is None:
            try:
                nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, connect_timeout=1)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["foo.>"])
        rnd = random.Random(5)
        payloads = [b"RMSG $G foo.bar %d\r\nhello %d\r\n" % (i % 7, rnd.randrange(100)) for i in range(3000)]
        payloads += [b"\x00" * 300_000, cyclic(b"0123456789abcdef", 700_000), os.urandom(50_000),
                     b"+OK\r\n" * 40_000]
        for i, p in enumerate(payloads):
            await nc.publish(f"foo.bar.{i % 40}", p)
        await nc.flush()
        for _ in range(100):
            if (await js.stream_info("S")).state.messages == len(payloads):
                break
            await asyncio.sleep(0.05)
        chunks: list[bytes] = []
        done = asyncio.get_running_loop().create_future()

        async def on_chunk(m):
            if not m.data:  # the end: an empty message with a status header
                if not done.done():
                    done.set_result(m.headers)
                return
            chunks.append(m.data)
            if m.reply:
                await nc.publish(m.reply, b"")

        await nc.subscribe("snap.inbox", cb=on_chunk)
        resp = await nc.request("$JS.API.STREAM.SNAPSHOT.S",
                                json.dumps({"deliver_subject": "snap.inbox", "chunk_size": 65536}).encode(),
                                timeout=5)
        assert b'"error"' not in resp.data, resp.data
        snapshot = json.loads(resp.data)
        await asyncio.wait_for(done, 10)
        stream = b"".join(chunks)
        assert stream.startswith(STREAM_IDENTIFIER)
        with monkeypatch.context() as m:
            _no_plain_decoder(m)  # all of it on the fast path
            plain = read_all(stream)

        # and the other way: nats-server's s2.NewReader reads what S2Writer writes (a restore of the same
        # archive, re-encoded: compressed chunks, then after a second identifier uncompressed ones)
        half = len(plain) * 2 // 3
        ours = S2Writer("fast").encode(plain[:half]) + S2Writer("uncompressed").encode(plain[half:])
        assert {k for k, _ in chunks_of(ours)} == {0xFF, 0x00, 0x01}
        await js.delete_stream("S")
        resp = await nc.request("$JS.API.STREAM.RESTORE.S", json.dumps(
            {"config": snapshot["config"], "state": snapshot["state"]}).encode(), timeout=5)
        deliver = json.loads(resp.data)["deliver_subject"]
        for i in range(0, len(ours), 65536):
            await nc.request(deliver, ours[i:i + 65536], timeout=5)
        resp = await nc.request(deliver, b"", timeout=10)
        assert b'"error"' not in resp.data, resp.data
        info = await js.stream_info("S")
        assert info.state.messages == len(payloads)
        for seq in (1, 3000, len(payloads) - 3, len(payloads)):
            assert (await js.get_msg("S", seq)).data == payloads[seq - 1]
        await nc.close()
    finally:
        proc.terminate()
        proc.wait(5)
    assert read_all(stream, [rnd.randrange(1, 5000) for _ in range(len(stream) // 2500)]) == plain
    pos = 0
    for p in payloads:  # in order
        pos = plain.index(p, pos) + len(p)
    # the stream used S2's extensions: blocks Snappy refuses, repeat codes, blocks above 64 KiB
    forms: set[str] = set()
    pos = 0
    snappy_refused = 0
    big_blocks = 0
    for kind, length in chunks_of(stream):
        body = stream[pos + 4:pos + 4 + length]
        pos += 4 + length
        if kind != 0x00:
            continue
        blk = body[4:]
        forms |= _element_forms(blk)
        big_blocks += s2._uvarint(blk, 0)[0] > 65536
        try:
            cramjam.snappy.decompress_raw(blk)
        except cramjam.DecompressionError:
            snappy_refused += 1
    assert snappy_refused and big_blocks
    assert {"repeat0", "repeat5", "repeat7", "copy1", "copy2", "copy4"} <= forms, forms
