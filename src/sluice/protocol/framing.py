"""Kafka's length-prefixed frames assembled in place, with a hard size limit.

The socket reads straight into this buffer (asyncio's BufferedProtocol), and whole frames come out as views
into it: a 1 MB produce request is never copied before its batches reach the log. The 4-byte size prefix is
checked before any body byte is kept, so a hostile prefix costs nothing: the caller closes the connection on
FrameError.
"""

from __future__ import annotations

import struct

from sluice.errors import ProtocolError

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
MIN_READ_BYTES = 64 * 1024
# A new or quiet connection reads into this much; each read that fills the room doubles it, up to
# MIN_READ_BYTES, so thousands of mostly idle connections cost a few KiB each, busy ones 64 KiB.
FIRST_READ_BYTES = 512
_SIZE = struct.Struct(">i")


class FrameError(ProtocolError):
    """A size prefix that no valid request can have."""


class FrameBuffer:
    """Receive-in-place frame assembly.

    `writable()` gives the region the next read fills; `commit(n)` says how many bytes arrived and returns the
    frames now complete, as memoryviews valid until the next `writable()` call (which may move the bytes of
    an incomplete frame). Callers copy whatever they keep longer.
    """

    __slots__ = ("_buf", "_end", "_needed", "_read_size", "_room", "_start", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        # Allocated at the first read and given back by `release()`: an idle connection costs no buffer.
        self._buf = bytearray()
        self._start = 0  # first byte not yet returned as part of a frame
        self._end = 0  # end of received bytes
        self._needed = 0  # bytes the frame being assembled needs from _start (prefix included), 0 if unknown
        self._read_size = FIRST_READ_BYTES
        self._room = 0  # size of the region the last `writable()` offered

    @property
    def buffered(self) -> int:
        return self._end - self._start

    def writable(self) -> memoryview:
        pending = self._end - self._start
        # Room grows with what actually arrived (at most doubling), never straight to the size a prefix
        # claims: a peer that announces 100 MB and sends nothing must not cost 100 MB.
        wanted = pending + self._read_size
        if self._needed > wanted:
            wanted = min(self._needed, max(wanted, 2 * pending))
        if self._start and (pending == 0 or len(self._buf) - self._start < wanted):
            # Move the incomplete frame to the front; slice assignment never resizes, so stray views stay valid.
            self._buf[:pending] = self._buf[self._start : self._end]
            self._start, self._end = 0, pending
        if len(self._buf) < wanted:
            grown = bytearray(wanted)
            grown[:pending] = self._buf[self._start : self._end]
            self._buf, self._start, self._end = grown, 0, pending
        self._room = len(self._buf) - self._end
        return memoryview(self._buf)[self._end :]

    def release(self) -> None:
        """Drop the receive buffer if it holds no partial frame (views returned earlier stay valid)."""
        if self._end == self._start:
            self._buf = bytearray()
            self._start = self._end = self._needed = 0
            self._read_size = FIRST_READ_BYTES

    def commit(self, received: int) -> list[memoryview]:
        self._end += received
        if received >= self._room and self._read_size < MIN_READ_BYTES:
            self._read_size *= 2
        frames: list[memoryview] = []
        view = memoryview(self._buf)
        start, end = self._start, self._end
        while end - start >= 4:
            (size,) = _SIZE.unpack_from(view, start)
            if size <= 0 or size > self.max_frame_bytes:
                raise FrameError(f"frame size {size} outside 1..{self.max_frame_bytes}")
            if end - start < 4 + size:
                self._needed = 4 + size
                break
            frames.append(view[start + 4 : start + 4 + size])
            start += 4 + size
            self._start = start
            self._needed = 0
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Copying convenience for callers without a receive buffer (tests, blocking clients)."""
        frames: list[bytes] = []
        data = memoryview(data)
        while data:
            region = self.writable()
            chunk = min(len(region), len(data))
            region[:chunk] = data[:chunk]
            data = data[chunk:]
            frames.extend(bytes(f) for f in self.commit(chunk))
        return frames


# TLS seals each buffer handed to it as a record of its own (uvloop's and asyncio's SSL transports call
# SSLObject.write once per `writelines` item), and a record costs a cipher call plus 22 bytes however small it
# is. Small parts are therefore joined up to this size before a TLS write; bigger ones (record batches) go on
# as they are, since OpenSSL cuts them into full 16 KiB records anyway and joining them would only copy.
TLS_JOIN_BYTES = 16 * 1024


def coalesce(parts: list[bytes | bytearray | memoryview]) -> list[bytes | bytearray | memoryview]:
    """Join runs of small parts, so a TLS transport writes one record for them instead of one per part."""
    out: list[bytes | bytearray | memoryview] = []
    run: list[bytes | bytearray | memoryview] = []
    run_bytes = 0
    for part in parts:
        size = len(part)
        if size >= TLS_JOIN_BYTES or run_bytes + size > TLS_JOIN_BYTES:
            if run:
                out.append(b"".join(run) if len(run) > 1 else run[0])
                run, run_bytes = [], 0
            if size >= TLS_JOIN_BYTES:
                out.append(part)
                continue
        run.append(part)
        run_bytes += size
    if run:
        out.append(b"".join(run) if len(run) > 1 else run[0])
    return out
