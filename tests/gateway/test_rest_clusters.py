"""The REST Proxy API of a gateway fronting two clusters: v3 serves each by its own cluster id, v2 the default."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from rest_helpers import RestGateway, direct_messages, rest_gateway, unique

from conftest import KafkaUnderTest
from sluice.testing import BrokerProcess


@pytest.fixture(scope="module")
def two_clusters(
    broker: BrokerProcess, second_kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RestGateway]:
    config: Path = tmp_path_factory.mktemp("rest-clusters") / "gateway.yaml"
    config.write_text(
        json.dumps(
            {
                "default_cluster": "main",
                "proxies": {
                    "main": {"kafka": {"seed_peers": [broker.bootstrap]}},
                    "other": {"kafka": {"seed_peers": [second_kafka.bootstrap]}},
                },
            }
        )
    )
    with rest_gateway("", "--config", str(config)) as gateway:
        yield gateway


def test_v3_serves_each_cluster_by_its_id(two_clusters: RestGateway, second_kafka: KafkaUnderTest) -> None:
    url = two_clusters.url
    listed = requests.get(f"{url}/v3/clusters", timeout=30).json()["data"]
    ids = [c["cluster_id"] for c in listed]
    assert len(ids) == 2 and ids[0] != ids[1]
    main, other = ids
    assert [c["metadata"]["self"] for c in listed] == [f"{url}/v3/clusters/{i}" for i in ids]
    assert requests.get(f"{url}/v3/clusters/{other}", timeout=30).json()["cluster_id"] == other

    topic = unique("rest-other")
    created = requests.post(
        f"{url}/v3/clusters/{other}/topics", json={"topic_name": topic, "partitions_count": 2}, timeout=30
    )
    assert created.status_code == 201, created.text
    assert created.json()["cluster_id"] == other
    assert requests.get(f"{url}/v3/clusters/{other}/topics/{topic}", timeout=30).status_code == 200
    # Only on the other cluster: the default one (v3 by its id, and v2) does not have it.
    assert requests.get(f"{url}/v3/clusters/{main}/topics/{topic}", timeout=30).status_code == 404
    assert requests.get(f"{url}/topics/{topic}", timeout=30).json()["error_code"] == 40401

    produced = requests.post(
        f"{url}/v3/clusters/{other}/topics/{topic}/records",
        json={"partition_id": 1, "value": {"type": "STRING", "data": "elsewhere"}},
        timeout=30,
    )
    assert produced.status_code == 200, produced.text
    assert (produced.json()["cluster_id"], produced.json()["offset"]) == (other, 0)
    (message,) = direct_messages(second_kafka.bootstrap, topic, 1, partition=1)
    assert message.value() == b"elsewhere"
    groups = requests.get(f"{url}/v3/clusters/{other}/consumer-groups", timeout=30)
    assert groups.status_code == 200 and groups.json()["kind"] == "KafkaConsumerGroupList"
    assert requests.delete(f"{url}/v3/clusters/{other}/topics/{topic}", timeout=30).status_code == 204


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", ""), ("GET", "/topics"), ("POST", "/topics/t/records"), ("GET", "/consumer-groups")],
)
def test_an_unknown_cluster_id_is_404(two_clusters: RestGateway, method: str, path: str) -> None:
    reply = requests.request(
        method,
        f"{two_clusters.url}/v3/clusters/no-such-cluster{path}",
        json={"value": {"data": 1}},
        timeout=30,
    )
    assert reply.status_code == 404
    assert reply.json() == {"error_code": 404, "message": "Cluster no-such-cluster cannot be found."}
