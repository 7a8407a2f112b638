"""Record-batch compression codecs, with a hard bound on decompressed size.

Codec ids are the values of the low three bits of a batch's attributes, as Kafka defines them.

Every decompressor here is bounded by `max_size`: a batch of a few kilobytes can expand to gigabytes
(a compression bomb), so output is produced into buffers that never grow past `max_size`, and
exceeding the bound is reported as a corrupt record rather than attempted.

Snappy comes in two shapes on the wire. The Java client writes snappy-java's "xerial" stream
(an 8-byte magic, two int32 version fields, then blocks of [int32 length][raw snappy]); librdkafka
writes one raw snappy block. Both are decoded here; we encode raw snappy, which librdkafka and the
Java client's SnappyInputStream (it falls back to raw when the xerial magic is absent) both read.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from enum import IntEnum

import cramjam

from sluice.errors import CorruptRecordError, ErrorCode, KafkaError


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC = b"\x82SNAPPY\x00"
# magic + int32 version + int32 minimum compatible version
XERIAL_HEADER_SIZE = 16
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")

# Kafka's default levels (compression.gzip.level / compression.zstd.level); the gzip level is
# zlib's default, which is also what java.util.zip.Deflater uses.
GZIP_DEFAULT_LEVEL = 6
ZSTD_DEFAULT_LEVEL = 3

# zlib wbits for the gzip container (header and CRC trailer), as GZIPOutputStream writes.
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_GZIP_MAGIC = b"\x1f\x8b"

# First guess for the output buffer of a codec whose frames may not state their size; it grows
# fourfold per retry, so a typical batch (2-5x ratio) decodes on the first or second try.
_FIRST_GUESS_RATIO = 4
_MIN_GUESS = 64 * 1024
_GROWTH = 4


def _unsupported(codec: int) -> KafkaError:
    return KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec id {codec}")


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress `data` the way a Kafka producer would for this codec id."""
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        compressor = zlib.compressobj(GZIP_DEFAULT_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
        return compressor.compress(data) + compressor.flush()
    if codec == Codec.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(bytes(data)))
    if codec == Codec.LZ4:
        # The Java client decompresses each LZ4 block on its own, so blocks must be independent.
        compressor = cramjam.lz4.Compressor(block_linked=False)
        compressor.compress(bytes(data))
        return bytes(compressor.finish())
    if codec == Codec.ZSTD:
        return bytes(cramjam.zstd.compress(bytes(data), level=ZSTD_DEFAULT_LEVEL))
    raise _unsupported(codec)


def decompress(codec: int, data: bytes | bytearray | memoryview, max_size: int) -> bytes | bytearray:
    """Decompress `data`, producing at most `max_size` bytes.

    Raises CorruptRecordError when the data is corrupt or would expand past `max_size`, and
    KafkaError(UNSUPPORTED_COMPRESSION_TYPE) for an unknown codec id. The result may be a
    bytearray: copying it into bytes would double the peak memory of a large batch.
    """
    if max_size < 0:
        raise ValueError(f"max_size must not be negative, got {max_size}")
    if codec == Codec.NONE:
        if len(data) > max_size:
            raise _too_large(max_size)
        return bytes(data)
    if codec == Codec.GZIP:
        return _gunzip(data, max_size)
    if codec == Codec.SNAPPY:
        return _unsnappy(data, max_size)
    if codec == Codec.LZ4:
        return _decompress_growing(cramjam.lz4.decompress_into, "lz4", data, max_size)
    if codec == Codec.ZSTD:
        return _decompress_growing(cramjam.zstd.decompress_into, "zstd", data, max_size)
    raise _unsupported(codec)


def _too_large(max_size: int) -> CorruptRecordError:
    return CorruptRecordError(f"decompressed batch exceeds the limit of {max_size} bytes")


def _gunzip(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    # GZIPInputStream reads concatenated gzip members as one stream, so the budget spans all members.
    pieces: list[bytes] = []
    budget = max_size
    remaining: bytes | bytearray | memoryview = data
    while True:
        decompressor = zlib.decompressobj(_GZIP_WBITS)
        try:
            # zlib reads a max_length of 0 as "unlimited", so an exhausted budget still asks for one
            # byte and treats getting it as overflow.
            piece = decompressor.decompress(remaining, max(budget, 1))
            if len(piece) > budget:
                raise _too_large(max_size)
            budget -= len(piece)
            pieces.append(piece)
            if not decompressor.eof:
                # Either the output limit stopped us or the input ended early; one more byte of
                # output tells the two apart without allocating anything sizeable.
                if decompressor.decompress(decompressor.unconsumed_tail, 1):
                    raise _too_large(max_size)
                if not decompressor.eof:
                    raise CorruptRecordError("gzip stream is truncated")
        except zlib.error as exc:
            raise CorruptRecordError(f"gzip data is corrupt: {exc}") from exc
        remaining = decompressor.unused_data
        if not remaining:
            break
        if remaining[:2] != _GZIP_MAGIC:
            raise CorruptRecordError("unexpected bytes after the gzip stream")
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _unsnappy(data: bytes | bytearray | memoryview, max_size: int) -> bytearray:
    view = memoryview(data)
    if bytes(view[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
        return _unsnappy_raw(view, max_size)
    if len(view) < XERIAL_HEADER_SIZE:
        raise CorruptRecordError("snappy xerial header is truncated")
    # The version fields are ignored, as every reader does: some producers write them little-endian.
    blocks: list[memoryview] = []
    sizes: list[int] = []
    total = 0
    pos = XERIAL_HEADER_SIZE
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("snappy xerial block length is truncated")
        (block_length,) = _XERIAL_BLOCK_LENGTH.unpack_from(view, pos)
        pos += 4
        if block_length < 0 or pos + block_length > len(view):
            raise CorruptRecordError(f"snappy xerial block length {block_length} runs past the data")
        block = view[pos : pos + block_length]
        pos += block_length
        size = _raw_snappy_length(block)
        total += size
        # Summing the declared sizes first means a bomb is refused before any output exists.
        if total > max_size:
            raise _too_large(max_size)
        blocks.append(block)
        sizes.append(size)
    output = bytearray(total)
    out_view = memoryview(output)
    start = 0
    for block, size in zip(blocks, sizes, strict=True):
        _raw_snappy_into(block, out_view[start : start + size], size)
        start += size
    return output


def _unsnappy_raw(view: memoryview, max_size: int) -> bytearray:
    size = _raw_snappy_length(view)
    if size > max_size:
        raise _too_large(max_size)
    output = bytearray(size)
    _raw_snappy_into(view, memoryview(output), size)
    return output


def _raw_snappy_length(block: memoryview) -> int:
    # Raw snappy starts with the uncompressed length, which the decoder enforces exactly.
    try:
        return int(cramjam.snappy.decompress_raw_len(block))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"snappy data is corrupt: {exc}") from exc


def _raw_snappy_into(block: memoryview, destination: memoryview, size: int) -> None:
    try:
        written = int(cramjam.snappy.decompress_raw_into(block, destination))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"snappy data is corrupt: {exc}") from exc
    if written != size:
        raise CorruptRecordError(f"snappy block produced {written} bytes, its header declared {size}")


def _decompress_growing(
    decompress_into: Callable[[object, object], int],
    name: str,
    data: bytes | bytearray | memoryview,
    max_size: int,
) -> bytearray:
    """Decode into a fixed buffer, retrying with a larger one up to `max_size`.

    cramjam's *_into functions stop with an error once the buffer is full instead of growing it,
    which is what makes the bound hold; the price is re-decoding on a wrong guess, about a third
    extra work at most thanks to the fourfold growth.
    """
    capacity = min(max_size, max(_MIN_GUESS, len(data) * _FIRST_GUESS_RATIO))
    while True:
        output = bytearray(capacity)
        try:
            written = int(decompress_into(data, output))
        except cramjam.DecompressionError as exc:
            # A full buffer and damaged data raise the same exception type, so any failure below
            # the bound earns a retry; damaged data usually fails early, making retries cheap.
            if capacity < max_size:
                # Release the small buffer before allocating the larger, or both count at the peak.
                del output
                capacity = min(max_size, capacity * _GROWTH)
                continue
            # cramjam words a full buffer as "failed to write whole buffer".
            if "whole buffer" in str(exc):
                raise _too_large(max_size) from exc
            raise CorruptRecordError(f"{name} data is corrupt: {exc}") from exc
        del output[written:]
        return output
