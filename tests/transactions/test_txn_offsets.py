"""Offsets committed inside a transaction: invisible until it commits, UNSTABLE_OFFSET_COMMIT for
require_stable readers meanwhile, gone if it aborts."""

from __future__ import annotations

from tests.transactions.conftest import create_topic
from tests.transactions.test_txn_bad_input import end_txn, init

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode


def fetch_offset(client: WireClient, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    cls = client.request_class("OffsetFetch")
    request = cls(
        group_id=group,
        require_stable=require_stable,
        topics=[cls.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])],
    )
    part = client.call("OffsetFetch", 7, request).topics[0].partitions[0]
    return part.committed_offset, part.error_code


def test_transactional_offsets_become_visible_only_on_commit(
    bootstrap: str, topic_name: str, txn_id: str, group_name: str
) -> None:
    create_topic(bootstrap, topic_name)
    with WireClient.connect(bootstrap, timeout=10) as client:
        for commit, offset in ((False, 7), (True, 9)):
            got = init(client, txn_id)
            pid, epoch = got.producer_id, got.producer_epoch
            add = client.request_class("AddOffsetsToTxn")(
                transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, group_id=group_name
            )
            assert client.call("AddOffsetsToTxn", 3, add).error_code == 0
            cls = client.request_class("TxnOffsetCommit")
            request = cls(
                transactional_id=txn_id,
                group_id=group_name,
                producer_id=pid,
                producer_epoch=epoch,
                topics=[
                    cls.TxnOffsetCommitRequestTopic(
                        name=topic_name,
                        partitions=[
                            cls.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset)
                        ],
                    )
                ],
            )
            assert client.call("TxnOffsetCommit", 3, request).topics[0].partitions[0].error_code == 0
            # Neither this pending commit nor the aborted one before it is visible.
            assert fetch_offset(client, group_name, topic_name, False) == (-1, 0)
            assert fetch_offset(client, group_name, topic_name, True) == (
                -1,
                ErrorCode.UNSTABLE_OFFSET_COMMIT,
            )
            assert end_txn(client, txn_id, pid, epoch, commit=commit) == 0
            assert fetch_offset(client, group_name, topic_name, True) == (9 if commit else -1, 0)
