"""Every broker setting: the config file's keys (BrokerConfig, with the comments written beside each field),
the topic configs, the broker configs AlterConfigs changes at run time, and the group configs."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from typing import Any

from reference import cell, code

INTRO = """\
# Broker settings

Written from the code when the site is built: the fields of `sluice.broker.config.BrokerConfig` (with the
comment beside each), and the config definitions in `sluice/broker/config_defs.py`,
`dynamic_config_defs.py`, `dynamic_configs.py` and `group_configs.py`. How to use them:
[security](../guide/security.md), [durability and scale](../guide/durability.md),
[Kafka compatibility](../guide/kafka-compatibility.md).
"""

MIB = 1024 * 1024


def field_comments(cls: type) -> dict[str, str]:
    """The comment lines right above each field of a dataclass, and any comment at the end of its line.

    A one-line comment of at most four words with no full stop ("# Group coordinator") or one drawn with
    dashes ("# ----- security -----") titles the fields below it rather than describing the next one.
    """
    source, _ = inspect.getsourcelines(cls)
    tree = ast.parse("".join(source))
    [body] = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    comments: dict[str, str] = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 2  # index of the line above, in `source`
        while line >= 0 and source[line].strip().startswith("#"):
            text = source[line].strip().lstrip("#").strip()
            if not text.startswith("---"):
                above.insert(0, text)
            line -= 1
        if len(above) == 1 and len(above[0].split()) <= 4 and "." not in above[0]:
            above = []
        own_line = source[node.lineno - 1]
        trailing = own_line.split("  # ", 1)[1].strip() if "  # " in own_line else ""
        comments[node.target.id] = " ".join([*above, trailing]).strip()
    return comments


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def show_type(annotation: object) -> str:
    """`int | None` as "int, optional": a pipe would end a Markdown table cell."""
    text = str(annotation)
    return code(text.removesuffix(" | None")) + (", optional" if text.endswith(" | None") else "")


def show_default(default: str | None) -> str:
    return "" if default is None else (code(default) if default else "empty")


def show_value(name: str, value: Any) -> str:
    """A default as it is written in the YAML file, with the size or duration it means where that helps."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, float) and value > 1e300:
        return f"{code(repr(value))} (unlimited)"
    if isinstance(value, int) and value >= MIB and value % MIB == 0 and ("bytes" in name or "size" in name):
        return f"{code(value)} ({value // MIB} MiB)"
    if isinstance(value, int) and name.endswith("_ms") and value >= 60_000 and value % 1000 == 0:
        seconds = value // 1000
        span = (
            f"{seconds // 86400} days"
            if seconds % 86400 == 0
            else (
                f"{seconds // 3600} h"
                if seconds % 3600 == 0
                else (f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s")
            )
        )
        return f"{code(value)} ({span})"
    if isinstance(value, list | dict) and not value:
        return code("[]" if isinstance(value, list) else "{}")
    return code(value if not isinstance(value, list) else "[" + ", ".join(map(str, value)) + "]")


def _broker_file_section() -> list[str]:
    from sluice.broker.config import BrokerConfig
    from sluice.broker.config_defs import BROKER_CONFIG_TYPES
    from sluice.broker.dynamic_config_defs import DYNAMIC_BROKER_CONFIGS, STATIC_BROKER_CONFIGS

    kafka_docs = {name: doc for name, (_, doc) in BROKER_CONFIG_TYPES.items()}
    kafka_docs.update({name: d.doc for name, d in DYNAMIC_BROKER_CONFIGS.items()})
    known = set(kafka_docs) | set(STATIC_BROKER_CONFIGS)
    comments = field_comments(BrokerConfig)
    lines = [
        "## The broker's config file",
        "",
        "`sluice broker --config FILE` and `sluice serve --config FILE` read a YAML mapping whose keys are these "
        "(dashes or dots may stand for underscores; an unknown key stops the broker at start, naming it). "
        "Where Kafka has the same setting its name is given; the command-line flags (`--listen`, `--data-dir`, "
        "`--admin-listen`, `--min-free-bytes`) override the file.",
        "",
        "| key | type | default | Kafka's name | meaning |",
        "|---|---|---|---|---|",
    ]
    for f in dataclasses.fields(BrokerConfig):
        dotted = f.name.replace("_", ".")
        kafka = code(dotted) if dotted in known else ""
        meaning = comments.get(f.name) or kafka_docs.get(dotted, "")
        lines.append(
            f"| {code(f.name)} | {show_type(f.type)} | {show_value(f.name, _default(f))} | {kafka} | {cell(meaning)} |"
        )
    return [*lines, ""]


def _bounds(d: Any) -> str:
    if d.choices:
        return ", ".join(code(choice) for choice in d.choices)
    if d.minimum is None and d.maximum is None:
        return ""
    low = "" if d.minimum is None else f"{d.minimum:g}"
    high = "" if d.maximum is None else f"{d.maximum:g}"
    return f"[{low}, {high}]" if low and high else (f"at least {low}" if low else f"at most {high}")


def _topic_section() -> list[str]:
    from sluice.broker.config_defs import TOPIC_CONFIGS, TYPE_NAMES

    lines = [
        "## Topic configs",
        "",
        "What CreateTopics, AlterConfigs and IncrementalAlterConfigs accept for a topic (`sluice topics create "
        "--config NAME=VALUE`), with Kafka's names, types, defaults and bounds; any other name is refused with "
        "Kafka's text (`Unknown topic config name: ...`). The broker setting column is the broker config whose "
        "value a topic without its own takes.",
        "",
        "| name | type | default | broker setting | valid values | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in sorted(TOPIC_CONFIGS.items()):
        synonym = code(d.broker_synonym) if d.broker_synonym else ""
        default = show_default(d.default)
        lines.append(
            f"| {code(name)} | {TYPE_NAMES[d.type]} | {default} | {synonym} | {_bounds(d)} | {cell(d.doc)} |"
        )
    return [*lines, ""]


def _dynamic_section() -> list[str]:
    from sluice.broker.config_defs import TOPIC_CONFIGS, TYPE_NAMES
    from sluice.broker.dynamic_config_defs import (
        DYNAMIC_BROKER_CONFIGS,
        PER_BROKER_CONFIGS,
        SSL_RECONFIGURABLE,
        STATIC_BROKER_CONFIGS,
    )
    from sluice.broker.dynamic_configs import HONOURED, MIN_INSYNC_REPLICAS

    topic_defaults = {
        d.broker_synonym
        for d in TOPIC_CONFIGS.values()
        if d.broker_synonym and d.broker_synonym != MIN_INSYNC_REPLICAS
    }
    lines = [
        "## Dynamic broker configs",
        "",
        "What IncrementalAlterConfigs and AlterConfigs may change on the BROKER resource while the broker runs "
        '(KIP-226), for this node (its id) or as the cluster-wide default (`""`): the configs Kafka 4.x lists as '
        "dynamic. *Acted on* configs change the running broker at once (the broker names of topic configs "
        "become the defaults of topics created from then on); the others are stored and reported. *Per node* "
        "configs cannot be set as the cluster default. SSL stores are dynamic only under a listener prefix "
        f"(`listener.name.<listener>.<name>`): {', '.join(code(n) for n in sorted(SSL_RECONFIGURABLE))}.",
        "",
        "| name | type | default | valid values | acted on | per node | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, d in sorted(DYNAMIC_BROKER_CONFIGS.items()):
        acted = "yes" if name in HONOURED or name in topic_defaults else ""
        per_node = "yes" if name in PER_BROKER_CONFIGS else ""
        default = show_default(d.default)
        lines.append(
            f"| {code(name)} | {TYPE_NAMES[d.type]} | {default} | {_bounds(d)} | {acted} | {per_node} "
            f"| {cell(d.doc)} |"
        )
    lines += [
        "",
        "Kafka broker configs that exist but are read at start only; AlterConfigs refuses them with "
        "INVALID_REQUEST (`Cannot update these configs dynamically: ...`): "
        + ", ".join(code(n) for n in sorted(STATIC_BROKER_CONFIGS))
        + ". Names Kafka does not know are kept as custom configs, as Kafka does.",
        "",
    ]
    return lines


def _described_section() -> list[str]:
    from sluice.broker.config_defs import BROKER_CONFIG_TYPES, TYPE_NAMES

    lines = [
        "## Broker configs DescribeConfigs reports",
        "",
        "DescribeConfigs on the BROKER resource answers these (besides the dynamic ones above), each with the "
        "value this broker runs with.",
        "",
        "| name | type | meaning |",
        "|---|---|---|",
    ]
    for name, (kind, doc) in sorted(BROKER_CONFIG_TYPES.items()):
        lines.append(f"| {code(name)} | {TYPE_NAMES[kind]} | {cell(doc)} |")
    return [*lines, ""]


def _group_section() -> list[str]:
    from sluice.broker.group_configs import GROUP_CONFIGS

    lines = [
        "## Group configs",
        "",
        "Set per group with IncrementalAlterConfigs on a GROUP resource (KIP-848). Each overrides a broker "
        "setting for that group alone and must lie within the bounds the broker settings named here give "
        "(with their defaults).",
        "",
        "| name | type | default | broker setting it overrides | at least | at most | valid values |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, d in sorted(GROUP_CONFIGS.items()):
        low = (
            f"{code(d.minimum[0])} ({d.minimum[1]})"
            if d.minimum
            else (str(d.at_least) if d.kind == "INT" else "")
        )
        high = f"{code(d.maximum[0])} ({d.maximum[1]})" if d.maximum else ""
        choices = ", ".join(code(c) for c in d.choices)
        lines.append(
            f"| {code(name)} | {d.kind} | {code(d.default)} | {code(d.broker_name)} | {low} | {high} | {choices} |"
        )
    return [*lines, ""]


def page() -> str:
    sections = [
        _broker_file_section(),
        _topic_section(),
        _dynamic_section(),
        _described_section(),
        _group_section(),
    ]
    return "\n".join([INTRO, *(line for section in sections for line in section)])
