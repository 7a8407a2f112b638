"""Record batches (message format v2): the batch header, validation, and record encode/decode.

Batch layout (offsets in bytes; all big-endian):
  0 baseOffset int64 | 8 batchLength int32 (bytes after this field) | 12 partitionLeaderEpoch int32
  16 magic int8 (=2) | 17 crc uint32 (CRC-32C of bytes 21..end) | 21 attributes int16
  23 lastOffsetDelta int32 | 27 baseTimestamp int64 | 35 maxTimestamp int64 | 43 producerId int64
  51 producerEpoch int16 | 53 baseSequence int32 | 57 recordCount int32 | 61 records...
The CRC does not cover baseOffset, so the broker assigns offsets by rewriting 8 bytes in place.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from crc32c import crc32c

from sluice.errors import CorruptRecordError, ErrorCode, KafkaError
from sluice.protocol.compression import Codec, compress, decompress

BATCH_HEADER_SIZE = 61
# baseOffset + batchLength: what must be read to learn how long the whole batch is.
LOG_OVERHEAD = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

_HEADER = struct.Struct(">qiibIhiqqqhii")

MAGIC_V2 = 2
# batchLength counts the bytes after itself, so a batch with no records has this length.
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAX_TIMESTAMP_OFFSET = 35
# crc + magic + attributes + key length + value length: the smallest v0 message after its size field.
_MIN_LEGACY_MESSAGE_LENGTH = 14
DEFAULT_MAX_UNCOMPRESSED = 64 * 1024 * 1024
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

ByteSource = bytes | bytearray | memoryview

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
# Everything from attributes to recordCount: the header part covered by the CRC.
CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")
BEFORE_CRC = struct.Struct(">qiib")


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_LOG_APPEND)


def parse_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at `pos`; the caller checks there are enough bytes."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


@dataclass(slots=True)
class Record:
    """One record inside a batch; its absolute offset and timestamp come from the batch header."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    # Unused by Kafka so far; kept so a decoded record re-encodes to the same bytes.
    attributes: int = 0


def record_offset(header: BatchHeader, record: Record) -> int:
    return header.base_offset + record.offset_delta


def record_timestamp(header: BatchHeader, record: Record) -> int:
    # With LogAppendTime the broker stamps only maxTimestamp; it stands for every record.
    if header.attributes & TIMESTAMP_TYPE_LOG_APPEND:
        return header.max_timestamp
    return header.base_timestamp + record.timestamp_delta


# --- zigzag varints ---------------------------------------------------------------------------

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_VARINT_MAX_BYTES = 5
_VARLONG_MAX_BYTES = 10


def write_varint(out: bytearray, value: int) -> None:
    """Append `value` (an int32) zigzag-encoded."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    _write_unsigned(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    """Append `value` (an int64) zigzag-encoded."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    _write_unsigned(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _write_unsigned(out: bytearray, unsigned: int) -> None:
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)


def encode_varint(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def encode_varlong(value: int) -> bytes:
    out = bytearray()
    write_varlong(out, value)
    return bytes(out)


def decode_varint(buf: ByteSource, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Read a zigzag int32 at `pos`, not reading at or past `end`; returns (value, next position)."""
    return _read_zigzag(buf, pos, len(buf) if end is None else end, _VARINT_MAX_BYTES, 32)


def decode_varlong(buf: ByteSource, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Read a zigzag int64 at `pos`, not reading at or past `end`; returns (value, next position)."""
    return _read_zigzag(buf, pos, len(buf) if end is None else end, _VARLONG_MAX_BYTES, 64)


def _read_zigzag(buf: ByteSource, pos: int, end: int, max_bytes: int, bits: int) -> tuple[int, int]:
    start = pos
    limit = min(end, pos + max_bytes)
    unsigned = 0
    shift = 0
    while pos < limit:
        byte = buf[pos]
        pos += 1
        unsigned |= (byte & 0x7F) << shift
        if byte < 0x80:
            if unsigned >> bits:
                raise CorruptRecordError(f"varint at {start} overflows {bits} bits")
            return (unsigned >> 1) ^ -(unsigned & 1), pos
        shift += 7
    if pos - start >= max_bytes:
        raise CorruptRecordError(f"varint at {start} is longer than {max_bytes} bytes")
    raise CorruptRecordError(f"varint at {start} runs past the end of its data")


# --- records ----------------------------------------------------------------------------------


def _write_nullable_bytes(out: bytearray, value: bytes | bytearray | memoryview | None) -> None:
    if value is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(value))
        out += value


def _write_record(out: bytearray, record: Record) -> None:
    body = bytearray()
    body.append(record.attributes & 0xFF)
    write_varlong(body, record.timestamp_delta)
    write_varint(body, record.offset_delta)
    _write_nullable_bytes(body, record.key)
    _write_nullable_bytes(body, record.value)
    write_varint(body, len(record.headers))
    for header_key, header_value in record.headers:
        encoded_key = header_key.encode("utf-8")
        write_varint(body, len(encoded_key))
        body += encoded_key
        _write_nullable_bytes(body, header_value)
    write_varint(out, len(body))
    out += body


def _read_nullable_bytes(data: ByteSource, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    length, pos = _read_zigzag(data, pos, end, _VARINT_MAX_BYTES, 32)
    if length == -1:
        return None, pos
    if length < -1:
        raise CorruptRecordError(f"record {what} has invalid length {length}")
    if pos + length > end:
        raise CorruptRecordError(f"record {what} of {length} bytes runs past the record")
    return bytes(data[pos : pos + length]), pos + length


def _read_record(data: ByteSource, pos: int, end: int) -> tuple[Record, int]:
    length, pos = _read_zigzag(data, pos, end, _VARINT_MAX_BYTES, 32)
    record_end = pos + length
    if length < 1 or record_end > end:
        raise CorruptRecordError(f"record length {length} at {pos} does not fit the batch")
    attributes = data[pos]
    pos += 1
    timestamp_delta, pos = _read_zigzag(data, pos, record_end, _VARLONG_MAX_BYTES, 64)
    offset_delta, pos = _read_zigzag(data, pos, record_end, _VARINT_MAX_BYTES, 32)
    key, pos = _read_nullable_bytes(data, pos, record_end, "key")
    value, pos = _read_nullable_bytes(data, pos, record_end, "value")
    header_count, pos = _read_zigzag(data, pos, record_end, _VARINT_MAX_BYTES, 32)
    if header_count < 0:
        raise CorruptRecordError(f"record has invalid header count {header_count}")
    headers: list[tuple[str, bytes | None]] = []
    # Each header takes at least two bytes, so a lying count fails at the record's end.
    for _ in range(header_count):
        key_length, pos = _read_zigzag(data, pos, record_end, _VARINT_MAX_BYTES, 32)
        if key_length < 0 or pos + key_length > record_end:
            raise CorruptRecordError(f"record header key length {key_length} is invalid")
        try:
            header_key = str(data[pos : pos + key_length], "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError("record header key is not valid UTF-8") from exc
        header_value, pos = _read_nullable_bytes(data, pos + key_length, record_end, "header value")
        headers.append((header_key, header_value))
    if pos != record_end:
        raise CorruptRecordError(
            f"record declared {length} bytes but its fields end {record_end - pos} early"
        )
    return Record(offset_delta, timestamp_delta, key, value, headers, attributes), pos


# --- batches ----------------------------------------------------------------------------------


def encode_batch(
    records: list[Record],
    *,
    base_offset: int = 0,
    base_timestamp: int,
    max_timestamp: int | None = None,
    compression: int = Codec.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type_log_append: bool = False,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode one v2 batch. Offset deltas must increase; `max_timestamp` defaults to the latest
    record timestamp, `last_offset_delta` to the last record's delta (-1 for an empty batch)."""
    body = bytearray()
    previous_delta = -1
    for record in records:
        if record.offset_delta <= previous_delta:
            raise ValueError(f"offset deltas must increase, got {record.offset_delta} after {previous_delta}")
        previous_delta = record.offset_delta
        _write_record(body, record)
    payload = body if compression == Codec.NONE else compress(compression, body)
    if max_timestamp is None:
        max_timestamp = base_timestamp + max((record.timestamp_delta for record in records), default=0)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else -1
    attributes = compression
    if timestamp_type_log_append:
        attributes |= TIMESTAMP_TYPE_LOG_APPEND
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    covered_header = CRC_COVERED_HEADER.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    crc = crc32c(payload, crc32c(covered_header))
    prefix = BEFORE_CRC.pack(base_offset, MIN_BATCH_LENGTH + len(payload), partition_leader_epoch, MAGIC_V2)
    return b"".join((prefix, _UINT32.pack(crc), covered_header, payload))


def decode_batch(
    buf: ByteSource, pos: int = 0, *, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at `pos`: check it is whole, its CRC, and that it holds exactly
    recordCount records; decompress at most `max_uncompressed` bytes."""
    view = _byte_view(buf)
    header = _read_whole_header(view, pos)
    end = pos + header.size
    if crc32c(view[pos + ATTRIBUTES_OFFSET : end]) != header.crc:
        raise CorruptRecordError(f"batch at {pos} fails its CRC check")
    if header.record_count < 0:
        raise CorruptRecordError(f"batch at {pos} has negative record count {header.record_count}")
    data: ByteSource
    if header.compression == Codec.NONE:
        data, cursor, stop = view, pos + BATCH_HEADER_SIZE, end
    else:
        data = decompress(header.compression, view[pos + BATCH_HEADER_SIZE : end], max_uncompressed)
        cursor, stop = 0, len(data)
    records: list[Record] = []
    for _ in range(header.record_count):
        record, cursor = _read_record(data, cursor, stop)
        records.append(record)
    if cursor != stop:
        raise CorruptRecordError(
            f"batch at {pos} has {stop - cursor} bytes left after its {header.record_count} records"
        )
    return header, records


def iter_batches(buf: ByteSource) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each whole batch, stopping quietly at a truncated last batch
    (fetch responses may end with one). Does not check CRCs."""
    view = _byte_view(buf)
    total = len(view)
    pos = 0
    while total - pos > MAGIC_OFFSET:
        size = LOG_OVERHEAD + _checked_batch_length(view, pos)
        if pos + size > total:
            return
        yield pos, parse_batch_header(view, pos)
        pos += size


def validate_batches(buf: ByteSource, *, max_batch_bytes: int, from_client: bool = True) -> list[BatchHeader]:
    """The produce-path check: whole batches, magic 2, sizes, CRC and offset/count consistency,
    without decompressing or reading a single record.

    `from_client` adds the checks Kafka applies only to producer writes (the count and offset range
    agree, no control batches, an idempotent batch carries a sequence).
    """
    view = _byte_view(buf)
    total = len(view)
    if total == 0:
        raise CorruptRecordError("produce request carries no record batches")
    headers: list[BatchHeader] = []
    pos = 0
    # Runs once per produced batch: the header is unpacked once and its fields read as plain attributes;
    # the helpers that name a fault run only when one of the cheap tests below has found it.
    while pos < total:
        if total - pos < BATCH_HEADER_SIZE:
            # A v0/v1 message can be shorter than a v2 header; name the format if we can see it.
            if total - pos > MAGIC_OFFSET:
                _checked_batch_length(view, pos)
            raise CorruptRecordError(f"{total - pos} trailing bytes at {pos} do not form a batch")
        header = BatchHeader(*_HEADER.unpack_from(view, pos))
        if header.magic != MAGIC_V2 or header.batch_length < MIN_BATCH_LENGTH:
            _checked_batch_length(view, pos)  # raises, naming what is wrong
        size = LOG_OVERHEAD + header.batch_length
        if pos + size > total:
            raise CorruptRecordError(f"batch at {pos} claims {size} bytes but only {total - pos} remain")
        if size > max_batch_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE, f"batch of {size} bytes exceeds the limit of {max_batch_bytes}"
            )
        if crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]) != header.crc:
            raise CorruptRecordError(f"batch at {pos} fails its CRC check")
        attributes = header.attributes
        if attributes & COMPRESSION_MASK > Codec.ZSTD:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"batch at {pos} uses codec id {attributes & COMPRESSION_MASK}",
            )
        count = header.record_count
        if count < 0:
            raise CorruptRecordError(f"batch at {pos} has negative record count {count}")
        if from_client and (
            count == 0
            or header.last_offset_delta != count - 1
            or attributes & CONTROL_FLAG
            or (header.producer_id >= 0 and header.base_sequence < 0)
        ):
            _check_client_batch(header, pos)  # raises, naming what is wrong
        headers.append(header)
        pos += size
    return headers


def _check_client_batch(header: BatchHeader, pos: int) -> None:
    # Kafka's LogValidator rejects these with InvalidRecordException, i.e. INVALID_RECORD.
    if header.record_count == 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"batch at {pos} has no records")
    if header.last_offset_delta != header.record_count - 1:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"batch at {pos} has lastOffsetDelta {header.last_offset_delta} "
            f"but {header.record_count} records",
        )
    if header.is_control:
        raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"batch from producer {header.producer_id} has invalid sequence {header.base_sequence}",
        )


def _byte_view(buf: ByteSource) -> memoryview:
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _checked_batch_length(view: memoryview, pos: int) -> int:
    """Check the length and magic of the batch at `pos`; at least 17 bytes must be there."""
    (batch_length,) = _INT32.unpack_from(view, pos + BATCH_LENGTH_OFFSET)
    # Below the smallest v0 message the bytes are no batch of any format; judging that before the
    # magic byte keeps a run of zeros from passing for a v0 message.
    if batch_length < _MIN_LEGACY_MESSAGE_LENGTH:
        raise CorruptRecordError(f"batch at {pos} has length {batch_length}, below any message format")
    magic = view[pos + MAGIC_OFFSET]
    if magic in (0, 1):
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "message format v0/v1 is not supported")
    if magic != MAGIC_V2:
        raise CorruptRecordError(f"batch at {pos} has unknown magic {magic}")
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at {pos} has length {batch_length}, below {MIN_BATCH_LENGTH}")
    return batch_length


def _read_whole_header(view: memoryview, pos: int) -> BatchHeader:
    if pos < 0:
        raise ValueError(f"position must not be negative, got {pos}")
    available = len(view) - pos
    if available > MAGIC_OFFSET:
        _checked_batch_length(view, pos)
    if available < BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"batch header at {pos} is truncated ({max(available, 0)} bytes)")
    header = parse_batch_header(view, pos)
    if header.size > available:
        raise CorruptRecordError(f"batch at {pos} claims {header.size} bytes but only {available} remain")
    return header


# --- in-place rewrites by the broker -------------------------------------------------------------


def assign_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Set the batch's baseOffset; it lies outside the CRC, so the batch stays valid."""
    _INT64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Set the batch's partitionLeaderEpoch; it lies outside the CRC, so the batch stays valid."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(
    buf: bytearray | memoryview, pos: int, max_timestamp: int, *, log_append_time: bool
) -> None:
    """Set maxTimestamp and the timestamp type (LogAppendTime stamping), then refresh the CRC;
    both fields are covered by it, unlike the offset and leader epoch."""
    view = _byte_view(buf)
    (attributes,) = _INT16.unpack_from(view, pos + ATTRIBUTES_OFFSET)
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_LOG_APPEND
    else:
        attributes &= ~TIMESTAMP_TYPE_LOG_APPEND
    _INT16.pack_into(view, pos + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(view, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    (batch_length,) = _INT32.unpack_from(view, pos + BATCH_LENGTH_OFFSET)
    end = pos + LOG_OVERHEAD + batch_length
    _UINT32.pack_into(view, pos + CRC_OFFSET, crc32c(view[pos + ATTRIBUTES_OFFSET : end]))
