"""Parse and validate the options of the "sluice" Spark data source.

Option names follow Spark's own Kafka connector so existing pipelines move over by changing
``format("kafka")`` to ``format("sluice")``. Everything here is pure: no broker, no Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from sluice.client.schema_registry import RegistryConnection

EARLIEST = -2
LATEST = -1

Mode = Literal["batch", "stream"]
DeliveryGuarantee = Literal["at-least-once", "exactly-once"]
# Flink's KafkaSink names, so the option reads the same in both.
DELIVERY_GUARANTEES: tuple[DeliveryGuarantee, ...] = ("at-least-once", "exactly-once")
DEFAULT_COMMIT_TOPIC = "sluice-sink-commits"
# Kafka's default transaction.max.timeout.ms is 15 minutes; a write task must finish within this.
DEFAULT_TRANSACTION_TIMEOUT_MS = 600_000


class PipelineOptionError(ValueError):
    """A user-supplied option is unknown, malformed or contradicts another option."""


@dataclass(frozen=True)
class Subscription:
    """Which topic partitions to read: exactly one of the three Kafka-connector styles."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assigned:
            return any(t == topic for t, _ in self.assigned)
        return topic in self.topics

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern={self.pattern!r}"
        if self.assigned:
            return f"assign={sorted(self.assigned)}"
        return f"subscribe={','.join(self.topics)}"


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: earliest, latest, per-partition offsets or a timestamp.

    ``per_partition`` values may be EARLIEST (-2) or LATEST (-1) as in Spark's JSON form.
    """

    kind: Literal["earliest", "latest", "specific", "timestamp"]
    per_partition: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class ColumnFormat:
    """How the key or the value is framed: a registry schema type, its subject and version."""

    side: Literal["key", "value"]
    schema_type: str  # the registry's name: AVRO, PROTOBUF or JSON
    subject: str
    version: int | None  # None: the latest (reads) / register a schema derived from the column (writes)
    pinned: bool  # a version option was given


@dataclass(frozen=True)
class RegistryFormats:
    """The registry options of a read or a write; absent when neither column is registry-framed."""

    connection: RegistryConnection
    key: ColumnFormat | None
    value: ColumnFormat | None
    permissive: bool = False


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of a read (batch or streaming)."""

    bootstrap_servers: str
    kafka_config: Mapping[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    commit_group_id: str | None
    metadata_timeout_s: float
    poll_timeout_s: float
    formats: RegistryFormats | None = None


@dataclass(frozen=True)
class SinkOptions:
    """Validated options of a write (batch or streaming)."""

    bootstrap_servers: str
    kafka_config: Mapping[str, str]
    topic: str | None
    write_timestamps: bool
    metadata_timeout_s: float
    delivery_guarantee: DeliveryGuarantee = "at-least-once"
    # Exactly-once only: where the transactional ids start (Flink's transactionalIdPrefix), the
    # topic whose consumer-group offsets record which (batch, task) transactions committed, and
    # the checkpoint Spark gave a streaming query (None for batch writes).
    transactional_id_prefix: str | None = None
    commit_topic: str = DEFAULT_COMMIT_TOPIC
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    checkpoint_location: str | None = None
    formats: RegistryFormats | None = None

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == "exactly-once"


_FORMAT_OPTIONS = (
    "schemaRegistry",
    "valueFormat",
    "keyFormat",
    "valueSubject",
    "keySubject",
    "valueSchemaVersion",
    "keySchemaVersion",
)
_COMMON_OPTIONS = ("kafka.bootstrap.servers", "metadataTimeoutMs", *_FORMAT_OPTIONS)
# Option values -> the registry's schemaType names.
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}
_REGISTRY_PREFIX = "schemaregistry."
_SOURCE_OPTIONS = (
    *_COMMON_OPTIONS,
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "failOnDataLoss",
    "includeHeaders",
    "kafkaConsumer.pollTimeoutMs",
    "mode",
)
# Spark itself hands checkpointLocation to streaming sinks; it belongs to Spark, not to us.
_SINK_OPTIONS = (
    *_COMMON_OPTIONS,
    "topic",
    "writeTimestamps",
    "checkpointLocation",
    "deliveryGuarantee",
    "transactionalIdPrefix",
    "commitTopic",
)
# The exactly-once sink owns these librdkafka settings: ids are derived per task, and the
# transaction timeout has its own option so that it is checked.
_EXACTLY_ONCE_OWNED_KEYS = ("transactional.id", "enable.idempotence")
# Spark's Kafka connector rejects these because they would break its offset tracking; so do we.
_FORBIDDEN_KAFKA_KEYS = {
    "auto.offset.reset": "use startingOffsets instead",
    "enable.auto.commit": "offsets are tracked by Spark's checkpoint",
    "key.deserializer": "key is always returned as binary",
    "value.deserializer": "value is always returned as binary",
    "key.serializer": "key must be a string or binary column",
    "value.serializer": "value must be a string or binary column",
}


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    # Spark hands options over in a case-insensitive dict; plain dicts from callers may not be.
    return {str(k).lower(): str(v) for k, v in options.items()}


def _check_known(options: Mapping[str, str], known: tuple[str, ...], what: str) -> None:
    lowered = {name.lower() for name in known}
    unknown = sorted(
        k for k in options if k not in lowered and not k.startswith(("kafka.", _REGISTRY_PREFIX))
    )
    if unknown:
        raise PipelineOptionError(
            f"unknown {what} option(s) for format 'sluice': {', '.join(unknown)}; "
            f"known: {', '.join(known)}, any kafka.<librdkafka setting> and schemaRegistry.<client setting>"
        )


def _kafka_config(options: Mapping[str, str]) -> dict[str, str]:
    config: dict[str, str] = {}
    for key, value in options.items():
        if not key.startswith("kafka."):
            continue
        name = key.removeprefix("kafka.")
        if name in _FORBIDDEN_KAFKA_KEYS:
            raise PipelineOptionError(f"option kafka.{name} is not supported: {_FORBIDDEN_KAFKA_KEYS[name]}")
        config[name] = value
    return config


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise PipelineOptionError(f"option {name} must be true or false, got {raw!r}")


def _integer(raw: str, name: str, *, minimum: int = 1, expected: str = "a positive integer") -> int:
    """Option `name`'s value `raw` as a decimal integer of at least `minimum`; else an error saying what
    was `expected`."""
    text = raw.strip()
    value = int(text) if text.isdecimal() else minimum - 1
    if value < minimum:
        raise PipelineOptionError(f"option {name} must be {expected}, got {raw!r}")
    return value


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    return None if raw is None else _integer(raw, name)


def _bootstrap(options: Mapping[str, str]) -> str:
    servers = options.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise PipelineOptionError("option kafka.bootstrap.servers is required, e.g. 127.0.0.1:9092")
    return servers


def _timeout_s(options: Mapping[str, str], name: str, default_ms: int) -> float:
    value = _positive_int(options, name)
    return (value if value is not None else default_ms) / 1000.0


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    options = _lowered(options)
    given = [name for name in ("subscribe", "subscribepattern", "assign") if options.get(name, "").strip()]
    if not given:
        raise PipelineOptionError("one of the options subscribe, subscribePattern or assign is required")
    if len(given) > 1:
        raise PipelineOptionError(
            f"options {' and '.join(given)} contradict each other: give exactly one of "
            "subscribe, subscribePattern or assign"
        )
    if "subscribe" in given:
        topics = tuple(sorted({t.strip() for t in options["subscribe"].split(",") if t.strip()}))
        return Subscription(topics=topics)
    if "subscribepattern" in given:
        pattern = options["subscribepattern"].strip()
        try:
            re.compile(pattern)
        except re.error as error:
            raise PipelineOptionError(f"option subscribePattern is not a valid regex: {error}") from None
        return Subscription(pattern=pattern)
    return Subscription(assigned=_parse_assign(options["assign"]))


def _parse_json_object(raw: str, option: str, example: str) -> dict[str, object]:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise PipelineOptionError(f"option {option} is not valid JSON ({error}); expected e.g. {example}") from None
    if not isinstance(parsed, dict):
        raise PipelineOptionError(f"option {option} must be a JSON object, e.g. {example}")
    return parsed


def _parse_assign(raw: str) -> tuple[tuple[str, int], ...]:
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    parsed = _parse_json_object(raw, "assign", example)
    assigned: set[tuple[str, int]] = set()
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise PipelineOptionError(f"option assign: topic {topic!r} needs a list of partition numbers, e.g. {example}")
        assigned.update((topic, p) for p in partitions)
    if not assigned:
        raise PipelineOptionError("option assign names no partitions")
    return tuple(sorted(assigned))


def parse_offset_spec(raw: str, option: str) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or Spark's JSON form ``{"t":{"0":23,"1":-2}}``."""
    text = raw.strip()
    if text.lower() == "earliest":
        return OffsetSpec("earliest")
    if text.lower() == "latest":
        return OffsetSpec("latest")
    example = '{"topic":{"0":23,"1":-2}} (-2 = earliest, -1 = latest)'
    parsed = _parse_json_object(text, option, example)
    offsets: dict[tuple[str, int], int] = {}
    for topic, by_partition in parsed.items():
        if not isinstance(by_partition, dict):
            raise PipelineOptionError(f"option {option}: topic {topic!r} needs an object of partition offsets, e.g. {example}")
        for partition, offset in by_partition.items():
            if not str(partition).isdigit():
                raise PipelineOptionError(f"option {option}: partition {partition!r} of topic {topic!r} is not a number")
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise PipelineOptionError(
                    f"option {option}: offset {offset!r} for {topic}-{partition} must be >= 0, -2 or -1"
                )
            offsets[(topic, int(partition))] = offset
    if not offsets:
        raise PipelineOptionError(f"option {option} names no partitions, e.g. {example}")
    return OffsetSpec("specific", per_partition=offsets)


def _timestamp_spec(options: Mapping[str, str], name: str) -> OffsetSpec | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    value = _integer(raw, name, minimum=0, expected="milliseconds since the epoch (>= 0)")
    return OffsetSpec("timestamp", timestamp_ms=value)


def parse_source_options(raw_options: Mapping[str, str], mode: Mode) -> SourceOptions:
    options = _lowered(raw_options)
    _check_known(options, _SOURCE_OPTIONS, "read")
    subscription = parse_subscription(options)
    starting = _parse_starting(options, mode)
    ending = _parse_ending(options, mode)
    if mode == "batch" and "maxoffsetspertrigger" in options:
        raise PipelineOptionError("option maxOffsetsPerTrigger only applies to streaming reads (readStream)")
    if subscription.assigned:
        _check_offsets_within_assignment(subscription, starting, "startingOffsets")
        _check_offsets_within_assignment(subscription, ending, "endingOffsets")
    kafka_config = _kafka_config(options)
    return SourceOptions(
        bootstrap_servers=_bootstrap(options),
        kafka_config=kafka_config,
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        min_partitions=_positive_int(options, "minPartitions"),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        commit_group_id=kafka_config.get("group.id") if mode == "stream" else None,
        metadata_timeout_s=_timeout_s(options, "metadataTimeoutMs", 10_000),
        poll_timeout_s=_timeout_s(options, "kafkaConsumer.pollTimeoutMs", 30_000),
        formats=parse_registry_formats(options, _single_topic(subscription), reading=True),
    )


def _parse_starting(options: Mapping[str, str], mode: Mode) -> OffsetSpec:
    by_time = _timestamp_spec(options, "startingTimestamp")
    if by_time is not None and "startingoffsets" in options:
        raise PipelineOptionError("options startingOffsets and startingTimestamp contradict each other: give one")
    if by_time is not None:
        return by_time
    default = "earliest" if mode == "batch" else "latest"
    spec = parse_offset_spec(options.get("startingoffsets", default), "startingOffsets")
    if mode == "batch":
        if spec.kind == "latest":
            raise PipelineOptionError("startingOffsets=latest is not valid for a batch read: it would read nothing")
        if any(o == LATEST for o in spec.per_partition.values()):
            raise PipelineOptionError("startingOffsets: -1 (latest) is not valid for a batch read")
    return spec


def _parse_ending(options: Mapping[str, str], mode: Mode) -> OffsetSpec:
    by_time = _timestamp_spec(options, "endingTimestamp")
    if mode == "stream":
        if by_time is not None or "endingoffsets" in options:
            raise PipelineOptionError(
                "endingOffsets/endingTimestamp are not valid for a streaming read; "
                "use trigger(availableNow=True) to stop at the current end"
            )
        return OffsetSpec("latest")
    if by_time is not None and "endingoffsets" in options:
        raise PipelineOptionError("options endingOffsets and endingTimestamp contradict each other: give one")
    if by_time is not None:
        return by_time
    spec = parse_offset_spec(options.get("endingoffsets", "latest"), "endingOffsets")
    if spec.kind == "earliest" or any(o == EARLIEST for o in spec.per_partition.values()):
        raise PipelineOptionError("endingOffsets: earliest (-2) is not valid as an end; it would read nothing")
    return spec


def _check_offsets_within_assignment(subscription: Subscription, spec: OffsetSpec, option: str) -> None:
    outside = sorted(set(spec.per_partition) - set(subscription.assigned))
    if outside:
        raise PipelineOptionError(f"option {option} names partitions that are not assigned: {outside}")


def parse_sink_options(raw_options: Mapping[str, str]) -> SinkOptions:
    options = _lowered(raw_options)
    _check_known(options, _SINK_OPTIONS, "write")
    topic = options.get("topic", "").strip() or None
    guarantee = options.get("deliveryguarantee", "at-least-once").strip().lower().replace("_", "-")
    if guarantee not in DELIVERY_GUARANTEES:
        raise PipelineOptionError(
            f"option deliveryGuarantee must be one of {', '.join(DELIVERY_GUARANTEES)}, "
            f"got {options['deliveryguarantee']!r}"
        )
    kafka_config = _kafka_config(options)
    prefix = options.get("transactionalidprefix", "").strip() or None
    if guarantee == "exactly-once":
        for name in _EXACTLY_ONCE_OWNED_KEYS:
            if name in kafka_config:
                raise PipelineOptionError(
                    f"option kafka.{name} cannot be set with deliveryGuarantee=exactly-once: the sink derives "
                    "one transactional id per task (set transactionalIdPrefix to choose their prefix)"
                )
        if prefix is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", prefix):
            raise PipelineOptionError(
                f"option transactionalIdPrefix must be 1-200 characters of [A-Za-z0-9._-], got {prefix!r}"
            )
    elif prefix is not None or "committopic" in options:
        raise PipelineOptionError(
            "options transactionalIdPrefix and commitTopic only apply with deliveryGuarantee=exactly-once"
        )
    raw_timeout = kafka_config.pop("transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS))
    timeout_ms = _integer(raw_timeout, "kafka.transaction.timeout.ms", expected="positive milliseconds")
    commit_topic = options.get("committopic", DEFAULT_COMMIT_TOPIC).strip()
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", commit_topic):
        raise PipelineOptionError(f"option commitTopic is not a valid topic name: {commit_topic!r}")
    return SinkOptions(
        bootstrap_servers=_bootstrap(options),
        kafka_config=kafka_config,
        topic=topic,
        write_timestamps=_bool(options, "writeTimestamps", False),
        metadata_timeout_s=_timeout_s(options, "metadataTimeoutMs", 10_000),
        delivery_guarantee=guarantee,  # type: ignore[arg-type]
        transactional_id_prefix=prefix,
        commit_topic=commit_topic,
        transaction_timeout_ms=timeout_ms,
        checkpoint_location=options.get("checkpointlocation") or None,
        formats=parse_registry_formats(options, topic, reading=False),
    )


def client_config(bootstrap_servers: str, kafka_config: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings: the user's kafka.* options on top of the bootstrap servers."""
    return {**kafka_config, "bootstrap.servers": bootstrap_servers}


def source_registry_formats(raw_options: Mapping[str, str]) -> RegistryFormats | None:
    """A read's registry options alone (Spark asks the schema before it says batch or stream)."""
    options = _lowered(raw_options)
    return parse_registry_formats(options, _single_topic(parse_subscription(options)), reading=True)


def _single_topic(subscription: Subscription) -> str | None:
    if len(subscription.topics) == 1:
        return subscription.topics[0]
    topics = {t for t, _ in subscription.assigned}
    return topics.pop() if len(topics) == 1 else None


def parse_registry_formats(
    raw_options: Mapping[str, str], topic: str | None, *, reading: bool
) -> RegistryFormats | None:
    """keyFormat/valueFormat with schemaRegistry; subjects default to TopicNameStrategy."""
    options = _lowered(raw_options)
    url = options.get("schemaregistry", "").strip()
    columns = {side: _column_format(options, side, topic) for side in ("key", "value")}
    given = [side for side, column in columns.items() if column is not None]
    mode = options.get("mode", "FAILFAST").strip().upper()
    if mode not in ("FAILFAST", "PERMISSIVE"):
        raise PipelineOptionError(f"option mode must be FAILFAST or PERMISSIVE, got {options['mode']!r}")
    if not given:
        stray = [name for name in _FORMAT_OPTIONS[1:] if name.lower() in options] + (
            ["mode"] if "mode" in options else []
        )
        if stray:
            raise PipelineOptionError(f"option(s) {', '.join(stray)} need keyFormat or valueFormat")
        return None
    if not url.startswith(("http://", "https://")):
        raise PipelineOptionError(
            "option schemaRegistry (the registry's URL, e.g. http://127.0.0.1:8081) is required with "
            f"{'/'.join(side + 'Format' for side in given)}"
        )
    settings = tuple(
        sorted((k.removeprefix(_REGISTRY_PREFIX), v) for k, v in options.items() if k.startswith(_REGISTRY_PREFIX))
    )
    if not reading and mode != "FAILFAST":
        raise PipelineOptionError("option mode applies to reads only")
    return RegistryFormats(
        RegistryConnection(url, settings), columns["key"], columns["value"], permissive=mode == "PERMISSIVE"
    )


def _column_format(options: Mapping[str, str], side: Literal["key", "value"], topic: str | None) -> ColumnFormat | None:
    raw = options.get(f"{side}format")
    if raw is None:
        return None
    schema_type = SCHEMA_TYPES.get(raw.strip().lower())
    if schema_type is None:
        raise PipelineOptionError(f"option {side}Format must be one of {', '.join(SCHEMA_TYPES)}, got {raw!r}")
    subject = options.get(f"{side}subject", "").strip()
    if not subject:
        if topic is None:
            raise PipelineOptionError(
                f"option {side}Subject is needed: the subject of {side}s is <topic>-{side} only when one topic "
                "is read (subscribe=one topic) or written (option topic)"
            )
        subject = f"{topic}-{side}"
    raw_version = options.get(f"{side}schemaversion", "").strip().lower()
    version: int | None = None
    if raw_version and raw_version != "latest":
        version = _integer(raw_version, f"{side}SchemaVersion", expected="latest or a version number")
    return ColumnFormat(side, schema_type, subject, version, pinned=bool(raw_version))
