"""Kafka's length-prefixed frames: `feed(bytes)` in, whole frames out, with a hard size limit.

The 4-byte big-endian size prefix is checked before any body byte is buffered, so a hostile prefix costs
nothing: the caller closes the connection on FrameError.
"""

from __future__ import annotations

from sluice.errors import ProtocolError

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


class FrameError(ProtocolError):
    """A size prefix that no valid request can have."""


class FrameDecoder:
    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._needed = -1  # body size of the frame being assembled; -1 while the prefix is incomplete

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; returns every frame body now complete (possibly none)."""
        buf = self._buffer
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while True:
            if self._needed < 0:
                if end - pos < 4:
                    break
                size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
                if size <= 0 or size > self.max_frame_bytes:
                    raise FrameError(f"frame size {size} outside 1..{self.max_frame_bytes}")
                pos += 4
                self._needed = size
            if end - pos < self._needed:
                break
            frames.append(bytes(buf[pos : pos + self._needed]))
            pos += self._needed
            self._needed = -1
        # One compaction per feed keeps the cost linear however many frames arrived together.
        if pos:
            del buf[:pos]
        return frames


def frame(parts: list[bytes | bytearray | memoryview]) -> list[bytes | bytearray | memoryview]:
    """Prefix an encoded message (a list of parts) with its size, ready for `transport.writelines`."""
    size = sum(len(part) for part in parts)
    return [size.to_bytes(4, "big"), *parts]
