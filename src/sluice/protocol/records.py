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
from dataclasses import dataclass

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


def parse_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at `pos`; the caller checks there are enough bytes."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos))
