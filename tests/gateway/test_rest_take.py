"""How many buffered records a v2 records answer takes under `max_bytes` (the first always goes)."""

from __future__ import annotations

from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from sluice.gateway.rest.instances import _fitting

sizes = st.one_of(st.none(), st.integers(min_value=0, max_value=300))


def _record(offset: int, key: int | None, value: int | None) -> Message:
    return Message(
        topic="t",
        partition=0,
        offset=offset,
        key=None if key is None else b"k" * key,
        value=None if value is None else b"v" * value,
    )


def _one_at_a_time(records: list[Message], max_bytes: int) -> int:
    taken = size = 0
    for record in records:
        size += len(record.value() or b"") + len(record.key() or b"")
        if taken and size > max_bytes:
            break
        taken += 1
    return taken


@given(st.lists(st.tuples(sizes, sizes), max_size=40), st.integers(min_value=0, max_value=3000))
def test_takes_what_a_record_at_a_time_count_takes(
    fields: list[tuple[int | None, int | None]], limit: int
) -> None:
    records = [_record(i, key, value) for i, (key, value) in enumerate(fields)]
    assert _fitting(records, limit) == _one_at_a_time(records, limit)


def test_the_first_record_goes_even_when_larger_than_max_bytes() -> None:
    records = [_record(0, None, 500), _record(1, None, 1)]
    assert _fitting(records, 100) == 1
    assert _fitting(records[1:], 100) == 1
    assert _fitting([], 100) == 0


def test_all_of_them_when_they_fit_and_none_past_the_limit() -> None:
    records = [_record(i, 2 if i % 2 else None, None if i == 3 else 10) for i in range(10)]
    total = sum(len(r.value() or b"") + len(r.key() or b"") for r in records)
    assert _fitting(records, total) == 10
    assert _fitting(records, total - 1) == 9
