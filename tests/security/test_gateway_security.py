"""The gateway in front of a SASL_SSL sluice broker: SCRAM and TLS towards Kafka from its kafka-pixy config,
and its own clients authenticated by mutual TLS and by HTTP basic / bearer credentials."""

from __future__ import annotations

import base64
import ssl
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest
import requests
from confluent_kafka.admin import AdminClient, NewTopic
from secure_broker import ADMIN, ADMIN_PASSWORD, SecureBroker, cli_settings

from sluice.gateway import Gateway, config_from_dict
from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gateway"))
from gateway_helpers import consume, produce
from rest_helpers import V2, create_topic, new_consumer, produce_json, records_until, rest_gateway

TOKEN = "t0ken-for-tests"
BASIC = {"alice": "alice-pw"}


def gateway_document(broker: SecureBroker, password: str = ADMIN_PASSWORD) -> dict:
    certs = broker.certs
    files = {
        "certificate_path": str(certs.server_cert),
        "key_path": str(certs.server_key),
        "client_ca_path": str(certs.ca_path),
    }
    return {
        "proxies": {
            "main": {
                "kafka": {
                    "seed_peers": [broker.address("SASL_SSL")],
                    "tls": True,
                    "ca_certificate_file": str(certs.ca_path),
                    "sasl": {"mechanism": "SCRAM-SHA-512", "user": ADMIN, "password": password},
                },
                "consumer": {
                    "long_polling_timeout": "1s",
                    "offsets_commit_interval": "100ms",
                    "session_timeout": "6s",
                },
            }
        },
        "tls": {"grpc": files, "http": files},
        "auth": {"basic": BASIC, "bearer_tokens": [TOKEN]},
    }


@pytest.fixture
async def gateway(secure_broker: SecureBroker) -> AsyncIterator[Gateway]:
    gw = Gateway(
        config_from_dict(gateway_document(secure_broker)),
        grpc_listen="127.0.0.1:0",
        http_listen="127.0.0.1:0",
        shutdown_grace=1.0,
    )
    await gw.start()
    yield gw
    await gw.stop()


def topic_on(broker: SecureBroker) -> str:
    name = f"gw-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(broker.admin_settings())
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=10)
    return name


def channel_credentials(broker: SecureBroker, client: str | None) -> grpc.ChannelCredentials:
    ca = broker.certs.ca_path.read_bytes()
    if client is None:
        return grpc.ssl_channel_credentials(root_certificates=ca)
    cert, key = broker.certs.client(client)
    return grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key.read_bytes(), certificate_chain=cert.read_bytes()
    )


class BearerAuth(grpc.AuthMetadataPlugin):
    def __init__(self, token: str) -> None:
        self.token = token

    def __call__(self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback) -> None:
        callback((("authorization", f"Bearer {self.token}"),), None)


async def test_grpc_through_mtls_and_a_token_to_a_sasl_ssl_broker(
    gateway: Gateway, secure_broker: SecureBroker
) -> None:
    topic = topic_on(secure_broker)
    credentials = grpc.composite_channel_credentials(
        channel_credentials(secure_broker, "gateway-client"),
        grpc.metadata_call_credentials(BearerAuth(TOKEN)),
    )
    async with grpc.aio.secure_channel(gateway.grpc_address, credentials) as channel:
        pixy = pb_grpc.KafkaPixyStub(channel)
        produced = await produce(pixy, topic, b"through the gateway", key=b"k")
        assert (produced.partition, produced.offset) == (0, 0)
        got = await consume(pixy, topic, f"g-{uuid.uuid4().hex[:6]}", auto_ack=True)
        assert got.message == b"through the gateway"


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_grpc_without_a_valid_token_is_unauthenticated(
    gateway: Gateway, secure_broker: SecureBroker, token: str | None
) -> None:
    credentials = channel_credentials(secure_broker, "gateway-client")
    if token is not None:
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.metadata_call_credentials(BearerAuth(token))
        )
    async with grpc.aio.secure_channel(gateway.grpc_address, credentials) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pb_grpc.KafkaPixyStub(channel).Produce(
                pb.ProdRq(topic="x", message=b"m", key_undefined=True), timeout=10
            )
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_grpc_without_a_client_certificate_is_refused(
    gateway: Gateway, secure_broker: SecureBroker
) -> None:
    credentials = grpc.composite_channel_credentials(
        channel_credentials(secure_broker, None), grpc.metadata_call_credentials(BearerAuth(TOKEN))
    )
    async with grpc.aio.secure_channel(gateway.grpc_address, credentials) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pb_grpc.KafkaPixyStub(channel).Produce(
                pb.ProdRq(topic="x", message=b"m", key_undefined=True), timeout=10
            )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def client_context(broker: SecureBroker, client: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(broker.certs.ca_path))
    if client is not None:
        cert, key = broker.certs.client(client)
        context.load_cert_chain(str(cert), str(key))
    return context


async def test_http_basic_and_bearer_auth(gateway: Gateway, secure_broker: SecureBroker) -> None:
    topic = topic_on(secure_broker)
    context = client_context(secure_broker, "http-client")
    url = f"{gateway.http_url}/topics/{topic}/messages"
    basic = "Basic " + base64.b64encode(b"alice:alice-pw").decode()
    wrong = "Basic " + base64.b64encode(b"alice:nope").decode()
    async with aiohttp.ClientSession() as session:
        for header, status in [(basic, 200), (f"Bearer {TOKEN}", 200), (wrong, 401), (None, 401)]:
            headers = {"Authorization": header} if header else {}
            async with session.post(url, data=b"hello", headers=headers, ssl=context) as response:
                assert response.status == status, await response.text()
                if status == 401:
                    assert "WWW-Authenticate" in response.headers
        async with session.get(f"{gateway.http_url}/_ping", ssl=context) as response:
            assert response.status == 200  # health checks stay open
        with pytest.raises(aiohttp.ClientError):
            async with session.get(
                f"{gateway.http_url}/_ping", ssl=client_context(secure_broker, None)
            ) as response:
                await response.text()


def test_bad_auth_sections_fail_the_config_load(secure_broker: SecureBroker) -> None:
    from sluice.gateway.config import ConfigError

    document = gateway_document(secure_broker)
    for bad in ({"basic": ["alice"]}, {"bearer_tokens": [""]}, {"tokens": ["x"]}, {"basic": {"a:b": "c"}}):
        with pytest.raises(ConfigError):
            config_from_dict({**document, "auth": bad})


async def test_wrong_kafka_credentials_answer_an_error_not_a_hang(secure_broker: SecureBroker) -> None:
    import time

    gw = Gateway(
        config_from_dict(gateway_document(secure_broker, password="not-the-password")),
        grpc_listen="127.0.0.1:0",
        http_listen="127.0.0.1:0",
        shutdown_grace=1.0,
    )
    await gw.start()
    try:
        topic = topic_on(secure_broker)
        context = client_context(secure_broker, "http-client")
        started = time.monotonic()
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{gw.http_url}/topics/{topic}/messages",
                data=b"hello",
                headers={"Authorization": f"Bearer {TOKEN}"},
                ssl=context,
                timeout=aiohttp.ClientTimeout(total=60),
            ) as response,
        ):
            body = await response.text()
        assert response.status >= 500, body
        assert "Authentication failed" in body  # the cause, not just "transport failure"
        assert time.monotonic() - started < 30
    finally:
        await gw.stop()


def test_rest_api_in_front_of_a_sasl_ssl_cluster_through_settings(secure_broker: SecureBroker) -> None:
    """`sluice gateway --bootstrap ... -X security.protocol=SASL_SSL ...`: the REST Proxy's producer, admin
    client and consumer instances all reach the secured cluster with the -X settings."""
    bootstrap, extra = cli_settings(secure_broker.admin_settings())
    with rest_gateway(bootstrap, *extra) as gateway:
        topic = f"rest-sasl-{uuid.uuid4().hex[:8]}"
        create_topic(gateway.url, topic)
        offsets = produce_json(gateway.url, topic, [{"n": 1}, {"n": 2}])
        assert [(o["partition"], o["offset"], o["error_code"]) for o in offsets] == [
            (0, 0, None),
            (0, 1, None),
        ]
        base = new_consumer(
            gateway.url,
            f"rest-sasl-{uuid.uuid4().hex[:8]}",
            format="json",
            **{"auto.offset.reset": "earliest"},
        )
        reply = requests.post(
            f"{base}/subscription", json={"topics": [topic]}, headers={"Content-Type": V2}, timeout=30
        )
        assert reply.status_code == 204, reply.text
        assert [r["value"] for r in records_until(base, 2)] == [{"n": 1}, {"n": 2}]
        requests.delete(base, timeout=30)
