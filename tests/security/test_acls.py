"""The ACL authorizer with real clients: a principal without ACLs is denied everything and sees nothing;
ACLs created over the wire open exactly what they name; DENY wins; ACLs and users survive restarts."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from secure_broker import SecureBroker, start_secure_broker
from wire_auth import connect, login

from sluice.errors import ErrorCode

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def make_user(admin: AdminClient, password: str = "pw") -> str:
    user = f"u{uuid.uuid4().hex[:8]}"
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=10)
    return user


def make_topic(admin: AdminClient) -> str:
    name = f"acl-{uuid.uuid4().hex[:10]}"
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=10)
    return name


def allow(
    admin: AdminClient,
    user: str,
    rtype: ResourceType,
    name: str,
    *ops: AclOperation,
    permission: AclPermissionType = ALLOW,
    pattern: ResourcePatternType = LITERAL,
) -> None:
    bindings = [AclBinding(rtype, name, pattern, f"User:{user}", "*", op, permission) for op in ops]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=10)


def produce_error(settings: dict, topic: str) -> KafkaError | None:
    delivered: list[KafkaError | None] = []
    producer = Producer({**settings, "message.timeout.ms": 5000, "retries": 0})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(10)
    assert delivered, "no delivery report"
    return delivered[0]


def consume(settings: dict, topic: str, group: str, count: int = 1, timeout: float = 10) -> tuple[list, list]:
    consumer = Consumer({**settings, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, errors = [], []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.3)
        if msg is None:
            continue
        if msg.error():
            errors.append(msg.error())
            if msg.error().code() in (
                KafkaError.GROUP_AUTHORIZATION_FAILED,
                KafkaError.TOPIC_AUTHORIZATION_FAILED,
            ):
                break
        else:
            got.append(msg.value())
    consumer.close()
    return got, errors


@pytest.fixture(scope="module")
def admin(secure_broker: SecureBroker) -> AdminClient:
    return AdminClient(secure_broker.admin_settings())


def test_principal_without_acls_is_denied_and_sees_no_topics(
    secure_broker: SecureBroker, admin: AdminClient
) -> None:
    topic = make_topic(admin)
    Producer(secure_broker.admin_settings()).produce(topic, b"seed")
    user = make_user(admin)
    settings = secure_broker.sasl(user, "pw")
    user_admin = AdminClient(settings)
    assert topic not in user_admin.list_topics(timeout=10).topics
    assert (
        user_admin.list_topics(topic, timeout=10).topics[topic].error.code()
        == KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    assert produce_error(settings, topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    got, errors = consume(settings, topic, f"g-{user}")
    assert got == [] and errors and errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as denied:
        user_admin.delete_topics([topic])[topic].result(timeout=10)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert topic in admin.list_topics(timeout=10).topics  # still there
    with pytest.raises(KafkaException) as no_create:
        user_admin.create_topics([NewTopic(f"{topic}-new", 1, 1)])[f"{topic}-new"].result(timeout=10)
    assert no_create.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # ACL administration needs the cluster (librdkafka drops DescribeAcls' error, so ask on the wire).
    with connect(secure_broker.address("SASL_SSL"), str(secure_broker.certs.ca_path)) as client:
        assert login(client, user, "pw").error_code == 0
        described = client.call(
            "DescribeAcls",
            2,
            client.request_class("DescribeAcls")(
                resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
            ),
        )
        assert described.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED and described.resources == []


def test_acls_created_over_the_wire_open_exactly_what_they_name(
    secure_broker: SecureBroker, admin: AdminClient
) -> None:
    topic, other = make_topic(admin), make_topic(admin)
    user = make_user(admin)
    group = f"g-{user}"
    settings = secure_broker.sasl(user, "pw")
    allow(admin, user, ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ)
    allow(admin, user, ResourceType.GROUP, group, AclOperation.READ)
    assert produce_error(settings, topic) is None
    got, errors = consume(settings, topic, group)
    assert got == [b"x"], errors
    # Describe is implied by Read/Write: the topic is listed, the other one is not.
    topics = AdminClient(settings).list_topics(timeout=10).topics
    assert topic in topics and other not in topics
    assert produce_error(settings, other).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The committed offset went through (OffsetCommit needs Read on group and topic).
    consumer = Consumer({**settings, "group.id": group})
    [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    consumer.close()
    assert committed.offset == 1
    described = admin.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            f"User:{user}",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=10)
    assert {(b.restype, b.name, b.operation) for b in described} == {
        (ResourceType.TOPIC, topic, AclOperation.WRITE),
        (ResourceType.TOPIC, topic, AclOperation.READ),
        (ResourceType.GROUP, group, AclOperation.READ),
    }


def test_deny_overrides_allow(secure_broker: SecureBroker, admin: AdminClient) -> None:
    topic = make_topic(admin)
    user = make_user(admin)
    settings = secure_broker.sasl(user, "pw")
    prefix = topic[:8]
    allow(admin, user, ResourceType.TOPIC, prefix, AclOperation.ALL, pattern=PREFIXED)
    allow(admin, user, ResourceType.GROUP, "*", AclOperation.READ)
    assert produce_error(settings, topic) is None
    allow(admin, user, ResourceType.TOPIC, topic, AclOperation.WRITE, permission=DENY)
    assert produce_error(settings, topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    got, _ = consume(settings, topic, f"g-{user}")  # Read is still allowed
    assert got == [b"x"]
    # Removing the DENY over the wire restores Write.
    deleted = admin.delete_acls(
        [AclBindingFilter(ResourceType.TOPIC, topic, LITERAL, f"User:{user}", None, AclOperation.WRITE, DENY)]
    )
    [future] = deleted.values()
    assert len(future.result(timeout=10)) == 1
    assert produce_error(settings, topic) is None


def test_deny_for_everyone_wins_over_a_user_allow(secure_broker: SecureBroker, admin: AdminClient) -> None:
    topic = make_topic(admin)
    user = make_user(admin)
    allow(admin, user, ResourceType.TOPIC, topic, AclOperation.WRITE)
    bindings = [AclBinding(ResourceType.TOPIC, topic, LITERAL, "User:*", "*", AclOperation.ALL, DENY)]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=10)
    assert (
        produce_error(secure_broker.sasl(user, "pw"), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    assert produce_error(secure_broker.admin_settings(), topic) is None  # super users are never denied


def test_users_and_acls_survive_restart_and_kill(tmp_path) -> None:
    broker = start_secure_broker(tmp_path)
    try:
        admin = AdminClient(broker.admin_settings())
        topic = make_topic(admin)
        user = make_user(admin, "restart-pw")
        allow(admin, user, ResourceType.TOPIC, topic, AclOperation.WRITE)
        allow(admin, user, ResourceType.TOPIC, topic, AclOperation.READ, permission=DENY)
        settings = broker.sasl(user, "restart-pw")
        assert produce_error(settings, topic) is None
        for stop in (broker.process.stop, broker.process.kill):
            stop()
            broker.process.restart()
            assert produce_error(settings, topic) is None
            got, errors = consume(settings, topic, "g", timeout=5)
            assert got == [] and errors
            admin = AdminClient(broker.admin_settings())
            acls = admin.describe_acls(
                AclBindingFilter(
                    ResourceType.TOPIC, topic, LITERAL, None, None, AclOperation.ANY, AclPermissionType.ANY
                )
            ).result(timeout=10)
            assert {(b.operation, b.permission_type) for b in acls} == {
                (AclOperation.WRITE, ALLOW),
                (AclOperation.READ, DENY),
            }
    finally:
        broker.process.kill()


def test_bad_acls_and_credentials_get_error_codes(secure_broker: SecureBroker, admin: AdminClient) -> None:
    bad = AclBinding(
        ResourceType.BROKER, "not-the-cluster", LITERAL, "User:x", "*", AclOperation.ALTER, ALLOW
    )
    [future] = admin.create_acls([bad]).values()
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=10)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    low = UserScramCredentialUpsertion("low", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")
    with pytest.raises(KafkaException) as unacceptable:
        admin.alter_user_scram_credentials([low])["low"].result(timeout=10)
    assert unacceptable.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    with pytest.raises(KafkaException) as missing:
        admin.describe_user_scram_credentials(["nobody-here"])["nobody-here"].result(timeout=10)
    assert missing.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_a_damaged_security_file_stops_the_start_with_its_name(tmp_path) -> None:
    from secure_broker import sluice_cli

    broker = start_secure_broker(tmp_path)
    try:
        admin = AdminClient(broker.admin_settings())
        topic = make_topic(admin)
        user = make_user(admin, "pw-d")
        allow(admin, user, ResourceType.TOPIC, topic, AclOperation.WRITE)
        broker.process.stop()
        for damaged in ("acls.json", "credentials.json"):
            path = broker.data_dir / "security" / damaged
            good = path.read_bytes()
            path.write_bytes(good[: len(good) // 2])  # damage from outside: sluice only replaces it whole
            refused = sluice_cli(
                "broker", "--config", str(broker.config_path), "--data-dir", str(broker.data_dir),
                "--admin-listen", "off", check=False
            )
            assert refused.returncode != 0
            said = "".join(refused.stderr.split())  # the console wraps long lines
            assert str(path) in said and "cannotberead" in said and "Traceback" not in said
            # Running on with fewer ACLs or users than were created would be worse than not running.
            path.write_bytes(good)
        broker.process.restart()
        assert produce_error(broker.sasl(user, "pw-d"), topic) is None
    finally:
        broker.process.kill()


def test_kill_during_acl_and_user_writes_loses_nothing_acknowledged(tmp_path) -> None:
    import threading

    broker = start_secure_broker(tmp_path)
    try:
        admin = AdminClient({**broker.admin_settings(), "socket.timeout.ms": 3000})
        acked_acls: list[str] = []
        acked_users: list[str] = []
        stop = threading.Event()

        def write() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                name = f"kill-{i}"
                binding = AclBinding(
                    ResourceType.TOPIC, name, LITERAL, "User:k", "*", AclOperation.READ, ALLOW
                )
                upsert = UserScramCredentialUpsertion(
                    name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw"
                )
                try:
                    [future] = admin.create_acls([binding]).values()
                    future.result(timeout=5)
                    acked_acls.append(name)
                    admin.alter_user_scram_credentials([upsert])[name].result(timeout=5)
                    acked_users.append(name)
                except KafkaException:
                    return  # the broker is gone

        writer = threading.Thread(target=write)
        writer.start()
        deadline = time.monotonic() + 20
        while len(acked_users) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        broker.process.kill()
        stop.set()
        writer.join(timeout=30)
        assert len(acked_users) >= 5
        broker.process.restart()
        admin = AdminClient(broker.admin_settings())
        found = admin.describe_acls(
            AclBindingFilter(
                ResourceType.TOPIC,
                None,
                ResourcePatternType.ANY,
                "User:k",
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ).result(timeout=10)
        assert set(acked_acls) <= {b.name for b in found}
        described = admin.describe_user_scram_credentials(acked_users)
        for user in acked_users:
            assert described[user].result(timeout=10).scram_credential_infos
    finally:
        broker.process.kill()


def test_a_denied_fetch_answers_empty_records_not_null(secure_broker: SecureBroker, admin: AdminClient) -> None:
    """Kafka answers a partition it may not be read from with empty records: librdkafka takes null records
    for a protocol error and retries forever instead of reporting TOPIC_AUTHORIZATION_FAILED."""
    user = make_user(admin)
    topic = make_topic(admin)
    allow(admin, user, ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.DESCRIBE)
    allow(admin, user, ResourceType.GROUP, f"g-{user}", AclOperation.READ)  # only the topic is denied
    with connect(secure_broker.address("SASL_PLAINTEXT")) as client:
        assert login(client, user, "pw").error_code == 0
        cls = client.request_class("Fetch")
        fetch = cls(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[cls.FetchTopic(
            topic=topic, partitions=[cls.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
        part = client.call("Fetch", 12, fetch).responses[0].partitions[0]
    assert part.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert part.records is not None and bytes(part.records) == b""
    consumer = Consumer({**secure_broker.sasl(user, "pw", tls=False), "group.id": f"g-{user}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline, error = time.monotonic() + 10, None
    while error is None and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error():
            error = message.error()
    consumer.close()
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
