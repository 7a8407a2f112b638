"""REST v3 as Confluent's REST Proxy serves it: the operations of its OpenAPI document beyond topics and
records (broker and cluster configs, replicas, offsets, reassignments, assignments, batches), and inputs
that once answered 500. A real `sluice gateway` process, the real broker, plain HTTP."""

from __future__ import annotations

import json
import time

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition
from rest_helpers import RestGateway, cluster_id, create_topic, new_consumer, records_until, unique

from sluice.testing import BrokerProcess

JSON_BODY = {"Content-Type": "application/json"}
pytestmark = pytest.mark.xdist_group("rest-v3")  # one worker, one gateway for the module


@pytest.fixture(scope="module")
def v3(rest_proxy: RestGateway) -> str:
    return f"{rest_proxy.url}/v3/clusters/{cluster_id(rest_proxy.url)}"


def _refused(reply: requests.Response, status: int = 400) -> None:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert body["error_code"] == status and body["message"], body


# -- the four 500s of issue #40 -----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["resource_type", "pattern_type", "operation", "permission"])
def test_acl_filters_naming_unknown_are_400(v3: str, field: str) -> None:
    reply = requests.get(f"{v3}/acls", params={field: "UNKNOWN"}, timeout=30)
    _refused(reply)
    assert field in reply.json()["message"]
    _refused(requests.delete(f"{v3}/acls", params={"resource_type": "ANY", field: "UNKNOWN"}, timeout=30))


@pytest.mark.parametrize("value", ["20000", "17000000000000000000000000", "1.7e25", "-5", "0", "true"])
def test_topic_create_with_an_out_of_range_replication_factor_is_400(v3: str, value: str) -> None:
    name = unique("rf")
    body = f'{{"topic_name": "{name}", "partitions_count": 1, "replication_factor": {value}}}'
    _refused(requests.post(f"{v3}/topics", data=body, headers=JSON_BODY, timeout=30))
    body = f'{{"topic_name": "{name}", "partitions_count": {value}}}'
    _refused(requests.post(f"{v3}/topics", data=body, headers=JSON_BODY, timeout=30))
    assert requests.get(f"{v3}/topics/{name}", timeout=30).status_code == 404


def test_lags_leave_out_partitions_that_no_longer_exist(
    v3: str, rest_proxy: RestGateway, broker: BrokerProcess
) -> None:
    """A group's committed offsets of a deleted topic's partition 2, the topic then made again with one partition:
    the lags are those of the partitions that exist (a broker that drops such offsets on DeleteTopics, as
    Kafka's does, and one that keeps them answer the same)."""
    topic, group = unique("gone"), unique("gone-group")
    create_topic(rest_proxy.url, topic, partitions=3)
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committer.commit(offsets=[TopicPartition(topic, 2, 7)], asynchronous=False)
        assert requests.delete(f"{v3}/topics/{topic}", timeout=30).status_code == 204
        deadline = time.monotonic() + 30
        while (
            requests.post(
                f"{v3}/topics", json={"topic_name": topic, "partitions_count": 1}, timeout=30
            ).status_code
            != 201
        ):
            assert time.monotonic() < deadline, "the deleted topic could not be made again"
            time.sleep(0.2)
        requests.post(
            f"{rest_proxy.url}/topics/{topic}",
            json={"records": [{"value": 1}, {"value": 2}]},
            headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
            timeout=30,
        )
        committer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        committer.close()
    lags = requests.get(f"{v3}/consumer-groups/{group}/lags", timeout=30)
    assert lags.status_code == 200, lags.text
    assert [(lag["partition_id"], lag["current_offset"], lag["lag"]) for lag in lags.json()["data"]] == [
        (0, 1, 1)
    ]
    summary = requests.get(f"{v3}/consumer-groups/{group}/lag-summary", timeout=30)
    assert summary.status_code == 200, summary.text
    assert (summary.json()["max_lag_partition_id"], summary.json()["total_lag"]) == (0, 1)
    assert (
        requests.get(f"{v3}/consumer-groups/{group}/lags/{topic}/partitions/2", timeout=30).status_code == 404
    )


def _v2_record_refused_400(rest_proxy: RestGateway, topic: str) -> None:
    """A v2 produce of one record the broker refuses: answered 200, the record's own error_code 400."""
    v2 = requests.post(
        f"{rest_proxy.url}/topics/{topic}",
        json={"records": [{"value": 1}]},
        headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
        timeout=30,
    )
    assert v2.status_code == 200 and v2.json()["offsets"][0]["error_code"] == 400, v2.text


def test_a_keyless_record_to_a_compacted_topic_is_400_and_the_next_one_is_written(
    v3: str, rest_proxy: RestGateway
) -> None:
    topic = unique("compacted")
    create_topic(rest_proxy.url, topic, cleanup_policy="compact")
    keyless = {"value": {"type": "JSON", "data": {"n": 1}}}
    reply = requests.post(f"{v3}/topics/{topic}/records", json=keyless, timeout=30)
    _refused(reply)
    _v2_record_refused_400(rest_proxy, topic)
    keyed = {"key": {"type": "STRING", "data": "k"}, **keyless}
    written = requests.post(f"{v3}/topics/{topic}/records", json=keyed, timeout=10)
    assert (written.status_code, written.json()["offset"]) == (200, 0), written.text


def test_a_record_to_an_internal_topic_is_400_not_a_server_error(v3: str, rest_proxy: RestGateway) -> None:
    """The broker refuses appends to its internal topics (INVALID_TOPIC_EXCEPTION), which Confluent's proxy answers
    400 (KafkaExceptionMapper's InvalidTopicException); found as a 500 by Schemathesis."""
    internal = "__consumer_offsets"
    reply = requests.post(
        f"{v3}/topics/{internal}/records", json={"value": {"type": "JSON", "data": 1}}, timeout=30
    )
    _refused(reply)
    _v2_record_refused_400(rest_proxy, internal)


# -- errors in Confluent's shape ------------------------------------------------------------------------------


def test_malformed_or_mistyped_bodies_are_400_and_an_existing_topic_is_400(
    v3: str, rest_proxy: RestGateway
) -> None:
    for body in ["{", "[]", '"x"', "null"]:
        _refused(requests.post(f"{v3}/topics", data=body, headers=JSON_BODY, timeout=30))
    topic = unique("twice")
    create_topic(rest_proxy.url, topic)
    again = requests.post(f"{v3}/topics", json={"topic_name": topic}, timeout=30)
    _refused(again)
    assert "already exists" in again.json()["message"]
    wrong_method = requests.request("TRACE", f"{v3}/topics", timeout=30)
    assert wrong_method.status_code == 405 and set(wrong_method.headers["Allow"].split(",")) >= {
        "GET",
        "POST",
    }


# -- brokers and their configs ---------------------------------------------------------------------------------


def test_broker_and_cluster_configs(v3: str) -> None:
    (broker,) = requests.get(f"{v3}/brokers", timeout=30).json()["data"]
    base = f"{v3}/brokers/{broker['broker_id']}"
    assert broker["configs"]["related"] == f"{base}/configs"
    assert broker["partition_replicas"]["related"] == f"{base}/partition-replicas"
    listed = requests.get(f"{base}/configs", timeout=30).json()
    assert listed["kind"] == "KafkaBrokerConfigList" and any(
        c["name"] == "log.retention.ms" for c in listed["data"]
    )
    everyone = requests.get(f"{v3}/brokers/-/configs", timeout=30).json()["data"]
    assert {c["broker_id"] for c in everyone} == {broker["broker_id"]}

    name = "log.cleaner.backoff.ms"
    put = requests.put(f"{base}/configs/{name}", json={"value": "12345"}, timeout=30)
    assert put.status_code == 204, put.text
    one = requests.get(f"{base}/configs/{name}", timeout=30).json()
    assert (one["value"], one["source"], one["is_default"]) == ("12345", "DYNAMIC_BROKER_CONFIG", False)
    assert one["metadata"]["self"] == f"{base}/configs/{name}"
    assert requests.delete(f"{base}/configs/{name}", timeout=30).status_code == 204
    assert requests.get(f"{base}/configs/{name}", timeout=30).json()["source"] != "DYNAMIC_BROKER_CONFIG"
    alter = {
        "data": [
            {"name": name, "value": "999"},
            {"name": "log.cleaner.io.buffer.load.factor", "operation": "DELETE"},
        ]
    }
    assert requests.post(f"{base}/configs:alter", json=alter, timeout=30).status_code == 204
    assert requests.get(f"{base}/configs/{name}", timeout=30).json()["value"] == "999"
    requests.delete(f"{base}/configs/{name}", timeout=30)
    _refused(requests.put(f"{base}/configs/{name}", json={"value": "not a number"}, timeout=30))
    _refused(requests.get(f"{v3}/brokers/4242/configs", timeout=30), 404)

    # The cluster-wide defaults: Kafka's BROKER resource with the empty name.
    cluster_put = requests.put(f"{v3}/broker-configs/{name}", json={"value": "4321"}, timeout=30)
    assert cluster_put.status_code == 204, cluster_put.text
    default = requests.get(f"{v3}/broker-configs/{name}", timeout=30).json()
    assert (default["kind"], default["config_type"], default["value"]) == (
        "KafkaClusterConfig",
        "BROKER",
        "4321",
    )
    assert default["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert name in [c["name"] for c in requests.get(f"{v3}/broker-configs", timeout=30).json()["data"]]
    assert requests.get(f"{base}/configs/{name}", timeout=30).json()["value"] == "4321"
    assert requests.delete(f"{v3}/broker-configs/{name}", timeout=30).status_code == 204
    _refused(requests.get(f"{v3}/broker-configs/{name}", timeout=30), 404)
    batch = {"data": [{"name": name, "value": "777"}], "validate_only": True}
    assert requests.post(f"{v3}/broker-configs:alter", json=batch, timeout=30).status_code == 204
    _refused(requests.get(f"{v3}/broker-configs/{name}", timeout=30), 404)  # validate_only changed nothing


def test_all_topic_configs_partitions_replicas_offsets_and_reassignments(
    v3: str, rest_proxy: RestGateway
) -> None:
    topic = unique("parts")
    create_topic(rest_proxy.url, topic, partitions=1, retention_ms="86400000")
    every = requests.get(f"{v3}/topics/-/configs", timeout=30).json()["data"]
    mine = {c["name"]: c["value"] for c in every if c["topic_name"] == topic}
    assert mine["retention.ms"] == "86400000"

    grown = requests.patch(f"{v3}/topics/{topic}", json={"partitions_count": 3}, timeout=30)
    assert (grown.status_code, grown.json()["partitions_count"]) == (200, 3), grown.text
    _refused(requests.patch(f"{v3}/topics/{topic}", json={"partitions_count": 2}, timeout=30))
    _refused(requests.patch(f"{v3}/topics/{topic}", json={"partitions_count": "3"}, timeout=30))
    _refused(requests.patch(f"{v3}/topics/{unique('none')}", json={"partitions_count": 3}, timeout=30), 404)

    requests.post(f"{v3}/topics/{topic}/records", json={"partition_id": 2, "value": {"data": 1}}, timeout=30)
    offsets = requests.get(f"{v3}/topics/{topic}/partitions/2/offset", timeout=30).json()
    assert (offsets["kind"], offsets["earliest_offset"], offsets["latest_offset"]) == (
        "KafkaPartitionWithOffsets",
        0,
        1,
    )
    _refused(
        requests.get(f"{v3}/topics/{topic}/partitions/2/offset", params={"offset_type": "latest"}, timeout=30)
    )

    partition = requests.get(f"{v3}/topics/{topic}/partitions/2", timeout=30).json()
    (replica,) = requests.get(partition["replicas"]["related"], timeout=30).json()["data"]
    assert (replica["kind"], replica["is_leader"], replica["is_in_sync"]) == ("KafkaReplica", True, True)
    assert requests.get(partition["leader"]["related"], timeout=30).json() == replica
    _refused(requests.get(f"{partition['replicas']['related']}/4242", timeout=30), 404)
    held = requests.get(f"{v3}/brokers/{replica['broker_id']}/partition-replicas", timeout=30).json()["data"]
    assert {(r["topic_name"], r["partition_id"]) for r in held} >= {(topic, 0), (topic, 1), (topic, 2)}

    # A single-replica cluster has nothing to reassign: empty lists, and 404 for one partition's.
    for path in ("topics/-/partitions/-/reassignment", f"topics/{topic}/partitions/-/reassignment"):
        listed = requests.get(f"{v3}/{path}", timeout=30).json()
        assert (listed["kind"], listed["data"]) == ("KafkaReassignmentList", [])
    _refused(requests.get(f"{v3}/topics/{topic}/partitions/0/reassignment", timeout=30), 404)


def test_consumer_groups_assignments_and_lags_as_confluent_shapes_them(
    v3: str, rest_proxy: RestGateway
) -> None:
    topic, group = unique("assigned"), unique("assigned-group")
    create_topic(rest_proxy.url, topic)
    requests.post(
        f"{rest_proxy.url}/topics/{topic}",
        json={"records": [{"value": n} for n in range(4)]},
        headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
        timeout=30,
    )
    base = new_consumer(
        rest_proxy.url,
        group,
        format="json",
        **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"},
    )
    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    try:
        requests.post(f"{base}/subscription", json={"topics": [topic]}, headers=v2, timeout=30)
        records_until(base, 4)
        commit = {"offsets": [{"topic": topic, "partition": 0, "offset": 0}]}
        requests.post(f"{base}/offsets", json=commit, headers=v2, timeout=30)
        described = requests.get(f"{v3}/consumer-groups/{group}", timeout=30).json()
        assert (described["type"], described["is_mixed_consumer_group"]) == ("CLASSIC", False)
        (member,) = requests.get(described["consumers"]["related"], timeout=30).json()["data"]
        member_url = f"{v3}/consumer-groups/{group}/consumers/{member['consumer_id']}"
        assert member["assignments"] == {"related": f"{member_url}/assignments"}
        (assignment,) = requests.get(member["assignments"]["related"], timeout=30).json()["data"]
        assert (assignment["kind"], assignment["topic_name"], assignment["partition_id"]) == (
            "KafkaConsumerAssignment",
            topic,
            0,
        )
        assert requests.get(assignment["metadata"]["self"], timeout=30).json() == assignment
        _refused(requests.get(f"{member_url}/assignments/{topic}/partitions/5", timeout=30), 404)
        lag = requests.get(assignment["lag"]["related"], timeout=30).json()
        assert (lag["kind"], lag["current_offset"], lag["log_end_offset"], lag["lag"]) == (
            "KafkaConsumerLag",
            1,
            4,
            3,
        )
        summary = requests.get(f"{v3}/consumer-groups/{group}/lag-summary", timeout=30).json()
        assert summary["max_lag_consumer"] == {"related": member_url}
    finally:
        requests.delete(base, timeout=30)
    # Once the member is gone the summary still links (to consumers/, as Confluent's does), never null.
    deadline = time.monotonic() + 30
    while True:
        summary = requests.get(f"{v3}/consumer-groups/{group}/lag-summary", timeout=30).json()
        if summary["max_lag_consumer_id"] == "" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert summary["max_lag_consumer"] == {"related": f"{v3}/consumer-groups/{group}/consumers/"}
    _refused(requests.get(f"{v3}/consumer-groups/{unique('nobody')}/lag-summary", timeout=30), 404)


def test_records_batch(v3: str, rest_proxy: RestGateway) -> None:
    topic = unique("batch")
    create_topic(rest_proxy.url, topic)
    entries = [
        {"id": "one", "value": {"type": "JSON", "data": {"n": 1}}},
        {"id": "two", "value": {"type": "BINARY", "data": "not base64!"}},
        {"id": "three", "key": {"type": "STRING", "data": "k"}, "value": {"type": "STRING", "data": "v"}},
    ]
    reply = requests.post(f"{v3}/topics/{topic}/records:batch", json={"entries": entries}, timeout=30)
    assert reply.status_code == 207, reply.text
    answered = reply.json()
    assert [(s["id"], s["offset"]) for s in answered["successes"]] == [("one", 0), ("three", 1)]
    ((failure),) = answered["failures"]
    assert (failure["id"], failure["error_code"]) == ("two", 400)
    for refused in (
        {"entries": []},
        {"entries": [entries[0], entries[0]]},
        {"entries": [{"id": str(n), "value": {"data": n}} for n in range(11)]},
        {"entries": [{"value": {"data": 1}}]},
    ):
        _refused(requests.post(f"{v3}/topics/{topic}/records:batch", json=refused, timeout=30), 422)
    _refused(requests.post(f"{v3}/topics/{topic}/records:batch", data="{", headers=JSON_BODY, timeout=30))
    assert (
        requests.get(f"{rest_proxy.url}/topics/{topic}/partitions/0/offsets", timeout=30).json()["end_offset"]
        == 2
    )


def test_acl_bodies_are_checked_before_the_cluster_is_asked(v3: str) -> None:
    acl = {
        "resource_type": "CLUSTER",
        "resource_name": "kafka-cluster",
        "pattern_type": "LITERAL",
        "principal": "User:bob",
        "host": "*",
        "operation": "DESCRIBE",
        "permission": "ALLOW",
    }
    for bad in ({**acl, "operation": "UNKNOWN"}, {**acl, "permission": "JUGGLE"}, "x"):
        _refused(requests.post(f"{v3}/acls:batch", json={"data": [acl, bad]}, timeout=30))
    _refused(requests.post(f"{v3}/acls:batch", data=json.dumps({"data": []}), headers=JSON_BODY, timeout=30))
