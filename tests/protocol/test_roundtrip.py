"""Every message at every version survives encode → decode unchanged (hypothesis-generated values), and
decoding never reads past what it was given."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol.codec import MessageCodecs
from sluice.protocol.messages import (
    APIS_BY_KEY,
    STRUCTS_BY_NAME,
    request_codecs,
    response_codecs,
    struct_codecs,
)
from sluice.protocol.primitives import DecodeError
from sluice.protocol.schema import FieldDef, StructDef

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def value_strategy(f: FieldDef, version: int, classes: dict[str, type], element: bool = False) -> st.SearchStrategy:
    if f.is_array and not element:
        inner = value_strategy(f, version, classes, element=True)
        base: st.SearchStrategy = st.lists(inner, max_size=3)
    elif f.type in INT_RANGES:
        low, high = INT_RANGES[f.type]
        base = st.integers(low, high)
    elif f.type == "bool":
        base = st.booleans()
    elif f.type == "float64":
        base = st.floats(allow_nan=False)
    elif f.type == "string":
        base = st.text(max_size=8)
    elif f.type in ("bytes", "records"):
        base = st.binary(max_size=16)
    elif f.type == "uuid":
        base = st.uuids()
    else:
        assert f.struct is not None
        base = struct_strategy(f.struct, version, classes)
    if not element and version in f.nullable:
        return st.none() | base
    return base


def struct_strategy(struct: StructDef, version: int, classes: dict[str, type]) -> st.SearchStrategy:
    present = {f.attr: value_strategy(f, version, classes) for f in struct.fields if version in f.versions}
    return st.fixed_dictionaries(present).map(lambda kwargs: classes[struct.name](**kwargs))


CASES: list[tuple[str, MessageCodecs, int]] = []
for key, api in sorted(APIS_BY_KEY.items()):
    for version in api.versions:
        CASES.append((f"{api.name}Request-v{version}", request_codecs(key), version))
        CASES.append((f"{api.name}Response-v{version}", response_codecs(key), version))
for name, struct_def in sorted(STRUCTS_BY_NAME.items()):
    for version in struct_def.message_def.valid:
        CASES.append((f"{name}-v{version}", struct_codecs(name), version))


@pytest.mark.parametrize(("codecs", "version"), [(c, v) for _, c, v in CASES], ids=[n for n, _, _ in CASES])
def test_round_trip(codecs: MessageCodecs, version: int) -> None:
    strategy = struct_strategy(codecs.message.root, version, codecs.classes)
    codec = codecs[version]

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def check(message: Any) -> None:
        encoded = codec.encode(message)
        decoded, end = codec.decode(encoded)
        assert end == len(encoded)
        assert decoded == message
        # Every strict prefix is either a complete shorter message (impossible here) or an error, never a crash.
        for cut in {0, len(encoded) // 2, max(len(encoded) - 1, 0)}:
            if cut < len(encoded):
                try:
                    _, pos = codec.decode(encoded[:cut])
                except DecodeError:
                    continue
                assert pos <= cut

    check()


def test_unknown_tagged_fields_are_skipped() -> None:
    codecs = request_codecs(18)  # ApiVersions v3 is flexible
    codec = codecs[3]
    message = codecs.cls(client_software_name="sluice", client_software_version="1.0")
    encoded = codec.encode(message)
    assert encoded.endswith(b"\x00")
    with_unknown_tag = encoded[:-1] + b"\x01" + b"\x63" + b"\x03abc"
    decoded, end = codec.decode(with_unknown_tag)
    assert decoded == message and end == len(with_unknown_tag)
