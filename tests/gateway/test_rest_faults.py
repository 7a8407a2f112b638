"""REST Proxy consumer instances under faults: gateway kill -9 and clean restarts, two gateways, expiry, auth."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests
import trustme
from rest_helpers import V2, create_topic, new_consumer, produce_json, records_until, rest_gateway, unique

from sluice.testing import BrokerProcess


def _subscribe(base: str, topic: str) -> None:
    reply = requests.post(
        f"{base}/subscription", json={"topics": [topic]}, headers={"Content-Type": V2}, timeout=30
    )
    assert reply.status_code == 204, reply.text


def test_commits_survive_kill_9_and_uncommitted_records_come_again(broker: BrokerProcess) -> None:
    topic, group = unique("rest-kill"), unique("rest-kill-group")
    settings = {"format": "json", "auto.offset.reset": "earliest", "auto.commit.enable": "false"}
    # A short session: the killed gateway's member leaves the group in seconds rather than librdkafka's 45 s.
    fast_session = ("-X", "session.timeout.ms=6000")
    with rest_gateway(broker.bootstrap, *fast_session) as first:
        create_topic(first.url, topic)
        produce_json(first.url, topic, list(range(20)))
        base = new_consumer(first.url, group, **settings)
        _subscribe(base, topic)
        records = records_until(base, 20)
        assert [r["value"] for r in records] == list(range(20))
        committed = {"offsets": [{"topic": topic, "partition": 0, "offset": 9}]}
        assert (
            requests.post(
                f"{base}/offsets", json=committed, headers={"Content-Type": V2}, timeout=30
            ).status_code
            == 200
        )
        first.kill()  # kill -9, mid-consume: records 10..19 were handed out but not committed
    with rest_gateway(broker.bootstrap, *fast_session) as second:
        old = requests.get(f"{base.replace(first.url, second.url)}/records", timeout=30)
        assert (old.status_code, old.json()["error_code"]) == (404, 40403)
        base = new_consumer(second.url, group, **settings)
        _subscribe(base, topic)
        again = records_until(base, 10)
        assert [r["value"] for r in again] == list(range(10, 20))
        # Auto commit of what was handed out, then a clean stop: the next gateway starts after it.
        requests.delete(base, timeout=30)
        auto = new_consumer(second.url, group, format="json", **{"auto.commit.enable": "true"})
        _subscribe(auto, topic)
        produce_json(second.url, topic, [20, 21])
        assert [r["value"] for r in records_until(auto, 12)] == list(range(10, 22))
    with rest_gateway(broker.bootstrap, *fast_session) as third:
        produce_json(third.url, topic, [22])
        base = new_consumer(third.url, group, **settings)
        _subscribe(base, topic)
        assert [r["value"] for r in records_until(base, 1)] == [22]


def test_two_gateways_expiry_tls_and_credentials(broker: BrokerProcess, tmp_path: Path) -> None:
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    certificate, key, ca = tmp_path / "server.crt", tmp_path / "server.key", tmp_path / "ca.pem"
    issued.private_key_pem.write_to_path(str(key))
    certificate.write_bytes(b"".join(pem.bytes() for pem in issued.cert_chain_pems))
    authority.cert_pem.write_to_path(str(ca))
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"proxies:\n  default:\n    kafka:\n      seed_peers: ['{broker.bootstrap}']\n"
        f"tls:\n  http: {{certificate_path: '{certificate}', key_path: '{key}'}}\n"
        "auth:\n  basic: {alice: s3cret}\n"
    )
    auth = ("alice", "s3cret")
    options = ("--config", str(config), "--rest-instance-timeout-ms", "1500")
    # Two gateways behind one load balancer: the second on TLS, with credentials and a short instance timeout.
    with (
        rest_gateway(broker.bootstrap) as plain,
        rest_gateway("", *options, auth=auth, ca_file=str(ca)) as guarded,
    ):
        secure = requests.Session()
        secure.verify = str(ca)
        secure.trust_env = False  # else REQUESTS_CA_BUNDLE from the environment overrides verify
        assert secure.get(f"{guarded.url}/topics", timeout=30).status_code == 401
        assert secure.get(f"{guarded.url}/topics", auth=auth, timeout=30).status_code == 200
        with pytest.raises(requests.ConnectionError):
            requests.get(guarded.url.replace("https", "http") + "/topics", auth=auth, timeout=30)
        secure.auth = auth
        group = unique("rest-two")
        base = new_consumer(plain.url, group, name="only-on-plain")
        elsewhere = secure.get(f"{base.replace(plain.url, guarded.url)}/subscription", timeout=30)
        assert (elsewhere.status_code, elsewhere.json()["error_code"]) == (404, 40403)
        assert requests.get(f"{base}/subscription", timeout=30).status_code == 200
        requests.delete(base, timeout=30)

        topic = unique("rest-idle")
        create_topic(plain.url, topic)
        produce_json(plain.url, topic, [1])
        reply = secure.post(
            f"{guarded.url}/consumers/{group}",
            json={"name": "idle", "format": "json", "auto.offset.reset": "earliest"},
            headers={"Content-Type": V2},
            timeout=30,
        )
        idle = reply.json()["base_uri"]
        assert idle.startswith("https://")
        assert (
            secure.post(
                f"{idle}/subscription", json={"topics": [topic]}, headers={"Content-Type": V2}, timeout=30
            ).status_code
            == 204
        )
        assert [r["value"] for r in records_until(idle, 1, session=secure)] == [1]
        # Left alone, it expires: it leaves its group (watched without touching it), then is gone.
        cluster = requests.get(f"{plain.url}/v3/clusters", timeout=30).json()["data"][0]["cluster_id"]
        members_url = f"{plain.url}/v3/clusters/{cluster}/consumer-groups/{group}/consumers"
        deadline = time.monotonic() + 30
        while requests.get(members_url, timeout=30).json()["data"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert requests.get(members_url, timeout=30).json()["data"] == []
        gone = secure.get(f"{idle}/subscription", timeout=30)
        assert (gone.status_code, gone.json()["error_code"]) == (404, 40403)


def test_stopping_with_the_cluster_gone_is_bounded(tmp_path: Path) -> None:
    """SIGTERM to a gateway whose cluster died under its consumer instances: it exits (each instance's close is
    given 10 s, all at once) instead of hanging in librdkafka's close."""
    cluster = BrokerProcess(tmp_path / "data").start()
    try:
        with rest_gateway(cluster.bootstrap) as gateway:
            topic = unique("rest-gone-cluster")
            create_topic(gateway.url, topic)
            produce_json(gateway.url, topic, [1, 2])
            for name in ("a", "b", "c"):
                base = new_consumer(
                    gateway.url,
                    unique("rest-gone-group"),
                    name=name,
                    format="json",
                    **{"auto.offset.reset": "earliest"},
                )
                _subscribe(base, topic)
                assert [r["value"] for r in records_until(base, 2)] == [1, 2]  # joined, holding a partition
            cluster.kill()
            started = time.monotonic()
            gateway.proc.terminate()
            assert gateway.proc.wait(60) == 0  # a clean stop, not the helper's kill
            assert time.monotonic() - started < 30
    finally:
        cluster.kill()
