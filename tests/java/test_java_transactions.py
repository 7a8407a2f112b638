"""The Java client's transactional producer against sluice: abort, commit and zombie fencing, read back by
read_committed and read_uncommitted consumers (Java and librdkafka)."""

from __future__ import annotations

from java_driver import JavaClient

from sluice.client.wire import WireClient


def test_java_transactional_producer_commits_aborts_and_is_fenced(
    java: JavaClient, java_bootstrap: str
) -> None:
    topic = f"java-txn-{java.version}"
    java.call("create-topic", topic, 1)
    result = java.call("txn-round", topic, f"java-txn-{java.version}", 5)
    assert result["zombie"] == "ProducerFencedException"
    # The admin client's DescribeTransactions and ListTransactions (KIP-664) saw the open transaction.
    txn_id = f"java-txn-{java.version}"
    assert result["open"]["state"] == "Ongoing" and result["open"]["partitions"] == [f"{topic}-0"]
    assert result["open"]["timeout_ms"] == 60_000
    assert result["listed"][txn_id] == ["Ongoing", result["open"]["producer_id"]]
    with WireClient.connect(java_bootstrap) as client:
        cls = client.request_class("ListOffsets")
        request = cls(
            replica_id=-1,
            isolation_level=1,
            topics=[
                cls.ListOffsetsTopic(
                    name=topic, partitions=[cls.ListOffsetsPartition(partition_index=0, timestamp=-1)]
                )
            ],
        )
        end = client.call("ListOffsets", 7, request).topics[0].partitions[0].offset
    committed = java.call("consume", topic, 0, 0, end, "isolation.level=read_committed")
    assert [bytes.fromhex(r["value"]) for r in committed] == [f"committed{i}".encode() for i in range(5)]
    everything = java.call("consume", topic, 0, 0, end, "isolation.level=read_uncommitted")
    values = [bytes.fromhex(r["value"]) for r in everything]
    assert values == [f"aborted{i}".encode() for i in range(5)] + [
        f"committed{i}".encode() for i in range(5)
    ] + [b"zombie"]


def test_java_producer_recovers_after_the_broker_aborts_its_timed_out_transaction(
    java: JavaClient, java_bootstrap: str
) -> None:
    """KIP-360/KIP-588: the broker aborts a transaction past its timeout and bumps the epoch; the producer
    hears an abortable error, aborts (bumping its epoch through InitProducerId with its id and old epoch)
    and carries on with the same producer."""
    topic = f"java-txn-timeout-{java.version}"
    java.call("create-topic", topic, 1)
    result = java.call("txn-timeout-recover", topic, f"java-txn-timeout-{java.version}")
    assert result["first"] in ("InvalidProducerEpochException", "TransactionAbortableException"), result
    assert result["second"] == "committed", result
    committed = java.call("consume", topic, 0, 0, 4, "isolation.level=read_committed")
    assert [bytes.fromhex(r["value"]) for r in committed] == [b"recovered"]
