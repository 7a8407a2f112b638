"""What Kafka says about each config: its type, default, broker-level synonym and a line of documentation.

Facts from Kafka 3.9/4.x (TopicConfig/LogConfig, ServerLogConfigs, KafkaConfig); the words are ours.
DescribeConfigs reports these, and CreateTopics/AlterConfigs refuse topic config names Kafka does not know
(Kafka's LogConfig.validateNames) and values that do not parse as their type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# DescribeConfigsResponse ConfigType values.
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = 1, 2, 3, 4, 5, 6, 7, 8, 9
LONG_MAX = str(2**63 - 1)


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: int
    default: str | None
    doc: str
    # The broker config whose value a topic inherits when it has no override (Kafka's synonym).
    broker_synonym: str | None = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


def _d(
    name: str, type_: int, default: str | None, doc: str, synonym: str | None = None, **kw: object
) -> ConfigDef:
    return ConfigDef(name, type_, default, doc, synonym, **kw)  # type: ignore[arg-type]


TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        _d(
            "cleanup.policy",
            LIST,
            "delete",
            "Whether old segments are deleted, compacted, or both.",
            "log.cleanup.policy",
            choices=("compact", "delete"),
        ),
        _d(
            "compression.type",
            STRING,
            "producer",
            "Codec the log keeps batches in; producer keeps the producer's.",
            "compression.type",
            choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        ),
        _d(
            "compression.gzip.level",
            INT,
            "-1",
            "gzip level when the topic recompresses.",
            "compression.gzip.level",
            minimum=-1,
            maximum=9,
        ),
        _d(
            "compression.lz4.level",
            INT,
            "9",
            "lz4 level when the topic recompresses.",
            "compression.lz4.level",
            minimum=1,
            maximum=17,
        ),
        _d(
            "compression.zstd.level",
            INT,
            "3",
            "zstd level when the topic recompresses.",
            "compression.zstd.level",
            minimum=-131072,
            maximum=22,
        ),
        _d(
            "delete.retention.ms",
            LONG,
            "86400000",
            "How long delete markers of a compacted topic are kept.",
            "log.cleaner.delete.retention.ms",
            minimum=0,
        ),
        _d(
            "file.delete.delay.ms",
            LONG,
            "60000",
            "Delay before a deleted segment's files are removed.",
            "log.segment.delete.delay.ms",
            minimum=0,
        ),
        _d(
            "flush.messages",
            LONG,
            LONG_MAX,
            "Records between forced fsyncs of the log.",
            "log.flush.interval.messages",
            minimum=1,
        ),
        _d(
            "flush.ms",
            LONG,
            LONG_MAX,
            "Milliseconds between forced fsyncs of the log.",
            "log.flush.interval.ms",
            minimum=0,
        ),
        _d(
            "follower.replication.throttled.replicas",
            LIST,
            "",
            "Replicas throttled on the follower side.",
            "follower.replication.throttled.replicas",
        ),
        _d(
            "index.interval.bytes",
            INT,
            "4096",
            "Bytes of log between two offset index entries.",
            "log.index.interval.bytes",
            minimum=0,
        ),
        _d(
            "leader.replication.throttled.replicas",
            LIST,
            "",
            "Replicas throttled on the leader side.",
            "leader.replication.throttled.replicas",
        ),
        _d(
            "local.retention.bytes",
            LONG,
            "-2",
            "Bytes kept locally when tiered storage is on (-2: retention.bytes).",
            "log.local.retention.bytes",
            minimum=-2,
        ),
        _d(
            "local.retention.ms",
            LONG,
            "-2",
            "Time kept locally when tiered storage is on (-2: retention.ms).",
            "log.local.retention.ms",
            minimum=-2,
        ),
        _d(
            "max.compaction.lag.ms",
            LONG,
            LONG_MAX,
            "Longest a record may stay uncompacted.",
            "log.cleaner.max.compaction.lag.ms",
            minimum=1,
        ),
        _d(
            "max.message.bytes",
            INT,
            "1048588",
            "Largest record batch the topic accepts.",
            "message.max.bytes",
            minimum=0,
        ),
        _d(
            "message.timestamp.after.max.ms",
            LONG,
            LONG_MAX,
            "How far in the future a CreateTime timestamp may be before the batch is refused.",
            "log.message.timestamp.after.max.ms",
            minimum=0,
        ),
        _d(
            "message.timestamp.before.max.ms",
            LONG,
            LONG_MAX,
            "How far in the past a CreateTime timestamp may be before the batch is refused.",
            "log.message.timestamp.before.max.ms",
            minimum=0,
        ),
        _d(
            "message.timestamp.difference.max.ms",
            LONG,
            LONG_MAX,
            "Deprecated (gone in Kafka 4.0): both timestamp bounds at once, where before/after are not set.",
            "log.message.timestamp.difference.max.ms",
            minimum=0,
        ),
        _d(
            "message.timestamp.type",
            STRING,
            "CreateTime",
            "Whether records keep the producer's or the log's time.",
            "log.message.timestamp.type",
            choices=("CreateTime", "LogAppendTime"),
        ),
        _d(
            "min.cleanable.dirty.ratio",
            DOUBLE,
            "0.5",
            "Share of uncompacted log that triggers compaction.",
            "log.cleaner.min.cleanable.ratio",
            minimum=0,
            maximum=1,
        ),
        _d(
            "min.compaction.lag.ms",
            LONG,
            "0",
            "Shortest time a record stays uncompacted.",
            "log.cleaner.min.compaction.lag.ms",
            minimum=0,
        ),
        _d(
            "min.insync.replicas",
            INT,
            "1",
            "Replicas that must acknowledge an acks=all write.",
            "min.insync.replicas",
            minimum=1,
        ),
        _d("preallocate", BOOLEAN, "false", "Whether segment files are preallocated.", "log.preallocate"),
        _d("remote.storage.enable", BOOLEAN, "false", "Whether the topic uses tiered storage.", None),
        _d(
            "retention.bytes",
            LONG,
            "-1",
            "Largest a partition may grow before old segments go (-1: no limit).",
            "log.retention.bytes",
            minimum=-1,
        ),
        _d(
            "retention.ms",
            LONG,
            "604800000",
            "How long records are kept (-1: forever).",
            "log.retention.ms",
            minimum=-1,
        ),
        _d(
            "segment.bytes",
            INT,
            "1073741824",
            "Size at which a segment is rolled.",
            "log.segment.bytes",
            minimum=14,
        ),
        _d(
            "segment.index.bytes",
            INT,
            "10485760",
            "Size of a segment's offset index.",
            "log.index.size.max.bytes",
            minimum=4,
        ),
        _d(
            "segment.jitter.ms",
            LONG,
            "0",
            "Random delay subtracted from segment.ms.",
            "log.roll.jitter.ms",
            minimum=0,
        ),
        _d("segment.ms", LONG, "604800000", "Age at which a segment is rolled.", "log.roll.ms", minimum=1),
        _d(
            "unclean.leader.election.enable",
            BOOLEAN,
            "false",
            "Whether an out-of-sync replica may lead.",
            "unclean.leader.election.enable",
        ),
    ]
}

# Kafka's broker synonyms whose default is expressed in another unit (log.retention.hours=168).
BROKER_DEFAULT_SYNONYMS: dict[str, tuple[str, str]] = {
    "retention.ms": ("log.retention.hours", "168"),
    "segment.ms": ("log.roll.hours", "168"),
}

BROKER_CONFIG_TYPES: dict[str, tuple[int, str]] = {
    "advertised.listeners": (STRING, "Addresses clients are told to connect to."),
    "listeners": (STRING, "Addresses the broker listens on."),
    "log.dirs": (STRING, "The directory holding the logs."),
    "node.id": (INT, "This node's id."),
    "broker.id": (INT, "This broker's id."),
    "process.roles": (LIST, "Roles this node plays in KRaft."),
    "controller.quorum.voters": (LIST, "The KRaft voters."),
    "auto.create.topics.enable": (BOOLEAN, "Whether Metadata and Produce create unknown topics."),
    "num.partitions": (INT, "Partitions of an auto-created topic."),
    "default.replication.factor": (INT, "Replication factor of an auto-created topic."),
    "message.max.bytes": (INT, "Largest record batch a topic accepts by default."),
    "socket.request.max.bytes": (INT, "Largest request the broker reads."),
    "fetch.max.bytes": (INT, "Largest fetch response the broker assembles."),
    "max.connections": (INT, "Connections the broker accepts at once."),
    "log.retention.ms": (LONG, "How long records are kept by default."),
    "log.retention.hours": (INT, "How long records are kept by default, in hours."),
    "log.retention.bytes": (LONG, "Largest a partition grows by default."),
    "log.segment.bytes": (INT, "Size at which segments roll by default."),
    "log.cleanup.policy": (LIST, "Default cleanup policy."),
    "log.retention.check.interval.ms": (LONG, "How often retention runs."),
    "log.flush.interval.messages": (LONG, "Records between forced fsyncs."),
    "min.insync.replicas": (INT, "Replicas that must acknowledge an acks=all write."),
    "compression.type": (STRING, "Default topic compression."),
    "offsets.topic.num.partitions": (INT, "Partitions of __consumer_offsets."),
    "offsets.topic.replication.factor": (SHORT, "Replication factor of __consumer_offsets."),
    "offset.metadata.max.bytes": (INT, "Largest metadata string of a committed offset."),
    "transaction.state.log.replication.factor": (SHORT, "Replication factor of __transaction_state."),
    "group.initial.rebalance.delay.ms": (INT, "Wait for more members before the first rebalance."),
    "group.min.session.timeout.ms": (INT, "Shortest session timeout a member may ask for."),
    "group.max.session.timeout.ms": (INT, "Longest session timeout a member may ask for."),
    "group.max.size": (INT, "Members a classic group may hold."),
    "group.consumer.session.timeout.ms": (INT, "Session timeout of KIP-848 consumer group members."),
    "group.consumer.heartbeat.interval.ms": (INT, "Heartbeat interval of KIP-848 consumer group members."),
    "quota.window.num": (INT, "Samples in a client quota window."),
    "quota.window.size.seconds": (INT, "Length of one client quota sample."),
}


TYPE_NAMES = {
    BOOLEAN: "BOOLEAN",
    STRING: "STRING",
    INT: "INT",
    SHORT: "SHORT",
    LONG: "LONG",
    DOUBLE: "DOUBLE",
    LIST: "LIST",
    CLASS: "CLASS",
    PASSWORD: "PASSWORD",
}
_INTEGRAL_BOUNDS = {INT: 2**31, SHORT: 2**15, LONG: 2**63}


def invalid_value(name: str, value: object, reason: str) -> str:
    """Kafka's ConfigException(name, value, message) text."""
    return f"Invalid value {value} for configuration {name}: {reason}"


def _java_number(number: float | int) -> str:
    return str(number) if isinstance(number, float) else str(int(number))


def value_problem(d: ConfigDef, name: str, value: str) -> str | None:
    """What Kafka's ConfigDef.parse and the config's validator say about `value` (None: it is fine)."""
    text = value.strip()
    number: float | int | None = None
    if d.type in _INTEGRAL_BOUNDS:
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is None or not -_INTEGRAL_BOUNDS[d.type] <= number < _INTEGRAL_BOUNDS[d.type]:
            return invalid_value(name, value, f"Not a number of type {TYPE_NAMES[d.type]}")
    elif d.type == DOUBLE:
        try:
            number = float(text)
        except ValueError:
            return invalid_value(name, value, "Not a number of type DOUBLE")
    elif d.type == BOOLEAN and text.lower() not in ("true", "false"):
        return invalid_value(name, value, "Expected value to be either true or false")
    if number is not None:
        if d.minimum is not None and number < d.minimum:
            return invalid_value(
                name, _java_number(number), f"Value must be at least {_java_number(d.minimum)}"
            )
        if d.maximum is not None and number > d.maximum:
            return invalid_value(
                name, _java_number(number), f"Value must be no more than {_java_number(d.maximum)}"
            )
    if d.choices:
        items = [v.strip() for v in text.split(",") if v.strip()] if d.type == LIST else [text]
        for item in items:
            if item not in d.choices:
                return invalid_value(name, item, f"String must be one of: {', '.join(d.choices)}")
    return None


def list_operation(current: str, values: str, append: bool) -> str:
    """IncrementalAlterConfigs APPEND (values not yet present, in order) or SUBTRACT on a LIST config."""
    items = [i for i in current.split(",") if i]
    given = [v for v in values.split(",") if v]
    if append:
        return ",".join(items + [v for v in given if v not in items])
    return ",".join(i for i in items if i not in given)


def topic_config_problem(configs: Mapping[str, str | None]) -> str | None:
    """What Kafka would refuse in these topic configs, in Kafka's words (LogConfig.validateNames, then
    each value's type and range)."""
    for name in configs:
        if name not in TOPIC_CONFIGS:
            return f"Unknown topic config name: {name}"
    for name, value in configs.items():
        if value is not None:
            problem = value_problem(TOPIC_CONFIGS[name], name, value)
            if problem:
                return problem
    return None
