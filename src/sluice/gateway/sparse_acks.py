"""kafka-pixy's sparse-ack codec: the acknowledged offset ranges above a committed offset, packed into the
commit's metadata string, so a restarted gateway (or a kafka-pixy) redelivers only what was not acked."""

from __future__ import annotations

from collections.abc import Sequence

# kafka-pixy packs each number as little-endian groups of 5 bits, one character
# of the standard base64 alphabet per group, with 0x20 set on every group but
# the last one.
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_DECODE = {char: index for index, char in enumerate(_ALPHABET)}
_CONTINUATION = 0x20
_MAX_GROUPS_PER_NUMBER = 64 // 5 + 1


class SparseAcksError(ValueError):
    """Commit metadata that is not a valid sparse-acks encoding."""


def _encode_number(number: int, out: list[str]) -> None:
    group, number = number & 0x1F, number >> 5
    while number > 0:
        out.append(_ALPHABET[group | _CONTINUATION])
        group, number = number & 0x1F, number >> 5
    out.append(_ALPHABET[group])


def _decode_number(encoded: str, position: int) -> tuple[int, int]:
    number = 0
    for shift_index in range(_MAX_GROUPS_PER_NUMBER):
        if position >= len(encoded):
            break
        char = encoded[position]
        value = _DECODE.get(char)
        if value is None:
            raise SparseAcksError(f"bad char: {char!r}")
        number |= (value & 0x1F) << (5 * shift_index)
        position += 1
        if not value & _CONTINUATION:
            return number, position
    raise SparseAcksError(f"bad sequence: {encoded[position - 1 :]!r}")


def encode_sparse_acks(
    base: int, acked_ranges: Sequence[tuple[int, int]], max_length: int | None = None
) -> str:
    """Encode half-open acked ranges [from, to) lying above offset `base`.

    With `max_length`, the highest ranges that do not fit are left out: brokers
    cap commit metadata (offset.metadata.max.bytes, 4096 by default), and losing
    a few acks only means redelivering those messages, never skipping one.
    """
    out: list[str] = []
    length = 0
    for range_from, range_to in acked_ranges:
        encoded: list[str] = []
        _encode_number(range_from - base, encoded)
        _encode_number(range_to - range_from, encoded)
        if max_length is not None and length + len(encoded) > max_length:
            break
        out.extend(encoded)
        length += len(encoded)
        base = range_to
    return "".join(out)


def decode_sparse_acks(base: int, encoded: str) -> list[tuple[int, int]]:
    """Inverse of `encode_sparse_acks`; raises `SparseAcksError` on garbage."""
    ranges: list[tuple[int, int]] = []
    position = 0
    while position < len(encoded):
        delta, position = _decode_number(encoded, position)
        range_from = base + delta
        if position >= len(encoded):
            raise SparseAcksError(f"bad encoding: {encoded!r}: range without an end")
        length, position = _decode_number(encoded, position)
        range_to = range_from + length
        if range_from >= range_to or range_from <= 0:
            raise SparseAcksError(f"bad encoding: {encoded!r}: bad range {range_from}-{range_to}")
        ranges.append((range_from, range_to))
        base = range_to
    return ranges


def sparse_acks_to_str(base: int, encoded: str) -> str:
    """Human readable acked ranges relative to `base`, e.g. "1-3,5-6" (kafka-pixy's format)."""
    try:
        ranges = decode_sparse_acks(base, encoded)
    except SparseAcksError:
        return ""
    return ",".join(f"{range_from - base}-{range_to - base}" for range_from, range_to in ranges)
