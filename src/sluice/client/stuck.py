"""A fetch error that means its partition cannot be read past an offset.

A corrupt record batch: the broker answers the fetch CORRUPT_MESSAGE, librdkafka hands the consumer an error
event (INVALID_MSG) and fetches the same offset again every fetch.error.backoff.ms, never getting further.
Every consumer of the project says so once, naming the offset, instead of logging each refetch or waiting
for records that cannot come.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, Message


def stuck_at(event: Message) -> str | None:
    """The text "cannot be read at offset N: <librdkafka's words>" for such an event, else None."""
    error = event.error()
    if error is None or error.code() != KafkaError.INVALID_MSG:
        return None
    return f"cannot be read at offset {event.offset()}: {error.str()}"
