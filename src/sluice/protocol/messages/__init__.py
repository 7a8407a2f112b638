"""The registry of every message definition: APIs by key, and the non-API structs by name.

Family modules (`produce`, `fetch`, `groups`, ...) each export `APIS` and optionally `STRUCTS`; they are
discovered here so adding an API means adding a definition, nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from sluice.protocol.codec import MessageCodecs, VersionCodec
from sluice.protocol.schema import Api, Struct


def _load() -> tuple[dict[int, Api], dict[str, Struct]]:
    apis: dict[int, Api] = {}
    structs: dict[str, Struct] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for api in getattr(module, "APIS", ()):
            if api.key in apis:
                raise ValueError(f"API key {api.key} defined twice ({apis[api.key].name}, {api.name})")
            apis[api.key] = api
        for struct_def in getattr(module, "STRUCTS", ()):
            structs[struct_def.name] = struct_def
    return apis, structs


APIS_BY_KEY, STRUCTS_BY_NAME = _load()
APIS_BY_NAME = {api.name: api for api in APIS_BY_KEY.values()}


@cache
def request_codecs(api_key: int) -> MessageCodecs:
    return MessageCodecs(APIS_BY_KEY[api_key].request_def)


@cache
def response_codecs(api_key: int) -> MessageCodecs:
    return MessageCodecs(APIS_BY_KEY[api_key].response_def)


@cache
def request_codec(api_key: int, version: int) -> VersionCodec:
    """`request_codecs(api_key)[version]` in one cached step (the request path asks once per request)."""
    return request_codecs(api_key)[version]


@cache
def response_codec(api_key: int, version: int) -> VersionCodec:
    """`response_codecs(api_key)[version]` in one cached step; its header is flexible when the codec is."""
    return response_codecs(api_key)[version]


@cache
def struct_codecs(name: str) -> MessageCodecs:
    return MessageCodecs(STRUCTS_BY_NAME[name].message_def)


def check_all() -> int:
    """Compile every version of every definition; returns how many codecs were built."""
    built = 0
    for key, api in APIS_BY_KEY.items():
        for version in api.versions:
            request_codecs(key)[version]
            response_codecs(key)[version]
            built += 2
    for name, struct_def in STRUCTS_BY_NAME.items():
        for version in struct_def.message_def.valid:
            struct_codecs(name)[version]
            built += 1
    return built
