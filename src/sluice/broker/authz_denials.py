"""A whole request denied item by item, derived from the message definitions rather than written per API.

Kafka answers an administrative request the principal may not make (CreateAcls, WriteTxnMarkers,
ElectLeaders...) with the error on every item it names. `deny_every_item` builds that answer by walking the
response definition next to the request:
- error_code / error_message fields get the code and the message;
- a response list is filled from the request list of the same name, else from the only request list left
  (CreateAcls' creations -> results), one entry per request entry;
- fields of the same name are copied across (names, producer ids, entity types), recursively;
- a request list of bare numbers fills a response list of structs by the struct's field of that name, or
  its singular (WriteTxnMarkers' partition_indexes -> partitions[].partition_index).
"""

from __future__ import annotations

from typing import Any

from sluice.errors import ErrorCode
from sluice.protocol.messages import request_codecs, response_codecs
from sluice.protocol.schema import FieldDef, StructDef


def deny_every_item(api_key: int, version: int, request: Any, code: ErrorCode, message: str) -> Any:
    codecs = response_codecs(api_key)
    response = codecs.cls()
    _fill(
        codecs.cls,
        codecs.message.root,
        response,
        request_codecs(api_key).message.root,
        request,
        version,
        code,
        message,
    )
    return response


def _fill(
    cls: Any,
    shape: StructDef,
    out: Any,
    source_shape: StructDef | None,
    source: Any,
    version: int,
    code: ErrorCode,
    message: str,
) -> None:
    source_lists = (
        [f for f in source_shape.fields if f.is_array and version in f.versions] if source_shape else []
    )
    targets = [f for f in shape.fields if version in f.versions]
    unpaired = [f for f in targets if f.is_array and f.struct is not None]
    pairs = _pair_lists(unpaired, source_lists)
    for field in targets:
        attr = field.attr
        if attr.endswith("error_code") and not field.is_array:
            setattr(out, attr, int(code))
        elif attr == "error_message":
            setattr(out, attr, message)
        elif field.is_array and field.struct is not None:
            paired = pairs.get(attr)
            items = (getattr(source, paired.attr, None) or []) if paired is not None else []
            setattr(
                out, attr, [_entry(cls, field.struct, paired, item, version, code, message) for item in items]
            )
        elif not field.is_array and source is not None and hasattr(source, attr):
            setattr(out, attr, getattr(source, attr))


def _entry(
    cls: Any,
    shape: StructDef,
    paired: FieldDef | None,
    item: Any,
    version: int,
    code: ErrorCode,
    message: str,
) -> Any:
    entry = getattr(cls, shape.name)()
    if paired is not None and paired.struct is None:
        # A bare number: it names the entry through the struct's field of the same (singular) name.
        number = next(f for f in shape.fields if f.attr in _names_of(paired.attr))
        _fill(cls, shape, entry, None, None, version, code, message)
        setattr(entry, number.attr, item)
        return entry
    _fill(cls, shape, entry, paired.struct if paired is not None else None, item, version, code, message)
    return entry


def _pair_lists(targets: list[FieldDef], sources: list[FieldDef]) -> dict[str, FieldDef]:
    pairs: dict[str, FieldDef] = {}
    left = list(sources)
    for target in targets:
        same = next((s for s in left if s.attr == target.attr), None)
        if same is None and target.struct is not None:
            fields = {f.attr for f in target.struct.fields}
            same = next((s for s in left if s.struct is None and fields & _names_of(s.attr)), None)
        if same is not None:
            pairs[target.attr] = same
            left.remove(same)
    unpaired = [t for t in targets if t.attr not in pairs]
    if len(unpaired) == 1 and len(left) == 1:
        pairs[unpaired[0].attr] = left[0]
    return pairs


def _names_of(attr: str) -> set[str]:
    """A list's name and its singular forms (partition_indexes -> partition_index, topics -> topic)."""
    names = {attr}
    if attr.endswith("es"):
        names.add(attr[:-2])
    if attr.endswith("s"):
        names.add(attr[:-1])
    return names
