"""Real clients authenticate over SASL_SSL (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN) and SASL_PLAINTEXT, and
fail fast with a wrong password or an unknown user."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from secure_broker import ADMIN, ADMIN_PASSWORD, SecureBroker

from sluice.client.batch_producer import (
    BatchProducer,
    BatchProducerSettings,
    ProduceFailed,
    settings_from_librdkafka,
)

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]


def new_topic(settings: dict, partitions: int = 1) -> str:
    name = f"sec-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(settings)
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=30)
    return name


def produce_and_consume(settings: dict, topic: str, count: int = 20) -> list[bytes]:
    producer = Producer({**settings, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {**settings, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_produces_and_consumes_over_sasl_ssl(
    secure_broker: SecureBroker, mechanism: str
) -> None:
    settings = secure_broker.sasl(ADMIN, ADMIN_PASSWORD, mechanism)
    topic = new_topic(settings)
    assert produce_and_consume(settings, topic) == [f"v{i}".encode() for i in range(20)]


def test_confluent_kafka_over_sasl_plaintext(secure_broker: SecureBroker) -> None:
    settings = secure_broker.sasl(ADMIN, ADMIN_PASSWORD, "SCRAM-SHA-512", tls=False)
    topic = new_topic(settings)
    assert len(produce_and_consume(settings, topic, 5)) == 5


def test_metadata_advertises_the_listener_the_client_came_through(secure_broker: SecureBroker) -> None:
    for tls in (True, False):
        settings = secure_broker.sasl(ADMIN, ADMIN_PASSWORD, tls=tls)
        brokers = AdminClient(settings).list_topics(timeout=10).brokers
        [broker] = brokers.values()
        assert broker.port == secure_broker.ports["SASL_SSL" if tls else "SASL_PLAINTEXT"]


@pytest.mark.parametrize(("user", "password"), [(ADMIN, "wrong-password"), ("nobody", "whatever")])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_and_unknown_user_fail_fast(
    secure_broker: SecureBroker, user: str, password: str, mechanism: str
) -> None:
    errors: list[tuple[float, KafkaError]] = []
    settings = {
        **secure_broker.sasl(user, password, mechanism),
        "error_cb": lambda e: errors.append((time.monotonic(), e)),
    }
    started = time.monotonic()
    producer = Producer(settings)
    while not errors and time.monotonic() - started < 10:
        producer.poll(0.05)
    assert errors, "no error reported"
    when, error = errors[0]
    assert when - started < 3  # the first refusal arrives at once (later retries are throttled)
    assert error.code() == KafkaError._AUTHENTICATION
    assert "Authentication failed" in error.str()


def test_failed_logins_are_logged_with_the_client_address(secure_broker: SecureBroker) -> None:
    with pytest.raises(KafkaException):
        AdminClient(secure_broker.sasl(ADMIN, "nope")).list_topics(timeout=3)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if any("failed SCRAM-SHA-256 login from 127.0.0.1" in line for line in secure_broker.process.output):
            return
        time.sleep(0.1)
    raise AssertionError("no log line for the failed login")


def test_user_created_over_the_wire_logs_in_with_every_mechanism(secure_broker: SecureBroker) -> None:
    admin = AdminClient(secure_broker.admin_settings())
    user = f"u{uuid.uuid4().hex[:6]}"
    upserts = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 4096), b"pw-" + user.encode())
        for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=10)
    described = admin.describe_user_scram_credentials([user])[user].result(timeout=10)
    assert sorted(i.mechanism.name for i in described.scram_credential_infos) == [
        "SCRAM_SHA_256",
        "SCRAM_SHA_512",
    ]
    for mechanism in MECHANISMS:
        # The user has no ACLs, so it sees no topics, but it is authenticated: list_topics succeeds.
        metadata = AdminClient(secure_broker.sasl(user, f"pw-{user}", mechanism)).list_topics(timeout=10)
        assert metadata.topics == {}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_produces_and_consumes_over_sasl_ssl(
    secure_broker: SecureBroker, mechanism: str
) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = new_topic(secure_broker.admin_settings())
    common = {
        "bootstrap_servers": secure_broker.address("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": ADMIN,
        "sasl_plain_password": ADMIN_PASSWORD,
        "ssl_cafile": str(secure_broker.certs.ca_path),
    }
    producer = KafkaProducer(**common)
    for i in range(5):
        producer.send(topic, f"k{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id=f"kp-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
        **common,
    )
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == 5:
            break
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(5)]


def test_kafka_python_wrong_password_fails_within_its_bootstrap_timeout(secure_broker: SecureBroker) -> None:
    """The broker answers the failed SCRAM exchange with SASL_AUTHENTICATION_FAILED and its message before it
    closes (test_wire_security checks those bytes). kafka-python 3 treats the refusal as a failed bootstrap
    attempt and retries until bootstrap_timeout_ms, 2.x gives up at once: either way its user gets an error
    within that bound, and the broker logs every refused login with the client's address."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KafkaPythonError

    logged_before = sum("failed SCRAM-SHA-512 login from 127.0.0.1" in line for line in secure_broker.process.output)
    started = time.monotonic()
    with pytest.raises(KafkaPythonError):
        KafkaProducer(
            bootstrap_servers=secure_broker.address("SASL_SSL"),
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username=ADMIN,
            sasl_plain_password="bad",
            ssl_cafile=str(secure_broker.certs.ca_path),
            bootstrap_timeout_ms=3000,
        )
    assert time.monotonic() - started < 3 + 20  # its 3 s bound, with room for a loaded machine
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        logged = sum("failed SCRAM-SHA-512 login from 127.0.0.1" in line for line in secure_broker.process.output)
        if logged > logged_before:
            return
        time.sleep(0.05)
    raise AssertionError("the broker logged no failed login for kafka-python's attempt")


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_the_batch_producer_authenticates_over_sasl_plaintext(
    secure_broker: SecureBroker, mechanism: str
) -> None:
    """The REST Proxy's own producer (client/batch_producer) logs in as librdkafka would with the same
    settings; a wrong password fails its records with the broker's reason, not a hang."""
    good = secure_broker.sasl(ADMIN, ADMIN_PASSWORD, mechanism, tls=False)
    topic = new_topic(good)
    settings = settings_from_librdkafka({**good, "message.timeout.ms": 2000})
    assert isinstance(settings, BatchProducerSettings)
    producer = BatchProducer(settings)
    try:
        written = await producer.produce(topic, {0: [(None, b"v%d" % i, ()) for i in range(5)]})
    finally:
        await producer.close(5)
    assert written == {0: [0, 1, 2, 3, 4]}
    consumer = Consumer({**good, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(read) < 5 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read.append(message.value())
    consumer.close()
    assert read == [b"v%d" % i for i in range(5)]
    # Failed logins from one host are answered ever later (up to 5 s, connection.failed.authentication.delay.ms
    # doubling), and this module's other tests fail logins too: the refusal must fit in the record's timeout.
    wrong = settings_from_librdkafka({**good, "sasl.password": "not-it", "message.timeout.ms": 8000})
    assert isinstance(wrong, BatchProducerSettings)
    refused = BatchProducer(wrong)
    started = time.monotonic()
    try:
        failed = (await refused.produce(topic, {0: [(None, b"never", ())]}))[0]
    finally:
        await refused.close(1)
    assert isinstance(failed, ProduceFailed) and "SaslAuthenticate" in failed.message
    assert time.monotonic() - started < 15
