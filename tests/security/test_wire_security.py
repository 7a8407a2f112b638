"""Connection-level security on the wire: what a connection may send before authenticating and how big,
non-TLS bytes on a TLS port, SaslHandshake v0's bare tokens, and KIP-368 session lifetimes."""

from __future__ import annotations

import socket
import ssl
import struct
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from secure_broker import ADMIN, ADMIN_PASSWORD, SecureBroker, start_secure_broker
from wire_auth import connect, login

from sluice.errors import ErrorCode


def closed_by_broker(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def metadata(client) -> object:
    return client.call("Metadata", 12, client.request_class("Metadata")(topics=None))


def test_only_api_versions_and_sasl_before_authentication(secure_broker: SecureBroker) -> None:
    with connect(secure_broker.address("SASL_PLAINTEXT")) as client:
        versions = client.call(
            "ApiVersions",
            3,
            client.request_class("ApiVersions")(client_software_name="t", client_software_version="1"),
        )
        assert versions.error_code == 0
        client.send_frame(
            client.encode_request("Metadata", 12, client.request_class("Metadata")(topics=None))
        )
        assert closed_by_broker(client.sock)
    with connect(secure_broker.address("SASL_PLAINTEXT")) as client:
        assert login(client, ADMIN, ADMIN_PASSWORD).error_code == 0
        assert metadata(client).brokers[0].port == secure_broker.ports["SASL_PLAINTEXT"]


def test_requests_are_capped_at_512_kib_before_authentication(secure_broker: SecureBroker) -> None:
    big = struct.pack(">i", 600 * 1024) + b"\0" * 1024
    with connect(secure_broker.address("SASL_PLAINTEXT")) as client:
        client.sock.sendall(big)
        assert closed_by_broker(client.sock)
    with connect(secure_broker.address("SASL_PLAINTEXT")) as client:
        assert login(client, ADMIN, ADMIN_PASSWORD).error_code == 0
        client.sock.sendall(big)  # the same prefix after login is an ordinary (incomplete) request
        assert not closed_by_broker(client.sock, timeout=1.0)


def test_plaintext_bytes_on_a_tls_port_close_only_that_connection(secure_broker: SecureBroker) -> None:
    good = AdminClient(secure_broker.admin_settings())
    assert good.list_topics(timeout=10) is not None
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", secure_broker.ports["SASL_SSL"]), timeout=5) as raw:
            with connect(secure_broker.address("PLAINTEXT")) as plain:
                frame = plain.encode_request("ApiVersions", 0, plain.request_class("ApiVersions")())
            raw.sendall(struct.pack(">i", len(frame)) + frame)
            assert closed_by_broker(raw)
    assert good.list_topics(timeout=10) is not None
    with connect(secure_broker.address("SASL_SSL"), str(secure_broker.certs.ca_path)) as client:
        assert login(client, ADMIN, ADMIN_PASSWORD, "SCRAM-SHA-512").error_code == 0


def test_handshake_errors(secure_broker: SecureBroker) -> None:
    with connect(secure_broker.address("SASL_PLAINTEXT")) as client:
        answer = client.call("SaslHandshake", 1, client.request_class("SaslHandshake")(mechanism="GSSAPI"))
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        auth = client.call("SaslAuthenticate", 2, client.request_class("SaslAuthenticate")(auth_bytes=b"x"))
        assert auth.error_code == ErrorCode.ILLEGAL_SASL_STATE
    with connect(secure_broker.address("PLAINTEXT")) as client:
        answer = client.call("SaslHandshake", 1, client.request_class("SaslHandshake")(mechanism="PLAIN"))
        assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_failed_login_answers_with_a_message_then_closes(secure_broker: SecureBroker) -> None:
    with connect(secure_broker.address("SASL_PLAINTEXT")) as client:
        answer = login(client, ADMIN, "wrong", "PLAIN")
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        # Kafka's PlainSaslServer text, word for word.
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert closed_by_broker(client.sock)


def test_handshake_v0_takes_bare_tokens(secure_broker: SecureBroker) -> None:
    with connect(secure_broker.address("SASL_PLAINTEXT")) as client:
        answer = client.call("SaslHandshake", 0, client.request_class("SaslHandshake")(mechanism="PLAIN"))
        assert answer.error_code == 0
        client.send_frame(f"\0{ADMIN}\0{ADMIN_PASSWORD}".encode())
        assert client.recv_frame() == b""  # PLAIN's empty server message, bare
        assert metadata(client).brokers


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory: pytest.TempPathFactory):
    broker = start_secure_broker(tmp_path_factory.mktemp("reauth"), connections_max_reauth_ms=1500)
    yield broker
    broker.process.kill()


def test_sessions_expire_and_clients_reauthenticate(reauth_broker: SecureBroker) -> None:
    with connect(reauth_broker.address("SASL_PLAINTEXT")) as client:
        answer = login(client, ADMIN, ADMIN_PASSWORD)
        assert answer.session_lifetime_ms == 1500
        assert metadata(client).brokers
        time.sleep(1.0)
        assert (
            login(client, ADMIN, ADMIN_PASSWORD).error_code == 0
        )  # re-authentication on the same connection
        time.sleep(1.0)
        assert metadata(client).brokers  # 2 s after the first login: the second one counts
        time.sleep(1.7)
        client.send_frame(
            client.encode_request("Metadata", 12, client.request_class("Metadata")(topics=None))
        )
        assert closed_by_broker(client.sock)
    expired = "SASL session expired"
    deadline = time.monotonic() + 5
    while not any(expired in line for line in reauth_broker.process.output) and time.monotonic() < deadline:
        time.sleep(0.1)
    closes_before = sum(expired in line for line in reauth_broker.process.output)
    assert closes_before >= 1  # the broker says so when it cuts a session off
    # librdkafka re-authenticates on its own (KIP-368): a producer keeps going across several lifetimes,
    # on the same connections, which the broker never has to cut off.
    producer = Producer({**reauth_broker.sasl(ADMIN, ADMIN_PASSWORD), "linger.ms": 0})
    errors: list = []
    for i in range(8):
        producer.produce("reauth", f"{i}".encode(), on_delivery=lambda err, msg: errors.append(err))
        producer.flush(10)
        time.sleep(0.5)
    assert errors == [None] * 8
    assert sum(expired in line for line in reauth_broker.process.output) == closes_before


def test_reauthentication_must_keep_the_principal(reauth_broker: SecureBroker) -> None:
    admin = AdminClient(reauth_broker.admin_settings())
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    upsert = UserScramCredentialUpsertion(
        "other", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw"
    )
    admin.alter_user_scram_credentials([upsert])["other"].result(timeout=10)
    with connect(reauth_broker.address("SASL_PLAINTEXT")) as client:
        assert login(client, ADMIN, ADMIN_PASSWORD).error_code == 0
        assert login(client, "other", "pw").error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


@pytest.fixture(scope="module")
def throttle_broker(tmp_path_factory: pytest.TempPathFactory):
    broker = start_secure_broker(
        tmp_path_factory.mktemp("throttle"), connection_failed_authentication_delay_ms=300
    )
    yield broker
    broker.process.kill()


def timed_login(broker: SecureBroker, password: str) -> tuple[float, int]:
    with connect(broker.address("SASL_PLAINTEXT")) as client:
        started = time.monotonic()
        answer = login(client, ADMIN, password, "PLAIN")
        return time.monotonic() - started, answer.error_code


def test_repeated_failed_logins_are_answered_ever_later(throttle_broker: SecureBroker) -> None:
    delays = [timed_login(throttle_broker, "wrong") for _ in range(3)]
    assert [code for _, code in delays] == [ErrorCode.SASL_AUTHENTICATION_FAILED] * 3
    first, second, third = (seconds for seconds, _ in delays)
    assert first >= 0.3 and second >= 0.6 and third >= 1.2  # 300 ms, doubled per repeat
    assert third - first >= 0.6
    # A good login is never held back (held, it would wait the next doubled delay, 2.4 s), and it forgives the
    # host: the next failure costs the base delay again, not 2.4 s. The bounds sit halfway, for a loaded machine.
    seconds, code = timed_login(throttle_broker, ADMIN_PASSWORD)
    assert code == 0 and seconds < 1.2
    seconds, code = timed_login(throttle_broker, "wrong")
    assert code == ErrorCode.SASL_AUTHENTICATION_FAILED and 0.3 <= seconds < 1.2


def test_a_throttled_failure_does_not_hold_up_other_connections(throttle_broker: SecureBroker) -> None:
    import threading

    failing = threading.Thread(target=lambda: [timed_login(throttle_broker, "wrong") for _ in range(3)])
    failing.start()
    try:
        time.sleep(0.2)  # the first failure is now being held back
        with connect(throttle_broker.address("SASL_PLAINTEXT")) as client:
            started = time.monotonic()
            assert login(client, ADMIN, ADMIN_PASSWORD, "PLAIN").error_code == 0
            assert metadata(client).brokers
            # Served while the failing connections are still held back (at least 0.3 + 0.6 + 1.2 s in all).
            assert failing.is_alive(), time.monotonic() - started
    finally:
        failing.join()


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_authenticate_every_version_and_mechanism(
    reauth_broker: SecureBroker, version: int, mechanism: str
) -> None:
    with connect(reauth_broker.address("SASL_PLAINTEXT")) as client:
        answer = login(client, ADMIN, ADMIN_PASSWORD, mechanism, version=version)
        assert answer.error_code == 0
        # v1+ tells the client when to re-authenticate (KIP-368); v0 has no such field.
        assert answer.session_lifetime_ms == (1500 if version >= 1 else 0)
        assert metadata(client).brokers


@pytest.fixture(scope="module")
def unthrottled_broker(tmp_path_factory: pytest.TempPathFactory):
    broker = start_secure_broker(
        tmp_path_factory.mktemp("unthrottled"), connection_failed_authentication_delay_ms=0
    )
    yield broker
    broker.process.kill()


GARBAGE_TOKENS = [
    b"",
    b"\x00",
    bytes(range(256)) * 1000,  # 256 KB, not UTF-8
    b"n,,n=admin,r=" + b"\xff" * 50,
    b"n,,n=,r=abc",
    b"\x00admin",
    b"a\x00b\x00c\x00d",
    b"n,,n=admin,r=abc,m=ext",
]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_garbage_sasl_tokens_fail_the_login_with_a_message(
    unthrottled_broker: SecureBroker, mechanism: str
) -> None:
    for token in GARBAGE_TOKENS:
        with connect(unthrottled_broker.address("SASL_PLAINTEXT")) as client:
            handshake = client.call(
                "SaslHandshake", 1, client.request_class("SaslHandshake")(mechanism=mechanism)
            )
            assert handshake.error_code == 0
            answer = client.call(
                "SaslAuthenticate", 2, client.request_class("SaslAuthenticate")(auth_bytes=token)
            )
            assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, token[:20]
            assert answer.error_message
            assert closed_by_broker(client.sock)
    assert not [line for line in unthrottled_broker.process.output if "Traceback" in line]
    with connect(unthrottled_broker.address("SASL_PLAINTEXT")) as client:  # the broker is still fine
        assert login(client, ADMIN, ADMIN_PASSWORD, mechanism).error_code == 0
