""".proto text read as written, into the element tree Confluent's registry prints schemas from.

Confluent's ProtobufSchema parses schema text with Wire's ProtoParser, which keeps the source's own
spelling (type names as written, option values as written, statement order) and drops comments; its
canonical and normalized texts are printed from that tree (see protobuf_canonical). A compiled descriptor
has lost that spelling, so this module reads the text itself. It is a reader of well-formed files only:
protoc still compiles every schema, and its messages are the ones users see. (proto-schema-parser 2.1, the
maintained pure-Python .proto parser, was tried in its place: its grammar refuses an editions file's unquoted
reserved names, it converts option literals (1.50, 017, 0x1F, escapes) instead of keeping them as written,
and it is 12-14x slower.)

Custom options (parenthesized names) are never resolved by Confluent: it keeps them in the text and builds
descriptors without them, so a schema may use an option whose definition it does not import at all.
`without_custom_options` gives protoc the same text with those options blanked out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .parsed import InvalidSchemaError

MAX_TAG = 536_870_911

_TOKEN = re.compile(
    r"""(?P<space>\s+|//[^\n]*|/\*.*?\*/)
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<number>-?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[fF]?)
      | (?P<word>-?\.?[A-Za-z_][\w.]*)
      | (?P<symbol>[{}\[\]()<>;,=:.\-])""",
    re.VERBOSE | re.DOTALL,
)
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    start: int
    end: int


@dataclass
class Option:
    """One option assignment. kind is Wire's: STRING, BOOLEAN, ENUM, NUMBER, OPTION (a dotted sub-name,
    value then an Option), MAP (an aggregate, a dict) or LIST."""

    name: str
    kind: str
    value: Any
    parenthesized: bool = False


class Identifier(str):
    """A reserved name written without quotes (editions files must), printed back the same way."""


@dataclass(frozen=True)
class Primitive:
    """A BOOLEAN, ENUM or NUMBER value inside an aggregate (strings stay str, as in Wire)."""

    kind: str
    value: str


def as_item(kind: str, value: Any) -> Any:
    """An option value as it sits in an aggregate or a list: a BOOLEAN, ENUM or NUMBER keeps its kind."""
    return Primitive(kind, value) if kind in ("BOOLEAN", "ENUM", "NUMBER") else value


@dataclass
class Field:
    label: str | None
    type: str
    name: str
    tag: int
    options: list[Option] = field(default_factory=list)
    default: str | None = None
    json_name: str | None = None


@dataclass
class Group:
    label: str | None
    name: str
    tag: int
    fields: list[Field] = field(default_factory=list)


@dataclass
class OneOf:
    name: str
    options: list[Option] = field(default_factory=list)
    fields: list[Field] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)


@dataclass
class Ranges:
    """A reserved or extensions statement: names (str), single numbers (int) and (start, end) ranges."""

    values: list[Any]
    options: list[Option] = field(default_factory=list)


@dataclass
class Extend:
    name: str
    fields: list[Field] = field(default_factory=list)


@dataclass
class EnumConstant:
    name: str
    tag: int
    options: list[Option] = field(default_factory=list)


@dataclass
class Enum:
    name: str
    reserveds: list[Ranges] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    constants: list[EnumConstant] = field(default_factory=list)


@dataclass
class Message:
    name: str
    reserveds: list[Ranges] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    fields: list[Field] = field(default_factory=list)
    oneofs: list[OneOf] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    extensions: list[Ranges] = field(default_factory=list)
    extends: list[Extend] = field(default_factory=list)
    types: list[Message | Enum] = field(default_factory=list)


@dataclass
class Rpc:
    name: str
    request: str
    response: str
    request_streaming: bool = False
    response_streaming: bool = False
    options: list[Option] = field(default_factory=list)


@dataclass
class Service:
    name: str
    options: list[Option] = field(default_factory=list)
    rpcs: list[Rpc] = field(default_factory=list)


@dataclass
class ProtoFile:
    syntax: str | None = None
    edition: str | None = None
    package: str | None = None
    imports: list[str] = field(default_factory=list)
    public_imports: list[str] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    types: list[Message | Enum] = field(default_factory=list)
    extends: list[Extend] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise _error(f"unexpected character {text[position]!r}", text, position)
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append(Token(kind, match.group(), match.start(), match.end()))
        position = match.end()
    return tokens


def unquote(literal: str) -> str:
    """A string literal's value (C-style escapes, as protoc and Wire read them)."""
    body, out, index = literal[1:-1], [], 0
    while index < len(body):
        char = body[index]
        index += 1
        if char != "\\" or index >= len(body):
            out.append(char)
            continue
        code = body[index]
        index += 1
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
        elif code in "xX":
            digits = re.match(r"[0-9a-fA-F]{1,2}", body[index:])
            out.append(chr(int(digits.group(), 16)) if digits else code)
            index += len(digits.group()) if digits else 0
        elif code in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[index - 1 :])
            assert digits is not None
            out.append(chr(int(digits.group(), 8)))
            index += len(digits.group()) - 1
        else:
            out.append(code)
    return "".join(out)


def _error(message: str, text: str, position: int) -> InvalidSchemaError:
    line = text.count("\n", 0, position) + 1
    return InvalidSchemaError(f"Invalid Protobuf schema: line {line}: {message}")


class _Reader:
    """Recursive descent over the tokens; `blanks` collects the spans of custom options to hide from protoc."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.blanks: list[tuple[int, int, str]] = []  # (start, end, replacement)

    # -- tokens
    def peek(self, offset: int = 0) -> str:
        at = self.index + offset
        return self.tokens[at].text if at < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> Token:
        if self.index >= len(self.tokens):
            raise _error("unexpected end of the schema", self.text, len(self.text))
        token = self.tokens[self.index]
        if expected is not None and token.text != expected:
            raise _error(f"expected {expected!r}, found {token.text!r}", self.text, token.start)
        self.index += 1
        return token

    def accept(self, text: str) -> bool:
        if self.peek() == text:
            self.index += 1
            return True
        return False

    def name(self) -> str:
        """A possibly dotted name, as written (spaces around the dots dropped)."""
        parts = [self.take().text]
        while self.peek() == "." or parts[-1].endswith("."):
            if self.peek() == ".":
                parts.append(self.take().text)
            parts.append(self.take().text)
        return "".join(parts)

    def string(self) -> str:
        parts = [unquote(self.take().text)]
        while self.index < len(self.tokens) and self.tokens[self.index].kind == "string":
            parts.append(unquote(self.take().text))
        return "".join(parts)

    def integer(self) -> int:
        token = self.take()
        try:
            return int(token.text, 0) if not re.fullmatch(r"-?0[0-7]+", token.text) else int(token.text, 8)
        except ValueError:
            raise _error(f"expected a number, found {token.text!r}", self.text, token.start) from None

    # -- options
    def option_name(self) -> tuple[list[str], bool]:
        parts: list[str] = []
        parenthesized = self.peek() == "("
        while True:
            if self.accept("("):
                parts.append(self.name())
                self.take(")")
            else:
                parts.extend(self.name().split("."))
            if self.peek().startswith(".") and self.peek() != ".":  # "(a).b" reads ")" then ".b"
                parts.extend(self.take().text[1:].split("."))
            if not self.accept("."):
                return [part for part in parts if part], parenthesized

    def option(self) -> Option:
        parts, parenthesized = self.option_name()
        self.take("=")
        kind, value = self.value()
        for part in reversed(parts[1:]):
            kind, value = "OPTION", Option(part, kind, value)
        return Option(parts[0], kind, value, parenthesized)

    def value(self) -> tuple[str, Any]:
        token = self.tokens[self.index] if self.index < len(self.tokens) else None
        if token is None:
            raise _error("unexpected end of the schema", self.text, len(self.text))
        if token.kind == "string":
            return "STRING", self.string()
        if token.text in ("{", "<"):
            return "MAP", self.aggregate()
        if token.text == "[":
            return "LIST", self.list_value()
        self.index += 1
        if token.text == "-" and self.index < len(self.tokens):  # "- inf", "- 5"
            return "NUMBER", "-" + self.take().text
        if token.kind == "number":
            return "NUMBER", token.text
        return ("BOOLEAN" if token.text in ("true", "false") else "ENUM"), token.text

    def aggregate(self) -> dict[str, Any]:
        close = "}" if self.take().text == "{" else ">"
        result: dict[str, Any] = {}
        while not self.accept(close):
            if self.accept("["):
                key = "[" + self.name() + "]"
                self.take("]")
            else:
                key = self.take().text
            self.accept(":")
            kind, value = self.value()
            item = as_item(kind, value)
            # Wire gathers a key given more than once into a list of its values.
            if key not in result:
                result[key] = item
            elif isinstance(result[key], list):
                result[key].append(item)
            else:
                result[key] = [result[key], item]
            self.accept(",") or self.accept(";")
        return result

    def list_value(self) -> list[Any]:
        self.take("[")
        items: list[Any] = []
        while not self.accept("]"):
            kind, value = self.value()
            items.append(as_item(kind, value))
            self.accept(",")
        return items

    def option_statement(self, into: list[Option]) -> None:
        start = self.take("option").start
        option = self.option()
        end = self.take(";").end
        into.append(option)
        if option.parenthesized:
            self.blank(start, end, "")

    def bracket_options(self) -> list[Option]:
        """[a = 1, (b) = 2]: the options in order; custom ones are cut out of protoc's copy."""
        if self.peek() != "[":
            return []
        open_token = self.take("[")
        options: list[tuple[Option, int, int]] = []
        while True:
            start = self.tokens[self.index].start
            option = self.option()
            options.append((option, start, self.tokens[self.index - 1].end))
            if not self.accept(","):
                break
        close = self.take("]")
        if any(option.parenthesized for option, _, _ in options):
            kept = [self.text[start:end] for option, start, end in options if not option.parenthesized]
            self.blank(open_token.start, close.end, f"[{', '.join(kept)}]" if kept else "")
        return [option for option, _, _ in options]

    def blank(self, start: int, end: int, replacement: str) -> None:
        self.blanks.append((start, end, replacement))


def parse(text: str) -> tuple[ProtoFile, str]:
    """The element tree of a .proto text, and the text protoc should compile (custom options blanked)."""
    reader = _Reader(text)
    proto = ProtoFile()
    try:
        _file_body(reader, proto)
    except IndexError:
        raise _error("unexpected end of the schema", text, len(text)) from None
    compiled = list(text)
    for start, end, replacement in sorted(reader.blanks, reverse=True):
        removed = text[start:end]
        # Keep every later line where it was, so protoc's line numbers still point into the user's text.
        compiled[start:end] = replacement + "\n" * removed.count("\n")
    return proto, "".join(compiled)


def _file_body(reader: _Reader, proto: ProtoFile) -> None:
    while reader.index < len(reader.tokens):
        keyword = reader.peek()
        if keyword == "syntax":
            reader.take(), reader.take("=")
            proto.syntax = reader.string()
            reader.take(";")
        elif keyword == "edition":
            reader.take(), reader.take("=")
            proto.edition = reader.string()
            reader.take(";")
        elif keyword == "package":
            reader.take()
            proto.package = reader.name()
            reader.take(";")
        elif keyword == "import":
            reader.take()
            public = reader.accept("public")
            reader.accept("weak")
            (proto.public_imports if public else proto.imports).append(reader.string())
            reader.take(";")
        elif keyword == "option":
            reader.option_statement(proto.options)
        elif keyword == "service":
            proto.services.append(_service(reader))
        elif keyword == "extend":
            proto.extends.append(_extend(reader))
        elif keyword == ";":
            reader.take()
        else:
            proto.types.append(_type(reader))


def _type(reader: _Reader) -> Message | Enum:
    keyword = reader.take()
    if keyword.text == "message":
        return _message(reader, Message(reader.name()))
    if keyword.text == "enum":
        return _enum(reader)
    raise _error(f"unexpected {keyword.text!r}", reader.text, keyword.start)


def _message(reader: _Reader, message: Message) -> Message:
    reader.take("{")
    while not reader.accept("}"):
        keyword = reader.peek()
        if keyword in ("message", "enum"):
            message.types.append(_type(reader))
        elif keyword == "option":
            reader.option_statement(message.options)
        elif keyword == "reserved":
            message.reserveds.append(_ranges(reader))
        elif keyword == "extensions":
            message.extensions.append(_ranges(reader))
        elif keyword == "extend":
            message.extends.append(_extend(reader))
        elif keyword == "oneof":
            message.oneofs.append(_oneof(reader))
        elif keyword == ";":
            reader.take()
        else:
            _field_or_group(reader, message.fields, message.groups, in_oneof=False)
    return message


def _oneof(reader: _Reader) -> OneOf:
    reader.take("oneof")
    oneof = OneOf(reader.name())
    reader.take("{")
    while not reader.accept("}"):
        if reader.peek() == "option":
            reader.option_statement(oneof.options)
        elif not reader.accept(";"):
            _field_or_group(reader, oneof.fields, oneof.groups, in_oneof=True)
    return oneof


def _field_or_group(reader: _Reader, fields: list[Field], groups: list[Group], *, in_oneof: bool) -> None:
    label = None
    if not in_oneof and reader.peek() in ("optional", "required", "repeated"):
        label = reader.take().text
    if reader.peek() == "group" and reader.peek(2) == "=":
        reader.take()
        group = Group(label, reader.name(), 0)
        reader.take("=")
        group.tag = reader.integer()
        reader.bracket_options()
        body = _message(reader, Message(group.name))
        group.fields = body.fields
        groups.append(group)
        return
    if reader.peek() == "map" and reader.peek(1) == "<":
        reader.take(), reader.take("<")
        key = reader.name()
        reader.take(",")
        value = reader.name()
        reader.take(">")
        type_name = f"map<{key}, {value}>"
    else:
        type_name = reader.name()
    element = Field(label, type_name, reader.name(), 0)
    reader.take("=")
    element.tag = reader.integer()
    for option in reader.bracket_options():
        # Wire keeps these two apart from the options; Confluent prints them after the others.
        if option.name == "default" and not option.parenthesized:
            element.default = option.value
        elif option.name == "json_name" and not option.parenthesized:
            element.json_name = option.value
        else:
            element.options.append(option)
    reader.take(";")
    fields.append(element)


def _ranges(reader: _Reader) -> Ranges:
    reader.take()
    values: list[Any] = []
    while True:
        token = reader.tokens[reader.index]
        if token.kind == "string":
            values.append(reader.string())
        elif token.kind == "word" and reader.peek(1) != "to":  # editions: reserved names unquoted
            values.append(Identifier(reader.take().text))
        else:
            start = reader.integer()
            if reader.accept("to"):
                end = MAX_TAG if reader.accept("max") else reader.integer()
                values.append((start, end))
            else:
                values.append(start)
        if not reader.accept(","):
            break
    ranges = Ranges(values, reader.bracket_options())
    reader.take(";")
    return ranges


def _extend(reader: _Reader) -> Extend:
    reader.take("extend")
    extend = Extend(reader.name())
    groups: list[Group] = []
    reader.take("{")
    while not reader.accept("}"):
        if not reader.accept(";"):
            _field_or_group(reader, extend.fields, groups, in_oneof=False)
    return extend


def _enum(reader: _Reader) -> Enum:
    enum = Enum(reader.name())
    reader.take("{")
    while not reader.accept("}"):
        keyword = reader.peek()
        if keyword == "option":
            reader.option_statement(enum.options)
        elif keyword == "reserved":
            enum.reserveds.append(_ranges(reader))
        elif not reader.accept(";"):
            name = reader.take().text
            reader.take("=")
            constant = EnumConstant(name, reader.integer())
            constant.options = reader.bracket_options()
            reader.take(";")
            enum.constants.append(constant)
    return enum


def _rpc_type(reader: _Reader) -> tuple[bool, str]:
    """An rpc's `(stream Type)` or `(Type)`: whether it streams, and the type (which may be named stream)."""
    reader.take("(")
    streaming = reader.peek() == "stream" and reader.peek(1) != ")"
    if streaming:
        reader.take("stream")
    name = reader.name()
    reader.take(")")
    return streaming, name


def _service(reader: _Reader) -> Service:
    reader.take("service")
    service = Service(reader.name())
    reader.take("{")
    while not reader.accept("}"):
        if reader.peek() == "option":
            reader.option_statement(service.options)
        elif not reader.accept(";"):
            reader.take("rpc")
            rpc = Rpc(reader.name(), "", "")
            rpc.request_streaming, rpc.request = _rpc_type(reader)
            reader.take("returns")
            rpc.response_streaming, rpc.response = _rpc_type(reader)
            if reader.accept("{"):
                while not reader.accept("}"):
                    if reader.peek() == "option":
                        reader.option_statement(rpc.options)
                    else:
                        reader.take(";")
            else:
                reader.take(";")
            service.rpcs.append(rpc)
    return service
