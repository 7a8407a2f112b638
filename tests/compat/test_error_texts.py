"""Apache Kafka's error_message texts, condition by condition, as sluice answers them on the wire.

Applications and frameworks match these strings (Quix Streams' topic admin expects `Unknown topic config name:
bad_option`). Each row: the condition, Kafka's error code and Kafka's text, looked up in Kafka 4.x's sources
(ReplicationControlManager, ControllerApis, ConfigAdminManager, ConfigHelper, DynamicBrokerConfig, ConfigDef,
Topic, RuntimeLoggerManager, AclApis/AclControlManager, ScramControlManager/ScramImage, KafkaApis). None as the
text means Kafka sends null there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode as E
from sluice.testing import BrokerProcess

Call = Callable[[WireClient, str], tuple[int, str | None]]


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with the ACL authorizer (allowing everyone, as Kafka's test clusters run) and its own
    dynamic configs, so nothing here leaks into the session broker."""
    root = tmp_path_factory.mktemp("error-texts")
    config = root / "broker.yaml"
    config.write_text("authorizer: acl\nallow_everyone_if_no_acl_found: true\n")
    proc = BrokerProcess(root / "data", config=config).start()
    with WireClient.connect(proc.bootstrap) as wire:
        _create(wire, "existing", partitions=2)
    yield proc
    proc.stop()


def _create(
    wire: WireClient,
    name: str,
    partitions: int = 1,
    rf: int = 1,
    configs: dict[str, Any] | None = None,
    assignments: list[list[int]] | None = None,
) -> tuple[int, str | None]:
    R = wire.request_class("CreateTopics")
    topic = R.CreatableTopic(
        name=name,
        num_partitions=-1 if assignments else partitions,
        replication_factor=-1 if assignments else rf,
        assignments=[
            R.CreatableReplicaAssignment(partition_index=i, broker_ids=ids)
            for i, ids in enumerate(assignments or [])
        ],
        configs=[R.CreateableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )
    (result,) = wire.call("CreateTopics", 7, R(topics=[topic], timeout_ms=10_000)).topics
    return result.error_code, result.error_message


def _create_partitions(topic: str, count: int, assignments: list[list[int]] | None = None) -> Call:
    def call(wire: WireClient, _: str) -> tuple[int, str | None]:
        R = wire.request_class("CreatePartitions")
        item = R.CreatePartitionsTopic(
            name=topic,
            count=count,
            assignments=None
            if assignments is None
            else [R.CreatePartitionsAssignment(broker_ids=a) for a in assignments],
        )
        (result,) = wire.call(
            "CreatePartitions", 3, R(topics=[item], timeout_ms=10_000, validate_only=True)
        ).results
        return result.error_code, result.error_message

    return call


def _incremental(resource_type: int, name: str, op: int, key: str, value: str | None) -> Call:
    def call(wire: WireClient, _: str) -> tuple[int, str | None]:
        R = wire.request_class("IncrementalAlterConfigs")
        config = R.AlterableConfig(name=key, config_operation=op, value=value)
        resource = R.AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=[config])
        (result,) = wire.call(
            "IncrementalAlterConfigs", 1, R(resources=[resource], validate_only=True)
        ).responses
        return result.error_code, result.error_message

    return call


def _legacy_alter(resource_type: int, name: str, key: str, value: str) -> Call:
    def call(wire: WireClient, _: str) -> tuple[int, str | None]:
        R = wire.request_class("AlterConfigs")
        config = R.AlterableConfig(name=key, value=value)
        resource = R.AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=[config])
        (result,) = wire.call("AlterConfigs", 2, R(resources=[resource], validate_only=True)).responses
        return result.error_code, result.error_message

    return call


def _describe(resource_type: int, name: str) -> Call:
    def call(wire: WireClient, _: str) -> tuple[int, str | None]:
        R = wire.request_class("DescribeConfigs")
        resource = R.DescribeConfigsResource(
            resource_type=resource_type, resource_name=name, configuration_keys=None
        )
        (result,) = wire.call("DescribeConfigs", 4, R(resources=[resource])).results
        return result.error_code, result.error_message

    return call


def _new_topic(
    partitions: int = 1,
    rf: int = 1,
    configs: dict[str, Any] | None = None,
    assignments: list[list[int]] | None = None,
) -> Call:
    return lambda wire, name: _create(wire, name, partitions, rf, configs, assignments)


def _delete_topic(wire: WireClient, _: str) -> tuple[int, str | None]:
    R = wire.request_class("DeleteTopics")
    (result,) = wire.call("DeleteTopics", 6, R(topics=[R.DeleteTopicState(name="no-such-topic")])).responses
    return result.error_code, result.error_message


def _create_acl(principal: str, resource_type: int = 2, name: str = "t") -> Call:
    def call(wire: WireClient, _: str) -> tuple[int, str | None]:
        R = wire.request_class("CreateAcls")
        creation = R.AclCreation(
            resource_type=resource_type,
            resource_name=name,
            resource_pattern_type=3,
            principal=principal,
            host="*",
            operation=3,
            permission_type=3,
        )
        (result,) = wire.call("CreateAcls", 3, R(creations=[creation])).results
        return result.error_code, result.error_message

    return call


def _delete_acls(resource_type: int, operation: int) -> Call:
    def call(wire: WireClient, _: str) -> tuple[int, str | None]:
        R = wire.request_class("DeleteAcls")
        item = R.DeleteAclsFilter(
            resource_type_filter=resource_type,
            resource_name_filter=None,
            pattern_type_filter=1,
            principal_filter=None,
            host_filter=None,
            operation=operation,
            permission_type=1,
        )
        (result,) = wire.call("DeleteAcls", 3, R(filters=[item])).filter_results
        return result.error_code, result.error_message

    return call


def _alter_quota(
    entity: list[tuple[str, str | None]], key: str = "producer_byte_rate", value: float = 1024.0
) -> Call:
    def call(wire: WireClient, _: str) -> tuple[int, str | None]:
        R = wire.request_class("AlterClientQuotas")
        entry = R.EntryData(
            entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            ops=[R.OpData(key=key, value=value, remove=False)],
        )
        (result,) = wire.call("AlterClientQuotas", 1, R(entries=[entry], validate_only=True)).entries
        return result.error_code, result.error_message

    return call


def _describe_user(wire: WireClient, _: str) -> tuple[int, str | None]:
    R = wire.request_class("DescribeUserScramCredentials")
    (result,) = wire.call("DescribeUserScramCredentials", 0, R(users=[R.UserName(name="ghost")])).results
    return result.error_code, result.error_message


def _alter_user(
    *, delete: bool = False, mechanism: int = 1, iterations: int = 8192, name: str = "alice"
) -> Call:
    def call(wire: WireClient, _: str) -> tuple[int, str | None]:
        R = wire.request_class("AlterUserScramCredentials")
        if delete:
            request = R(deletions=[R.ScramCredentialDeletion(name=name, mechanism=mechanism)], upsertions=[])
        else:
            upsertion = R.ScramCredentialUpsertion(
                name=name, mechanism=mechanism, iterations=iterations, salt=b"salt", salted_password=b"x" * 32
            )
            request = R(deletions=[], upsertions=[upsertion])
        (result,) = wire.call("AlterUserScramCredentials", 0, request).results
        return result.error_code, result.error_message

    return call


def _sasl_authenticate(wire: WireClient, _: str) -> tuple[int, str | None]:
    R = wire.request_class("SaslAuthenticate")
    response = wire.call("SaslAuthenticate", 2, R(auth_bytes=b"\0u\0p"))
    return response.error_code, response.error_message


def _update_feature(wire: WireClient, _: str) -> tuple[int, str | None]:
    R = wire.request_class("UpdateFeatures")
    update = R.FeatureUpdateKey(feature="no.such.feature", max_version_level=1, upgrade_type=1)
    response = wire.call(
        "UpdateFeatures", 1, R(timeout_ms=10_000, feature_updates=[update], validate_only=True)
    )
    return response.error_code, response.error_message


TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, APPEND = 0, 2
LETTERS = "'.', '_' and '-'"

ROWS: list[tuple[str, Call, int, str | None]] = [
    # CreateTopics (ReplicationControlManager, LogConfig.validate, ConfigDef)
    (
        "unknown topic config",
        _new_topic(configs={"bad_option": "1"}),
        E.INVALID_CONFIG,
        "Unknown topic config name: bad_option",
    ),
    (
        "config not a number",
        _new_topic(configs={"retention.ms": "soon"}),
        E.INVALID_CONFIG,
        "Invalid value soon for configuration retention.ms: Not a number of type LONG",
    ),
    (
        "config below its range",
        _new_topic(configs={"retention.ms": "-5"}),
        E.INVALID_CONFIG,
        "Invalid value -5 for configuration retention.ms: Value must be at least -1",
    ),
    (
        "config above its range",
        _new_topic(configs={"min.cleanable.dirty.ratio": "2"}),
        E.INVALID_CONFIG,
        "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
    ),
    (
        "config not a boolean",
        _new_topic(configs={"preallocate": "maybe"}),
        E.INVALID_CONFIG,
        "Invalid value maybe for configuration preallocate: Expected value to be either true or false",
    ),
    (
        "config not a listed string",
        _new_topic(configs={"cleanup.policy": "compact,zap"}),
        E.INVALID_CONFIG,
        "Invalid value zap for configuration cleanup.policy: String must be one of: compact, delete",
    ),
    (
        "config with a null value",
        _new_topic(configs={"retention.ms": None}),
        E.INVALID_CONFIG,
        "Null value not supported for topic configs: retention.ms",
    ),
    (
        "illegal topic name",
        lambda wire, _: _create(wire, "bad name!"),
        E.INVALID_TOPIC_EXCEPTION,
        f"Topic name is invalid: 'bad name!' contains one or more characters other than ASCII alphanumerics, {LETTERS}",
    ),
    (
        "topic exists",
        lambda wire, _: _create(wire, "existing"),
        E.TOPIC_ALREADY_EXISTS,
        "Topic 'existing' already exists.",
    ),
    (
        "replication factor over the broker count",
        _new_topic(rf=3),
        E.INVALID_REPLICATION_FACTOR,
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached because "
        "only 1 broker(s) are registered.",
    ),
    (
        "zero partitions",
        _new_topic(partitions=0),
        E.INVALID_PARTITIONS,
        "Number of partitions was set to an invalid non-positive value.",
    ),
    (
        "assignment to an unknown broker",
        _new_topic(assignments=[[7]]),
        E.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes broker 7, but no such broker is registered.",
    ),
    (
        "assignment naming a broker twice",
        _new_topic(assignments=[[1, 1]]),
        E.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes the broker 1 more than once.",
    ),
    # CreatePartitions
    (
        "create partitions of an unknown topic",
        _create_partitions("no-such-topic", 3),
        E.UNKNOWN_TOPIC_OR_PARTITION,
        None,
    ),
    (
        "partition count unchanged",
        _create_partitions("existing", 2),
        E.INVALID_PARTITIONS,
        "Topic already has 2 partition(s).",
    ),
    (
        "partition count lowered",
        _create_partitions("existing", 1),
        E.INVALID_PARTITIONS,
        "The topic existing currently has 2 partition(s); 1 would not be an increase.",
    ),
    (
        "too few assignments",
        _create_partitions("existing", 4, [[1]]),
        E.INVALID_REPLICA_ASSIGNMENT,
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
    ),
    # DeleteTopics (ControllerApis: the error's own text)
    (
        "delete an unknown topic",
        _delete_topic,
        E.UNKNOWN_TOPIC_OR_PARTITION,
        "This server does not host this topic-partition.",
    ),
    # (Incremental)AlterConfigs on topics
    (
        "alter configs of an unknown topic",
        _incremental(TOPIC, "no-such-topic", SET, "retention.ms", "1"),
        E.UNKNOWN_TOPIC_OR_PARTITION,
        "The topic 'no-such-topic' does not exist.",
    ),
    (
        "librdkafka 0081: a wrong config of a topic that does not exist",
        _legacy_alter(TOPIC, "no-such-topic", "offset.metadata.max.bytes", "12345"),
        E.UNKNOWN_TOPIC_OR_PARTITION,
        "The topic 'no-such-topic' does not exist.",
    ),
    (
        "APPEND to a non-list config",
        _incremental(TOPIC, "existing", APPEND, "retention.ms", "1"),
        E.INVALID_CONFIG,
        "Can't APPEND to key retention.ms because its type is not LIST.",
    ),
    (
        "default topic resource",
        _incremental(TOPIC, "", SET, "retention.ms", "1"),
        E.INVALID_REQUEST,
        "Default topic resources are not allowed.",
    ),
    # BROKER resources (ConfigAdminManager, DynamicBrokerConfig)
    (
        "alter another broker",
        _incremental(BROKER, "7", SET, "log.retention.ms", "1"),
        E.INVALID_REQUEST,
        "Unexpected broker id, expected 1, but received 7",
    ),
    (
        "broker name not a number",
        _incremental(BROKER, "one", SET, "log.retention.ms", "1"),
        E.INVALID_REQUEST,
        "Node id must be an integer, but it is: one",
    ),
    (
        "static broker config",
        _incremental(BROKER, "1", SET, "num.partitions", "3"),
        E.INVALID_REQUEST,
        "Cannot update these configs dynamically: Set(num.partitions)",
    ),
    (
        "SSL config without a listener",
        _incremental(BROKER, "1", SET, "ssl.keystore.location", "/k"),
        E.INVALID_REQUEST,
        "These security configs can be dynamically updated only per-listener using the listener prefix: "
        "Set(ssl.keystore.location)",
    ),
    (
        "per-broker config at cluster level",
        _incremental(BROKER, "", SET, "sasl.kerberos.min.time.before.relogin", "58000"),
        E.INVALID_REQUEST,
        "Cannot update these configs at default cluster level, broker id must be specified: "
        "Set(sasl.kerberos.min.time.before.relogin)",
    ),
    (
        "dynamic config of the wrong type",
        _incremental(BROKER, "1", SET, "sasl.kerberos.min.time.before.relogin", "soon"),
        E.INVALID_REQUEST,
        "Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: Not a number of type LONG",
    ),
    (
        "thread pool more than doubled",
        _incremental(BROKER, "1", SET, "num.io.threads", "100"),
        E.INVALID_REQUEST,
        "Invalid value org.apache.kafka.common.config.ConfigException: Dynamic thread count update validation failed "
        "for num.io.threads=100, value should not be greater than double the current value 8 for configuration "
        "Invalid dynamic configuration",
    ),
    (
        "APPEND to a non-list broker config",
        _incremental(BROKER, "1", APPEND, "log.retention.ms", "1"),
        E.INVALID_CONFIG,
        "Config value append is not allowed for config key: log.retention.ms",
    ),
    (
        "legacy AlterConfigs of a logger",
        _legacy_alter(BROKER_LOGGER, "1", "root", "INFO"),
        E.INVALID_REQUEST,
        "Unknown resource type 8",
    ),
    # BROKER_LOGGER (RuntimeLoggerManager)
    (
        "unknown log level",
        _incremental(BROKER_LOGGER, "1", SET, "root", "LOUD"),
        E.INVALID_CONFIG,
        "Cannot set the log level of root to LOUD as it is not a supported log level. Valid log levels are DEBUG, "
        "ERROR, FATAL, INFO, TRACE, WARN",
    ),
    (
        "remove the root logger",
        _incremental(BROKER_LOGGER, "1", 1, "root", None),
        E.INVALID_REQUEST,
        "Removing the log level of the root logger is not allowed",
    ),
    # DescribeConfigs (ConfigHelper)
    (
        "describe another broker",
        _describe(BROKER, "7"),
        E.INVALID_REQUEST,
        "Unexpected broker id, expected 1 or empty string, but received 7",
    ),
    (
        "describe loggers of no broker",
        _describe(BROKER_LOGGER, ""),
        E.INVALID_REQUEST,
        "Broker id must not be empty",
    ),
    ("describe an unknown topic", _describe(TOPIC, "no-such-topic"), E.UNKNOWN_TOPIC_OR_PARTITION, None),
    # ACLs (AclApis, AclControlManager)
    (
        "ACL on a cluster not named kafka-cluster",
        _create_acl("User:a", resource_type=4, name="c"),
        E.INVALID_REQUEST,
        "The only valid name for the CLUSTER resource is kafka-cluster",
    ),
    (
        "ACL on an empty name",
        _create_acl("User:a", name=""),
        E.INVALID_REQUEST,
        "Invalid empty resource name",
    ),
    (
        "ACL principal without a type",
        _create_acl("alice"),
        E.INVALID_REQUEST,
        "expected a string in format principalType:principalName but got alice",
    ),
    (
        "DeleteAcls filter of an UNKNOWN resource type",
        _delete_acls(0, 1),
        E.INVALID_REQUEST,
        "Unknown patternFilter.",
    ),
    (
        "DeleteAcls filter of an UNKNOWN operation",
        _delete_acls(1, 0),
        E.INVALID_REQUEST,
        "Unknown entryFilter.",
    ),
    # Client quotas (ClientQuotaControlManager)
    ("quota of an empty entity", _alter_quota([]), E.INVALID_REQUEST, "Invalid empty client quota entity"),
    (
        "quota entity type named twice",
        _alter_quota([("user", "a"), ("user", "b")]),
        E.INVALID_REQUEST,
        "Invalid client quota entity, duplicate entity entry user",
    ),
    (
        "quota of an empty user name",
        _alter_quota([("user", "")]),
        E.INVALID_REQUEST,
        "Empty user not supported",
    ),
    (
        "unknown quota key",
        _alter_quota([("user", "a")], key="bytes_per_second"),
        E.INVALID_REQUEST,
        "Invalid configuration key bytes_per_second",
    ),
    (
        "quota of zero",
        _alter_quota([("user", "a")], value=0.0),
        E.INVALID_REQUEST,
        "Quota producer_byte_rate must be greater than 0",
    ),
    (
        "ip combined with a user",
        _alter_quota([("user", "a"), ("ip", "127.0.0.1")], key="connection_creation_rate"),
        E.INVALID_REQUEST,
        "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
    ),
    # SCRAM users (ScramImage, ScramControlManager)
    (
        "describe an unknown user",
        _describe_user,
        E.RESOURCE_NOT_FOUND,
        "Attempt to describe a user credential that does not exist: ghost",
    ),
    (
        "delete an unknown credential",
        _alter_user(delete=True),
        E.RESOURCE_NOT_FOUND,
        "Attempt to delete a user credential that does not exist",
    ),
    ("too few iterations", _alter_user(iterations=10), E.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
    (
        "unknown SCRAM mechanism",
        _alter_user(mechanism=9),
        E.UNSUPPORTED_SASL_MECHANISM,
        "Unknown SCRAM mechanism",
    ),
    ("empty user name", _alter_user(name=""), E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
    # UpdateFeatures (FeatureControlManager, QuorumFeatures)
    (
        "a feature the controller does not know",
        _update_feature,
        E.INVALID_UPDATE_VERSION,
        "Invalid update version 1 for feature no.such.feature. Local controller 1 does not support this feature.",
    ),
    # SASL on a listener that does not use it (KafkaApis)
    (
        "SaslAuthenticate on a plaintext listener",
        _sasl_authenticate,
        E.ILLEGAL_SASL_STATE,
        "SaslAuthenticate request received after successful authentication",
    ),
]


def test_every_condition_answers_kafkas_text(acl_broker: BrokerProcess) -> None:
    """One connection walks the whole table; every mismatch is reported at once."""
    wrong = []
    with WireClient.connect(acl_broker.bootstrap) as wire:
        for i, (condition, call, code, text) in enumerate(ROWS):
            got = call(wire, f"texts-{i}")
            if got != (code, text):
                wrong.append(f"{condition}: got {got}, Kafka answers {(int(code), text)}")
    assert not wrong, "\n".join(wrong)


def test_acl_apis_without_an_authorizer(bootstrap: str) -> None:
    """The session broker runs without an authorizer: Kafka's SECURITY_DISABLED texts (AclApis)."""
    with WireClient.connect(bootstrap) as wire:
        code, text = _create_acl("User:a")(wire, "")
        assert (code, text) == (E.SECURITY_DISABLED, "No Authorizer is configured.")
        R = wire.request_class("DescribeAcls")
        response = wire.call(
            "DescribeAcls",
            3,
            R(
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            ),
        )
        assert (response.error_code, response.error_message) == (
            E.SECURITY_DISABLED,
            "No Authorizer is configured on the broker",
        )


def test_topic_name_texts_cover_each_rule(acl_broker: BrokerProcess) -> None:
    """Kafka's Topic.validate: one text per rule."""
    cases = {
        ".": "Topic name is invalid: '.' is not allowed",
        "..": "Topic name is invalid: '..' is not allowed",
        "x"
        * 250: f"Topic name is invalid: the length of '{'x' * 250}' is longer than the max allowed length 249",
    }
    with WireClient.connect(acl_broker.bootstrap) as wire:
        for name, text in cases.items():
            assert _create(wire, name) == (E.INVALID_TOPIC_EXCEPTION, text)
