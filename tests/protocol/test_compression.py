"""Codecs: round trips, the wire shapes other clients produce, corruption, and compression bombs."""

from __future__ import annotations

import gzip
import resource
import struct
import time
import zlib

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.errors import CorruptRecordError, ErrorCode, KafkaError
from sluice.protocol.compression import XERIAL_MAGIC, Codec, compress, decompress

ALL_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
COMPRESSING_CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
MIB = 1024 * 1024
GIB = 1024 * MIB


def _peak_rss_bytes() -> int:
    # Linux reports ru_maxrss in kilobytes.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=4096) | st.binary(max_size=64).map(lambda chunk: chunk * 200))
@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip_within_exact_bound(codec: Codec, data: bytes) -> None:
    compressed = compress(codec, data)
    assert decompress(codec, compressed, max_size=len(data)) == data
    if data:
        with pytest.raises(CorruptRecordError, match="exceeds the limit"):
            decompress(codec, compressed, max_size=len(data) - 1)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_accepts_memoryview_input(codec: Codec) -> None:
    data = b"sluice " * 1000
    framed = b"xx" + compress(codec, data) + b"yy"
    assert decompress(codec, memoryview(framed)[2:-2], max_size=len(data)) == data


@pytest.mark.parametrize("codec", COMPRESSING_CODECS)
def test_output_larger_than_first_buffer_guess_still_decodes(codec: Codec) -> None:
    # Zeros compress far beyond the 4x first guess, which forces the growing path.
    data = bytes(3 * MIB) + b"end"
    assert decompress(codec, compress(codec, data), max_size=4 * MIB) == data


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec_is_unsupported_compression_type(codec: int) -> None:
    with pytest.raises(KafkaError) as compress_error:
        compress(codec, b"data")
    assert compress_error.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(KafkaError) as decompress_error:
        decompress(codec, b"data", max_size=100)
    assert decompress_error.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("codec", COMPRESSING_CODECS)
def test_truncated_data_is_corrupt(codec: Codec) -> None:
    data = bytes(range(256)) * 64
    compressed = compress(codec, data)
    with pytest.raises(CorruptRecordError):
        decompress(codec, compressed[: len(compressed) // 2], max_size=len(data))


@pytest.mark.parametrize("codec", COMPRESSING_CODECS)
def test_garbage_is_corrupt(codec: Codec) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x00this is not compressed data at all\xff" * 3, max_size=MIB)


def test_gzip_is_a_gzip_container_readable_by_the_stdlib() -> None:
    data = b"gzip for the java client " * 100
    compressed = compress(Codec.GZIP, data)
    assert compressed[:2] == b"\x1f\x8b"
    assert gzip.decompress(compressed) == data


def test_gzip_concatenated_members_share_one_budget() -> None:
    first, second = b"a" * 1000, b"b" * 1000
    members = gzip.compress(first) + gzip.compress(second)
    assert decompress(Codec.GZIP, members, max_size=2000) == first + second
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(Codec.GZIP, members, max_size=1999)


def test_gzip_trailing_garbage_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="after the gzip stream"):
        decompress(Codec.GZIP, gzip.compress(b"payload") + b"junk", max_size=100)


def test_gzip_empty_payload_with_zero_budget() -> None:
    assert decompress(Codec.GZIP, gzip.compress(b""), max_size=0) == b""
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(Codec.GZIP, gzip.compress(b"x"), max_size=0)


def test_snappy_encodes_raw_snappy_like_librdkafka() -> None:
    data = b"raw snappy block " * 50
    compressed = compress(Codec.SNAPPY, data)
    assert not compressed.startswith(XERIAL_MAGIC)
    assert bytes(cramjam.snappy.decompress_raw(compressed)) == data


def _xerial(data: bytes, block_size: int, *, version_little_endian: bool = False) -> bytes:
    """The stream snappy-java's SnappyOutputStream (the Java client) writes."""
    version = struct.pack("<ii" if version_little_endian else ">ii", 1, 1)
    parts = [XERIAL_MAGIC, version]
    for start in range(0, len(data), block_size):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + block_size]))
        parts += [struct.pack(">i", len(block)), block]
    return b"".join(parts)


@pytest.mark.parametrize("little_endian_version", [False, True])
def test_snappy_decodes_xerial_framing_like_the_java_client_writes(little_endian_version: bool) -> None:
    data = bytes(range(256)) * 700  # several 32 KiB xerial blocks
    stream = _xerial(data, 32 * 1024, version_little_endian=little_endian_version)
    assert decompress(Codec.SNAPPY, stream, max_size=len(data)) == data
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(Codec.SNAPPY, stream, max_size=len(data) - 1)


def test_snappy_xerial_with_no_blocks_is_empty() -> None:
    assert decompress(Codec.SNAPPY, _xerial(b"", 32 * 1024), max_size=0) == b""


@pytest.mark.parametrize(
    "stream",
    [
        XERIAL_MAGIC + b"\x00\x00\x00\x01",  # header cut short
        XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"\x00\x00",  # block length cut short
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, 1000) + b"short",  # block runs past the data
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, -5) + b"x" * 10,  # negative block length
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, 4) + b"\xff\xff\xff\xff",  # block is not snappy
    ],
)
def test_snappy_malformed_xerial_is_corrupt(stream: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(Codec.SNAPPY, stream, max_size=MIB)


def test_lz4_frames_use_independent_blocks_as_the_java_client_requires() -> None:
    compressed = compress(Codec.LZ4, bytes(range(256)) * 1000)
    assert compressed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    frame_flags = compressed[4]
    assert frame_flags & 0x20, "block independence flag must be set"


def test_zstd_output_is_a_zstd_frame() -> None:
    assert compress(Codec.ZSTD, b"zstd data" * 10)[:4] == b"\x28\xb5\x2f\xfd"


# --- compression bombs: 1 GiB of zeros, built without ever holding 1 GiB ------------------------


def _gzip_bomb(mebibytes: int) -> bytes:
    # After a full flush deflate output references nothing before it, so one compressed MiB of
    # zeros can be repeated to make a single valid gzip member of any length.
    zeros = bytes(MIB)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    chunk = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    final_block = deflater.flush(zlib.Z_FINISH)
    crc = 0
    for _ in range(mebibytes):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc, (mebibytes * MIB) & 0xFFFFFFFF)
    return header + chunk * mebibytes + final_block + trailer


def _zstd_bomb(mebibytes: int) -> bytes:
    # A zstd stream may hold many frames back to back.
    frame_mib = 16 if mebibytes % 16 == 0 else 1
    frame = bytes(cramjam.zstd.compress(bytes(frame_mib * MIB)))
    return frame * (mebibytes // frame_mib)


def _lz4_bomb(mebibytes: int) -> bytes:
    # With independent blocks and no content checksum, one 64 KiB block can repeat freely.
    encoder = cramjam.lz4.Compressor(block_linked=False, content_checksum=False)
    encoder.compress(bytes(64 * 1024))
    frame = bytes(encoder.finish())
    flags = frame[4]
    assert flags & 0x20 and not flags & 0x08 and not flags & 0x04, "unexpected frame flags"
    header_size = 7
    block_size = int.from_bytes(frame[header_size : header_size + 4], "little") & 0x7FFFFFFF
    block_end = header_size + 4 + block_size + (4 if flags & 0x10 else 0)
    assert frame[block_end:] == b"\x00\x00\x00\x00", "expected one block then the end mark"
    return frame[:header_size] + frame[header_size:block_end] * (mebibytes * 16) + frame[block_end:]


def _snappy_bomb(mebibytes: int) -> bytes:
    # Snappy cannot beat about 21:1, so this one really is ~48 MB for a GiB.
    block = bytes(cramjam.snappy.compress_raw(bytes(MIB)))
    framed_block = struct.pack(">i", len(block)) + block
    return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + framed_block * mebibytes


BOMBS = {
    Codec.GZIP: _gzip_bomb,
    Codec.ZSTD: _zstd_bomb,
    Codec.LZ4: _lz4_bomb,
    Codec.SNAPPY: _snappy_bomb,
}


@pytest.mark.parametrize("codec", list(BOMBS))
def test_bomb_builders_make_valid_streams(codec: Codec) -> None:
    assert decompress(codec, BOMBS[codec](3), max_size=3 * MIB) == bytes(3 * MIB)


@pytest.mark.parametrize("codec", list(BOMBS))
def test_one_gib_bomb_is_refused_quickly_without_big_memory(codec: Codec) -> None:
    bomb = BOMBS[codec](1024)
    limit = 16 * MIB
    peak_before = _peak_rss_bytes()
    started = time.monotonic()
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(codec, bomb, max_size=limit)
    elapsed = time.monotonic() - started
    peak_growth = _peak_rss_bytes() - peak_before
    # Decoding the bomb would take 1 GiB; the bound allows the limit plus codec working memory.
    assert peak_growth < 6 * limit, f"peak RSS grew by {peak_growth / MIB:.0f} MiB"
    assert elapsed < 5, f"refusing the bomb took {elapsed:.1f}s"


def test_raw_snappy_declaring_a_huge_length_is_refused_before_allocating() -> None:
    # Raw snappy states its length up front: 1 GiB as a varint, then a few bytes of "data".
    declared = bytearray()
    length = GIB
    while length > 0x7F:
        declared.append((length & 0x7F) | 0x80)
        length >>= 7
    declared.append(length)
    peak_before = _peak_rss_bytes()
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(Codec.SNAPPY, bytes(declared) + b"\x00\x00\x01\x00", max_size=16 * MIB)
    assert _peak_rss_bytes() - peak_before < 64 * MIB
