"""The codec of a message at one version, compiled from its definition (the source is written by
sluice.protocol.codegen): the generated classes, one decode and one encode function per version.

Generated code is the fast path the broker runs for every request. Classes are generated once per message;
every version's codec shares them, so handlers see the same attributes whatever version a client speaks.
"""

from __future__ import annotations

import copy
import operator
import struct
from collections.abc import Callable
from typing import Any

from sluice.protocol import primitives as p
from sluice.protocol.codegen import Generator, natural_default, walk_structs
from sluice.protocol.headers import API_VERSIONS_KEY, CONTROLLED_SHUTDOWN_KEY, HEADER_FIXED
from sluice.protocol.produce_answer import produce_response_encoder
from sluice.protocol.schema import MessageDef

_MISSING_ARG: Any = object()
Part = bytes | bytearray | memoryview
# An answer up to this size is joined into one buffer with its size prefix: copying a few hundred bytes costs
# less than handing the transport a dozen small parts. Bigger ones (fetch responses carrying record batches)
# keep their parts, so the batches are never copied on the way out.
JOIN_FRAME_BYTES = 4 * 1024
_INT16 = struct.Struct(">h")
_CORRELATION = struct.Struct(">i")
# An answer's size prefix and header in one: size, correlation id (and no tagged fields, in header v1).
_FRAME_HEAD = struct.Struct(">ii")
_TAGGED_FRAME_HEAD = struct.Struct(">iiB")
# Hand-written encoders for the commonest answers, by message: (version, generated encoder, classes) -> the
# encoder to use, which hands every shape it does not special-case to the generated one.
SPECIAL_ENCODERS = {"ProduceResponse": produce_response_encoder}


class Message:
    """Base of every generated message and struct class: attribute access, equality and a readable repr."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    # Every field's value in one C call: encoders compare tagged struct fields with their default for each
    # element of large arrays (every partition of a fetch), so equality must be cheap.
    _values: Callable[[Any], Any] = staticmethod(lambda message: ())

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self is other or self._values(self) == self._values(other)

    def __repr__(self) -> str:
        body = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({body})"

    __hash__ = None  # type: ignore[assignment]


def build_classes(message: MessageDef) -> dict[str, type[Message]]:
    """One class per struct of the message, the root class carrying the nested ones as attributes."""
    structs = walk_structs(message.root, {})
    namespace: dict[str, Any] = {"_M": _MISSING_ARG, "_ZERO_UUID": p.ZERO_UUID}
    classes: dict[str, type[Message]] = {}
    for name, struct_def in structs.items():
        attrs = tuple(f.attr for f in struct_def.fields)
        params = ", ".join(f"{a}=_M" for a in attrs)
        body = [f"def __init__(self{', *, ' + params if params else ''}):"]
        for f in struct_def.fields:
            body.append(f"    self.{f.attr} = {natural_default(f)} if {f.attr} is _M else {f.attr}")
        if not struct_def.fields:
            body.append("    pass")
        code: dict[str, Any] = {}
        exec("\n".join(body), namespace, code)
        values = staticmethod(operator.attrgetter(*attrs)) if attrs else Message._values
        cls = type(
            name,
            (Message,),
            {"__slots__": attrs, "_fields": attrs, "_values": values, "__init__": code["__init__"]},
        )
        classes[name] = cls
        namespace[f"_cls_{name}"] = cls
    root = classes[message.root.name]
    for name, cls in classes.items():
        if cls is not root:
            setattr(root, name, cls)
    return classes


class VersionCodec:
    """Encoder and decoder of one message at one version; for a request, how it is read with its header, and
    for a response, how it is framed with its header (`read_request`, `frame`)."""

    __slots__ = (
        "client_id_in_header",
        "cls",
        "decode_root",
        "encode_root",
        "flexible",
        "generated_encode_root",
        "message",
        "tagged_header",
        "version",
    )

    def __init__(self, message: MessageDef, version: int, classes: dict[str, type[Message]]) -> None:
        self.message = message
        self.version = version
        self.flexible = version in message.flexible
        # Kafka's header versions (ApiMessageType.requestHeaderVersion, responseHeaderVersion): the headers of
        # flexible versions end in tagged fields, except ApiVersions answers (header v0, so that a client can
        # read the answer before it knows what the broker speaks); ControlledShutdown v0 has no client id.
        answers_api_versions = message.api_key == API_VERSIONS_KEY and message.name.endswith("Response")
        self.tagged_header = self.flexible and not answers_api_versions
        self.client_id_in_header = not (message.api_key == CONTROLLED_SHUTDOWN_KEY and version == 0)
        self.cls = classes[message.root.name]
        gen = Generator(message, version)
        for struct_def in walk_structs(message.root, {}).values():
            gen.decode_struct(struct_def)
            gen.encode_struct(struct_def)
        namespace: dict[str, Any] = {
            name: getattr(p, name)
            for name in dir(p)
            if name.startswith(("read_", "write_", "check_", "skip_"))
        }
        namespace.update(
            {
                "DecodeError": p.DecodeError,
                "uvarint_bytes": p.uvarint_bytes,
                "_ZERO_UUID": p.ZERO_UUID,
                "_new": object.__new__,
                "_unpack_from": struct.unpack_from,
                "_pack": struct.pack,
            }
        )
        namespace.update({f"_cls_{name}": cls for name, cls in classes.items()})
        namespace.update({f"_DEFAULT_{name}": cls() for name, cls in classes.items()})
        namespace.update({name: struct.Struct(fmt) for fmt, name in gen.formats.items()})
        source = "\n".join(gen.lines)
        exec(compile(source, f"<sluice codec {message.name} v{version}>", "exec"), namespace)
        self.decode_root: Callable[[p.Buffer, int], tuple[Any, int]] = namespace[f"_dec_{message.root.name}"]
        self.encode_root: Callable[[Any, list[Any]], None] = namespace[f"_enc_{message.root.name}"]
        self.generated_encode_root = self.encode_root  # what a special encoder must match byte for byte
        special = SPECIAL_ENCODERS.get(message.name)
        if special is not None:
            self.encode_root = special(version, self.encode_root, classes)

    def decode(self, buf: p.Buffer, pos: int = 0) -> tuple[Any, int]:
        """Decode one message starting at `pos`; returns it and the position after it."""
        try:
            return self.decode_root(buf, pos)
        except p.DecodeError:
            raise
        except (IndexError, struct.error, UnicodeDecodeError, ValueError, OverflowError) as exc:
            raise p.DecodeError(f"malformed {self.message.name} v{self.version}: {exc}") from exc

    def read_header(self, frame: p.Buffer) -> tuple[str | None, int]:
        """The rest of a request's header: its client id (None in header v0, or when the client sent none) and
        where the body starts. The first fields (api key, version, correlation id: HEADER_FIXED) are read by
        whoever chose this codec."""
        pos = HEADER_FIXED.size
        client_id = None
        if not self.client_id_in_header:
            return client_id, pos
        try:
            (length,) = _INT16.unpack_from(frame, pos)
            end = pos + 2 + length
            if length >= 0 and end <= len(frame):  # read_string, inline for the common client id
                client_id, pos = str(frame[pos + 2 : end], "utf-8"), end
            else:
                client_id, pos = p.read_string(frame, pos)
            if self.tagged_header:
                if frame[pos] == 0:  # no tagged fields, as nearly always
                    pos += 1
                else:
                    count, pos = p.read_uvarint(frame, pos)
                    for _ in range(count):
                        _, pos = p.read_uvarint(frame, pos)
                        pos = p.skip_tagged_field(frame, pos)
        except (IndexError, struct.error, UnicodeDecodeError) as exc:
            raise p.DecodeError(f"malformed request header: {exc}") from exc
        return client_id, pos

    def frame(self, correlation_id: int, response: Any, throttle_ms: int = 0) -> tuple[list[Part], int]:
        """An answer of this codec's message, framed for `transport.writelines` (size prefix, response header,
        body), and the throttle time it carries. `response` is the message, a body encoded ahead (`Encoded`)
        or a kept answer (`Preencoded`). A quota's `throttle_ms` longer than the response's own throttle time
        is written into it, so that the client backs off too (KIP-219)."""
        kind = type(response)
        if kind is Encoded:
            return self.frame_body(correlation_id, response.body), throttle_ms
        throttle = getattr(response, "throttle_time_ms", 0)
        if throttle_ms > throttle:
            throttle = throttle_ms
            if hasattr(response, "throttle_time_ms"):
                response.throttle_time_ms = throttle
        parts: list[Part] = [
            _CORRELATION.pack(correlation_id) + b"\x00"
            if self.tagged_header
            else _CORRELATION.pack(correlation_id)
        ]
        if kind is Preencoded:
            if response.parts and response.api_version == self.version:
                parts.extend(response.parts)
            else:
                self.encode_root(response.message, parts)
        else:
            self.encode_root(response, parts)
        size = sum(map(len, parts))
        if size <= JOIN_FRAME_BYTES:
            return [b"".join([size.to_bytes(4, "big"), *parts])], throttle
        return [size.to_bytes(4, "big"), *parts], throttle

    def frame_body(self, correlation_id: int, body: bytes) -> list[Part]:
        """A body encoded ahead at this version, framed as `frame` frames the message (one struct call)."""
        if self.tagged_header:
            head = _TAGGED_FRAME_HEAD.pack(len(body) + 5, correlation_id, 0)
        else:
            head = _FRAME_HEAD.pack(len(body) + 4, correlation_id)
        return [head + body] if len(body) <= JOIN_FRAME_BYTES else [head, body]

    def encode_into(self, obj: Any, out: list[Any]) -> None:
        self.encode_root(obj, out)

    def encode(self, obj: Any) -> bytes:
        out: list[Any] = []
        self.encode_root(obj, out)
        return b"".join(out)


class MessageCodecs:
    """Every version of one message, compiled on first use."""

    def __init__(self, message: MessageDef) -> None:
        self.message = message
        self.classes = build_classes(message)
        self.cls = self.classes[message.root.name]
        self._versions: dict[int, VersionCodec] = {}

    def __getitem__(self, version: int) -> VersionCodec:
        codec = self._versions.get(version)
        if codec is None:
            if version not in self.message.valid:
                raise KeyError(f"{self.message.name} has no version {version}")
            codec = self._versions[version] = VersionCodec(self.message, version, self.classes)
        return codec


# ----- answers encoded ahead: bodies a fast path or a kept answer wrote before the shell frames them -----


class Encoded:
    """A response body a fast path encoded at the request's version without building the response, and
    `build`, which builds that response after all: for what must rewrite an answer before it goes out (a
    group commit whose fsync failed, sluice.broker.handlers.produce.refuse_unflushed)."""

    __slots__ = ("body", "build")

    def __init__(self, body: bytes, build: Callable[[], Any]) -> None:
        self.body = body
        self.build = build


class Preencoded:
    """A response already encoded at `api_version` (the same answer given again): the shell sends `parts`
    as its body instead of encoding `message`. Setting a throttle time (a quota, KIP-219) gives up the
    encoding: the shell then encodes a copy of `message` carrying it, and the kept answer stays as it was."""

    __slots__ = ("api_version", "message", "parts")

    def __init__(self, message: Any, api_version: int, parts: list[bytes]) -> None:
        self.message = message
        self.api_version = api_version
        self.parts = parts

    @property
    def throttle_time_ms(self) -> int:
        return int(self.message.throttle_time_ms)

    @throttle_time_ms.setter
    def throttle_time_ms(self, value: int) -> None:
        self.message = copy.copy(self.message)
        self.message.throttle_time_ms = value
        self.parts = []
