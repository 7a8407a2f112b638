"""The gateway's own listeners: gRPC and HTTP over TLS, HTTP on a unix domain socket."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import grpc
import pytest
import trustme
from gateway_helpers import produce

from sluice.gateway import Gateway
from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from conftest import GatewayFactory, KafkaUnderTest


@dataclass(frozen=True)
class ServerCertificate:
    authority: trustme.CA
    certificate_path: Path
    key_path: Path

    @property
    def authority_pem(self) -> bytes:
        return self.authority.cert_pem.bytes()

    def client_ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.authority.configure_trust(context)
        return context


@pytest.fixture(scope="module")
def server_certificate(tmp_path_factory: pytest.TempPathFactory) -> ServerCertificate:
    """A throwaway CA and a certificate it signed for 127.0.0.1 and localhost, as PEM files."""
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1", "localhost")
    directory = tmp_path_factory.mktemp("tls")
    certificate_path, key_path = directory / "server.crt", directory / "server.key"
    issued.private_key_pem.write_to_path(str(key_path))
    # The whole chain, as a server should present it.
    certificate_path.write_bytes(b"".join(pem.bytes() for pem in issued.cert_chain_pems))
    return ServerCertificate(authority, certificate_path, key_path)


@pytest.fixture
async def tls_gateway(make_gateway: GatewayFactory, server_certificate: ServerCertificate) -> Gateway:
    files = {
        "certificate_path": str(server_certificate.certificate_path),
        "key_path": str(server_certificate.key_path),
    }
    return await make_gateway(top_level={"tls": {"grpc": files, "http": files}})


async def test_grpc_over_tls_produces_and_refuses_plaintext(
    kafka: KafkaUnderTest, tls_gateway: Gateway, server_certificate: ServerCertificate
) -> None:
    topic = kafka.create_topic(partitions=1)
    trusted = grpc.ssl_channel_credentials(root_certificates=server_certificate.authority_pem)
    async with grpc.aio.secure_channel(tls_gateway.grpc_address, trusted) as channel:
        pixy = pb_grpc.KafkaPixyStub(channel)
        first = await produce(pixy, topic, b"over tls", key=b"k")
        second = await produce(pixy, topic, b"over tls again", key=b"k")
    assert (first.partition, first.offset) == (0, 0)
    assert (second.partition, second.offset) == (0, 1)

    async with grpc.aio.insecure_channel(tls_gateway.grpc_address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as plaintext:
            await pb_grpc.KafkaPixyStub(channel).Produce(
                pb.ProdRq(topic=topic, message=b"in the clear", key_undefined=True), timeout=10
            )
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE

    # TLS with a client that does not trust the gateway's CA fails too: the certificate is checked.
    untrusted = grpc.ssl_channel_credentials(root_certificates=trustme.CA().cert_pem.bytes())
    async with grpc.aio.secure_channel(tls_gateway.grpc_address, untrusted) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as unverified:
            await pb_grpc.KafkaPixyStub(channel).Produce(
                pb.ProdRq(topic=topic, message=b"unverified", key_undefined=True), timeout=10
            )
    assert unverified.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_https_with_the_ca_and_plain_http_refused(
    tls_gateway: Gateway, server_certificate: ServerCertificate
) -> None:
    assert tls_gateway.http_url == f"https://127.0.0.1:{tls_gateway.http_port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(
            f"{tls_gateway.http_url}/_ping", ssl=server_certificate.client_ssl_context()
        ) as response:
            assert response.status == 200
            assert await response.text() == "pong"

        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"http://127.0.0.1:{tls_gateway.http_port}/_ping") as response:
                await response.text()


async def test_http_on_a_unix_socket_whose_file_stop_removes(
    make_gateway: GatewayFactory, tmp_path: Path
) -> None:
    socket_path = tmp_path / "gateway.sock"
    gateway = await make_gateway(top_level={"unix_addr": str(socket_path)})
    assert socket_path.is_socket()
    async with (
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(socket_path))) as session,
        session.get("http://gateway/_ping") as response,
    ):
        assert response.status == 200
        assert await response.text() == "pong"
    await gateway.stop()
    assert not socket_path.exists()
