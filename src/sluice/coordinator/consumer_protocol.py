"""Just enough of the consumer protocol to learn which topics a member subscribes to.

ConsumerProtocolSubscription (the metadata a "consumer" member sends with each protocol), all
versions start the same way and are not flexible:
    version int16 | topics: int32 count, then int16 length + UTF-8 each | user_data bytes | ...
Everything after the topic list is ignored.
"""

from __future__ import annotations

import struct


def subscribed_topics(metadata: bytes) -> list[str] | None:
    """The subscription's topic names, or None if the bytes are not a subscription we can read."""
    try:
        (version, count) = struct.unpack_from(">hi", metadata, 0)
        if version < 0 or count < 0:
            return None
        position = 6
        topics = []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, position)
            position += 2
            if length < 0 or position + length > len(metadata):
                return None
            topics.append(metadata[position : position + length].decode())
            position += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def encode_subscription(topics: list[str], user_data: bytes | None = None, version: int = 0) -> bytes:
    """A minimal subscription (version, topics, user_data); used by tests and tools."""
    parts = [struct.pack(">hi", version, len(topics))]
    for topic in topics:
        name = topic.encode()
        parts.append(struct.pack(">h", len(name)) + name)
    if user_data is None:
        parts.append(struct.pack(">i", -1))
    else:
        parts.append(struct.pack(">i", len(user_data)) + user_data)
    return b"".join(parts)
