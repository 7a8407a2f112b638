"""Per-record produce checks that need the records themselves (Kafka's LogValidator.validateRecord):
CreateTime timestamps outside message.timestamp.before.max.ms / after.max.ms (or the older
message.timestamp.difference.max.ms), and producer batches that claim LogAppendTime. A bad record fails
with its index in record_errors (KIP-467) so clients fail just that record.

Decoding records costs what the produce path otherwise never pays, so the check runs only on topics that
set a bound; the common path stays header-only. The header's first and max timestamps cannot stand in for
the records: a producer that sets timestamps writes negative deltas.

Also the produce-side rule of compacted topics: every record needs a key (`check_keys_for_compaction`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sluice.errors import ErrorCode, KafkaError, RecordErrors
from sluice.protocol.records import BatchHeader, decode_batch, record_timestamp

UNBOUNDED = 2**63 - 1
NO_TIMESTAMP = -1
BEFORE_MAX_MS = "message.timestamp.before.max.ms"
AFTER_MAX_MS = "message.timestamp.after.max.ms"
DIFFERENCE_MAX_MS = "message.timestamp.difference.max.ms"
TIMESTAMP_TYPE = "message.timestamp.type"


@dataclass(frozen=True, slots=True)
class RecordChecks:
    before_max_ms: int = UNBOUNDED
    after_max_ms: int = UNBOUNDED
    log_append_time: bool = False

    @property
    def needed(self) -> bool:
        return self.before_max_ms < UNBOUNDED or self.after_max_ms < UNBOUNDED

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> RecordChecks:
        if configs.get(TIMESTAMP_TYPE, "CreateTime") == "LogAppendTime":
            # The broker stamps the time itself: producer timestamps are not checked, but a producer may not
            # claim LogAppendTime for its batch either.
            return cls(log_append_time=True)
        before = int(configs.get(BEFORE_MAX_MS, UNBOUNDED))
        after = int(configs.get(AFTER_MAX_MS, UNBOUNDED))
        # The deprecated single bound applies on both sides where the new ones are not set (KIP-937).
        difference = int(configs.get(DIFFERENCE_MAX_MS, UNBOUNDED))
        if BEFORE_MAX_MS not in configs:
            before = difference
        if AFTER_MAX_MS not in configs:
            after = difference
        return cls(before, after)


NO_CHECKS = RecordChecks()

_CLAIMS_LOG_APPEND_TIME = "the producer set the timestamp type LogAppendTime, which only the broker may set"


def check_records(records: memoryview, headers: list[BatchHeader], checks: RecordChecks, now_ms: int) -> None:
    """Raise RecordErrors naming every record whose timestamp Kafka's LogValidator would refuse: outside the
    topic's bounds (records without a timestamp, -1, are let through), or in a batch flagged LogAppendTime
    where the broker, not the producer, owns the time."""
    errors: list[tuple[int, str]] = []
    index = 0
    pos = 0
    for header in headers:
        if header.is_log_append_time and (checks.log_append_time or header.max_timestamp == NO_TIMESTAMP):
            # Header-only: in such a batch every record's timestamp is the header's, so all of them fail.
            errors.extend((index + i, _CLAIMS_LOG_APPEND_TIME) for i in range(header.record_count))
        elif checks.needed:
            errors.extend(_out_of_range(records, pos, header, index, checks, now_ms))
        index += header.record_count
        pos += header.size
    if errors:
        raise RecordErrors(
            ErrorCode.INVALID_TIMESTAMP,
            f"{len(errors)} record(s) rejected for a timestamp the topic refuses "
            f"(message.timestamp.type, message.timestamp.before.max.ms/after.max.ms)",
            errors,
        )


def _out_of_range(
    records: memoryview, pos: int, header: BatchHeader, first: int, checks: RecordChecks, now_ms: int
) -> list[tuple[int, str]]:
    low = now_ms - checks.before_max_ms
    high = now_ms + checks.after_max_ms
    errors: list[tuple[int, str]] = []
    _, records_of_batch = decode_batch(records, pos)
    for offset, record in enumerate(records_of_batch):
        stamp = record_timestamp(header, record)
        if stamp != NO_TIMESTAMP and not low <= stamp <= high:
            index = first + offset
            errors.append(
                (
                    index,
                    f"timestamp {stamp} of record {index} is out of range: it must be within [{low}, {high}]",
                )
            )
    return errors


def merge_record_errors(found: list[RecordErrors]) -> RecordErrors:
    """One answer for a batch that failed several checks, as Kafka's LogValidator.processRecordErrors gives it:
    a record keeps its first error (the key check runs before the timestamp check), and the partition's error
    is INVALID_TIMESTAMP if any record failed on its timestamp, else the first check's."""
    by_index: dict[int, tuple[ErrorCode, str]] = {}
    for failure in found:
        for index, message in failure.record_errors:
            by_index.setdefault(index, (failure.code, message))
    codes = {code for code, _ in by_index.values()}
    code = ErrorCode.INVALID_TIMESTAMP if ErrorCode.INVALID_TIMESTAMP in codes else found[0].code
    message = "; ".join(failure.message for failure in found)
    return RecordErrors(code, message, [(i, m) for i, (_, m) in sorted(by_index.items())])


def parse_checks(configs: Mapping[str, str]) -> RecordChecks:
    try:
        checks = RecordChecks.from_configs(configs)
    except ValueError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"bad timestamp bound in topic configs: {exc}") from exc
    # The produce path skips check_records for NO_CHECKS itself (an identity test) unless a batch claims
    # LogAppendTime, the only thing that can fail without bounds.
    return NO_CHECKS if checks == NO_CHECKS else checks


def check_keys_for_compaction(records: bytes | memoryview, headers: list[BatchHeader]) -> None:
    """Refuse a produce to a compacted topic that carries records without a key (KIP-467 errors name
    each one by its position among the partition's records), as Kafka's LogValidator does.
    """
    errors: list[tuple[int, str]] = []
    index = 0
    pos = 0
    view = memoryview(records)
    for header in headers:
        if not header.is_control:
            _, batch_records = decode_batch(view[pos : pos + header.size])
            for record in batch_records:
                if record.key is None:
                    errors.append((index, "compacted topic cannot accept a record without a key"))
                index += 1
        pos += header.size
    if errors:
        raise RecordErrors(
            ErrorCode.INVALID_RECORD,
            f"{len(errors)} record(s) without a key sent to a compacted topic",
            errors,
        )
