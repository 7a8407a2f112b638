"""The consumer protocol's subscription, read with the shared ConsumerProtocolSubscription definition.

Its bytes travel in JoinGroup's protocol metadata behind an int16 version the definition leaves out.
Newer versions only append fields, so a version beyond the newest we know is read with the newest.
"""

from __future__ import annotations

import struct

from sluice.protocol.messages import struct_codecs
from sluice.protocol.primitives import DecodeError

_SUBSCRIPTION = struct_codecs("ConsumerProtocolSubscription")
_NEWEST = max(_SUBSCRIPTION.message.valid)
_VERSION = struct.Struct(">h")


def subscribed_topics(metadata: bytes) -> list[str] | None:
    """The subscription's topic names, or None if the bytes are not a subscription we can read."""
    try:
        (version,) = _VERSION.unpack_from(metadata)
        if version < 0:
            return None
        decoded, _ = _SUBSCRIPTION[min(version, _NEWEST)].decode(metadata, _VERSION.size)
    except (struct.error, DecodeError):
        return None
    return list(decoded.topics)


def encode_subscription(topics: list[str], user_data: bytes | None = None, version: int = 0) -> bytes:
    """A subscription with just topics and user data; used by tests and tools."""
    body = _SUBSCRIPTION[version].encode(_SUBSCRIPTION.cls(topics=topics, user_data=user_data))
    return _VERSION.pack(version) + body
