"""Bad transactional requests on the wire: each gets Kafka's error code at once, nothing hangs."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer
from tests.transactions.conftest import consume_all, create_topic

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.records import Record, encode_batch


def init(client: WireClient, txn_id: str, timeout_ms: int = 60_000) -> Any:
    cls = client.request_class("InitProducerId")
    return client.call("InitProducerId", 4, cls(transactional_id=txn_id, transaction_timeout_ms=timeout_ms))


def add_partitions(
    client: WireClient, txn_id: str, pid: int, epoch: int, topic: str, version: int = 3
) -> int:
    cls = client.request_class("AddPartitionsToTxn")
    request = cls(
        v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[cls.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
    )
    response = client.call("AddPartitionsToTxn", version, request)
    return response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def end_txn(client: WireClient, txn_id: str, pid: int, epoch: int, commit: bool = True) -> int:
    cls = client.request_class("EndTxn")
    request = cls(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit)
    return client.call("EndTxn", 3, request).error_code


def txn_produce(client: WireClient, txn_id: str, topic: str, pid: int, epoch: int, seq: int = 0) -> int:
    records = encode_batch(
        [Record(0, 0, None, b"v", [])],
        base_timestamp=int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    cls = client.request_class("Produce")
    request = cls(
        transactional_id=txn_id,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            cls.TopicProduceData(
                name=topic, partition_data=[cls.PartitionProduceData(index=0, records=records)]
            )
        ],
    )
    return client.call("Produce", 9, request).responses[0].partition_responses[0].error_code


def test_end_txn_for_an_unknown_transactional_id(bootstrap: str, txn_id: str) -> None:
    with WireClient.connect(bootstrap, timeout=10) as client:
        assert end_txn(client, txn_id, 12345, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_end_txn_with_no_open_transaction(bootstrap: str, txn_id: str) -> None:
    with WireClient.connect(bootstrap, timeout=10) as client:
        got = init(client, txn_id)
        assert got.error_code == 0
        assert end_txn(client, txn_id, got.producer_id, got.producer_epoch) == ErrorCode.INVALID_TXN_STATE


def test_add_partitions_with_a_stale_epoch_is_fenced(bootstrap: str, topic_name: str, txn_id: str) -> None:
    create_topic(bootstrap, topic_name)
    with WireClient.connect(bootstrap, timeout=10) as client:
        first = init(client, txn_id)
        second = init(client, txn_id)
        assert second.producer_id == first.producer_id and second.producer_epoch > first.producer_epoch
        assert add_partitions(client, txn_id, first.producer_id, first.producer_epoch, topic_name) == (
            ErrorCode.PRODUCER_FENCED
        )
        # Before v2 there was no PRODUCER_FENCED: older clients hear INVALID_PRODUCER_EPOCH.
        assert add_partitions(client, txn_id, first.producer_id, first.producer_epoch, topic_name, 1) == (
            ErrorCode.INVALID_PRODUCER_EPOCH
        )
        assert add_partitions(
            client, txn_id, second.producer_id, second.producer_epoch, "no-such-" + topic_name
        ) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        assert add_partitions(client, txn_id, second.producer_id, second.producer_epoch, topic_name) == 0


def test_produce_to_a_partition_outside_the_transaction(bootstrap: str, topic_name: str, txn_id: str) -> None:
    create_topic(bootstrap, topic_name)
    with WireClient.connect(bootstrap, timeout=10) as client:
        got = init(client, txn_id)
        pid, epoch = got.producer_id, got.producer_epoch
        assert txn_produce(client, txn_id, topic_name, pid, epoch) == ErrorCode.INVALID_TXN_STATE
        assert add_partitions(client, txn_id, pid, epoch, topic_name) == 0
        assert txn_produce(client, txn_id, topic_name, pid, epoch) == 0
        assert txn_produce(client, txn_id, topic_name, pid, epoch - 1 if epoch else 5, 1) in (
            ErrorCode.PRODUCER_FENCED,
            ErrorCode.INVALID_PRODUCER_EPOCH,
        )
        assert end_txn(client, txn_id, pid, epoch, commit=False) == 0
        # The transaction ended: the partition must be added again before the next transactional write.
        assert txn_produce(client, txn_id, topic_name, pid, epoch, 1) == ErrorCode.INVALID_TXN_STATE


def test_transaction_timeout_above_the_maximum(bootstrap: str, txn_id: str) -> None:
    with WireClient.connect(bootstrap, timeout=10) as client:
        assert init(client, txn_id, timeout_ms=900_001).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert init(client, txn_id, timeout_ms=0).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert init(client, txn_id, timeout_ms=900_000).error_code == 0


def test_keep_prepared_and_two_phase_commit_flags_are_refused_with_a_clear_error(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    """InitProducerId v6 (KIP-939): sluice offers no two-phase commit, so KeepPreparedTxn is answered
    UNSUPPORTED_VERSION and Enable2Pc TRANSACTIONAL_ID_AUTHORIZATION_FAILED (Kafka's answers while 2PC is
    off); neither touches the open transaction, and v6 without the flags works as v5."""
    create_topic(bootstrap, topic_name)

    def init_v6(client: WireClient, **flags: Any) -> Any:
        cls = client.request_class("InitProducerId")
        return client.call(
            "InitProducerId", 6, cls(transactional_id=txn_id, transaction_timeout_ms=60_000, **flags)
        )

    with WireClient.connect(bootstrap, timeout=10) as client:
        plain = init_v6(client)
        assert plain.error_code == 0 and plain.producer_id >= 0
        assert (plain.ongoing_txn_producer_id, plain.ongoing_txn_producer_epoch) == (-1, -1)
        pid, epoch = plain.producer_id, plain.producer_epoch
        assert add_partitions(client, txn_id, pid, epoch, topic_name) == ErrorCode.NONE
        assert txn_produce(client, txn_id, topic_name, pid, epoch) == ErrorCode.NONE

        kept = init_v6(client, keep_prepared_txn=True)
        assert kept.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert (kept.producer_id, kept.producer_epoch) == (-1, -1)
        two_phase = init_v6(client, enable2_pc=True)
        assert two_phase.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # The refused calls fenced nobody: the open transaction commits under its own epoch.
        assert end_txn(client, txn_id, pid, epoch) == ErrorCode.NONE
    assert consume_all(bootstrap, topic_name, "read_committed", expect=1) == [b"v"]


def test_txn_offset_commit_from_a_fenced_member(
    bootstrap: str, topic_name: str, txn_id: str, group_name: str
) -> None:
    create_topic(bootstrap, topic_name)
    member = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group_name, "auto.offset.reset": "earliest"}
    )
    member.subscribe([topic_name])
    deadline = time.monotonic() + 20
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.2)
    assert member.assignment()
    try:
        with WireClient.connect(bootstrap, timeout=10) as client:
            got = init(client, txn_id)
            pid, epoch = got.producer_id, got.producer_epoch
            cls = client.request_class("AddOffsetsToTxn")
            add = cls(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, group_id=group_name)
            assert client.call("AddOffsetsToTxn", 3, add).error_code == 0
            cls = client.request_class("TxnOffsetCommit")

            def commit(member_id: str, generation: int, txn: str = txn_id) -> int:
                request = cls(
                    transactional_id=txn,
                    group_id=group_name,
                    producer_id=pid,
                    producer_epoch=epoch,
                    generation_id=generation,
                    member_id=member_id,
                    topics=[
                        cls.TxnOffsetCommitRequestTopic(
                            name=topic_name,
                            partitions=[
                                cls.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                            ],
                        )
                    ],
                )
                return client.call("TxnOffsetCommit", 3, request).topics[0].partitions[0].error_code

            # A member the group no longer has (a zombie from before a rebalance) is fenced.
            assert commit("consumer-gone-1234", 1) == ErrorCode.UNKNOWN_MEMBER_ID
            # A producer that never added this group to its transaction may not commit into it.
            other = init(client, txn_id + "-other")
            request = cls(
                transactional_id=txn_id + "-other",
                group_id=group_name,
                producer_id=other.producer_id,
                producer_epoch=other.producer_epoch,
                topics=[
                    cls.TxnOffsetCommitRequestTopic(
                        name=topic_name,
                        partitions=[
                            cls.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                        ],
                    )
                ],
            )
            assert client.call("TxnOffsetCommit", 2, request).topics[0].partitions[0].error_code == (
                ErrorCode.INVALID_TXN_STATE
            )
            assert end_txn(client, txn_id, pid, epoch, commit=False) == 0
    finally:
        member.close()


def test_batched_verify_only_add_partitions_answers_per_transaction(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    create_topic(bootstrap, topic_name)
    with WireClient.connect(bootstrap, timeout=10) as client:
        got = init(client, txn_id)
        pid, epoch = got.producer_id, got.producer_epoch
        assert add_partitions(client, txn_id, pid, epoch, topic_name) == 0
        cls = client.request_class("AddPartitionsToTxn")

        def verify(partition: int, txn: str = txn_id, producer_epoch: int = epoch) -> int:
            request = cls(
                transactions=[
                    cls.AddPartitionsToTxnTransaction(
                        transactional_id=txn,
                        producer_id=pid,
                        producer_epoch=producer_epoch,
                        verify_only=True,
                        topics=[cls.AddPartitionsToTxnTopic(name=topic_name, partitions=[partition])],
                    )
                ]
            )
            response = client.call("AddPartitionsToTxn", 4, request)
            assert response.error_code == 0
            result = response.results_by_transaction[0]
            assert result.transactional_id == txn
            return result.topic_results[0].results_by_partition[0].partition_error_code

        assert verify(0) == 0
        assert verify(0, producer_epoch=epoch + 1) == ErrorCode.PRODUCER_FENCED
        assert verify(0, txn=txn_id + "-unknown") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert end_txn(client, txn_id, pid, epoch, commit=False) == 0
        assert verify(0) == ErrorCode.INVALID_TXN_STATE  # verifying never adds


def test_list_transactions_filters_and_refuses_a_huge_pattern(bootstrap: str, txn_id: str) -> None:
    with WireClient.connect(bootstrap, timeout=10) as client:
        assert init(client, txn_id).error_code == 0
        cls = client.request_class("ListTransactions")
        found = client.call(
            "ListTransactions",
            2,
            cls(transactional_id_pattern=f"{txn_id}.*", state_filters=["Empty", "NoSuchState"]),
        )
        assert found.error_code == 0 and found.unknown_state_filters == ["NoSuchState"]
        assert [t.transactional_id for t in found.transaction_states] == [txn_id]
        huge = client.call("ListTransactions", 2, cls(transactional_id_pattern="a" * 5000))
        assert huge.error_code == ErrorCode.INVALID_REQUEST
