"""Query parameters shared by the gateway's HTTP APIs (kafka-pixy's and the REST Proxy's)."""

from __future__ import annotations

from collections.abc import Mapping


def bounded_int(query: Mapping[str, str], name: str, upper: int) -> int | None:
    """The `name` parameter as an integer in [0, upper], or None when it is absent.

    ValueError when it is present but not such an integer: each API words that error its own way.
    """
    raw = query.get(name)
    if raw is None:
        return None
    value = int(raw)  # ValueError for anything that is not a (decimal) integer
    if not 0 <= value <= upper:
        raise ValueError(f"{name} out of range")
    return value
