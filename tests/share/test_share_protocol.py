"""Share groups on the bare wire: what Kafka 4.3 answers, exactly, where a client library would hide it —
versions, session epochs, acknowledgements of records a member does not hold, group configs outside the
broker's bounds, group ids of another kind, the in-flight cap, RENEW and the record-limit acquire mode."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException
from share_helpers import (
    WireShareMember,
    acquired,
    partition_errors,
    produce,
    set_group_configs,
    share_config,
    topic_id,
)

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess

ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4


@pytest.fixture
def member(share_broker: BrokerProcess, topic_name: str) -> Iterator[WireShareMember]:
    """A member of group `<topic>-g` reading the topic from its start; 10 batches of 10 records there."""
    share_broker.create_topic(topic_name)
    set_group_configs(share_broker.bootstrap, f"{topic_name}-g", share_auto_offset_reset="earliest")
    produce(share_broker.bootstrap, topic_name, 100, per_batch=10)
    one = WireShareMember(share_broker.bootstrap, f"{topic_name}-g")
    assert one.join([topic_name]).error_code == ErrorCode.NONE
    one.tp = (topic_id(share_broker.bootstrap, topic_name), 0)  # type: ignore[attr-defined]
    yield one
    one.close()


def test_api_versions_lists_the_share_apis_as_kafka_4_3_serves_them(share_broker: BrokerProcess) -> None:
    with WireClient.connect(share_broker.bootstrap) as client:
        response = client.call("ApiVersions", 3, client.request_class("ApiVersions")(
            client_software_name="t", client_software_version="1"))
    served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert served[76] == (1, 1) and served[77] == (1, 1)
    assert served[78] == (1, 2) and served[79] == (1, 2)
    assert served[90] == (0, 1) and served[91] == (0, 0) and served[92] == (0, 0)
    assert served[2][1] == 11 and served[8][1] == 10 and served[9][1] == 10


def test_records_a_member_does_not_hold_are_refused_whole(member: WireShareMember,
                                                          share_broker: BrokerProcess) -> None:
    tp = member.tp  # type: ignore[attr-defined]
    got = acquired(member.fetch([tp], max_records=20))
    assert got[tp] == [(0, 19, 1)]
    other = WireShareMember(share_broker.bootstrap, member.group)
    assert acquired(other.fetch([tp], max_records=10))[tp] == [(20, 29, 1)]
    # Offsets 15-24: half held by another member. All or nothing: 15-19 stay acquired.
    answer = other.acknowledge({tp: [(15, 24, [ACCEPT])]})
    assert answer.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    answer = member.acknowledge({tp: [(500, 501, [ACCEPT])]})
    assert answer.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST  # past acquired records
    answer = member.acknowledge({tp: [(0, 19, [ACCEPT, REJECT])]})
    assert answer.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST  # neither one nor one each
    answer = member.acknowledge({tp: [(0, 19, [ACCEPT])]})
    assert answer.responses[0].partitions[0].error_code == ErrorCode.NONE
    assert other.acknowledge({tp: [(20, 29, [ACCEPT])]}).responses[0].partitions[0].error_code == ErrorCode.NONE
    other.close()


def test_share_sessions_answer_kafkas_session_errors(member: WireShareMember, share_broker: BrokerProcess) -> None:
    tp = member.tp  # type: ignore[attr-defined]
    assert member.fetch([tp], epoch=3).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert member.acknowledge({tp: [(0, 0, [ACCEPT])]}, epoch=0).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert member.fetch([tp], acks={tp: [(0, 0, [ACCEPT])]}, epoch=0).error_code == ErrorCode.INVALID_REQUEST
    assert member.fetch([tp], max_records=5).error_code == ErrorCode.NONE  # epoch 0 opens
    assert member.fetch([tp], epoch=7).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert member.fetch([tp], max_records=5).error_code == ErrorCode.NONE  # epoch 1, as the last answer left it
    bad = WireShareMember(share_broker.bootstrap, member.group, member_id="x" * 37)
    assert bad.fetch([tp]).error_code == ErrorCode.INVALID_REQUEST  # a member id is a UUID's text at most
    bad.close()
    # Closing the session (-1) gives back what the member held: another member gets it, counted.
    member.fetch([], epoch=-1)
    other = WireShareMember(share_broker.bootstrap, member.group)
    assert acquired(other.fetch([tp], max_records=10))[tp][0][2] == 2
    other.close()


@pytest.mark.parametrize(
    ("config", "value", "words"),
    [
        ("share.record.lock.duration.ms", "500", "Value must be at least 1000"),
        ("share.record.lock.duration.ms", "100000", "less than or equal to group.share.max.record.lock.duration.ms"),
        ("share.delivery.count.limit", "11", "less than or equal to group.share.max.delivery.count.limit"),
        ("share.partition.max.record.locks", "50", "Value must be at least 100"),
        ("share.renew.acknowledge.enable", "maybe", "either true or false"),
        ("share.auto.offset.reset", "none", "by_duration"),
        ("share.flavour", "x", "Unknown group config name"),
    ],
)
def test_group_configs_outside_the_brokers_bounds_are_refused(
    share_broker: BrokerProcess, config: str, value: str, words: str
) -> None:
    with pytest.raises(KafkaException) as refused:
        set_group_configs(share_broker.bootstrap, "bounds-g", **{config.replace(".", "_"): value})
    error = refused.value.args[0]
    assert error.code() == ErrorCode.INVALID_CONFIG and words in error.str()


def test_one_group_id_names_one_kind_of_group(share_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = share_broker.bootstrap
    share_broker.create_topic(topic_name)
    produce(bootstrap, topic_name, 1)
    classic = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic_name}-classic",
                        "auto.offset.reset": "earliest"})
    classic.subscribe([topic_name])
    assert classic.consume(1, 10)
    classic.commit(asynchronous=False)
    wire = WireShareMember(bootstrap, f"{topic_name}-classic")
    answer = wire.join([topic_name])
    assert answer.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "is not a share group" in answer.error_message
    classic.close()
    share = WireShareMember(bootstrap, f"{topic_name}-share")
    assert share.join([topic_name]).error_code == ErrorCode.NONE
    with WireClient.connect(bootstrap) as client:
        cls = client.request_class("JoinGroup")
        join = client.call("JoinGroup", 5, cls(
            group_id=f"{topic_name}-share", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            protocol_type="consumer", protocols=[cls.JoinGroupRequestProtocol(name="range", metadata=b"")]))
        assert join.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        cls = client.request_class("OffsetCommit")
        commit = client.call("OffsetCommit", 8, cls(group_id=f"{topic_name}-share", generation_id_or_member_epoch=-1,
                                                    member_id="", topics=[cls.OffsetCommitRequestTopic(
                                                        name=topic_name, partitions=[cls.OffsetCommitRequestPartition(
                                                            partition_index=0, committed_offset=1)])]))
    assert commit.topics[0].partitions[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    share.close()


def test_at_the_in_flight_cap_a_fetch_yields_nothing_until_records_complete(member: WireShareMember,
                                                                              share_broker: BrokerProcess,
                                                                              topic_name: str) -> None:
    tp = member.tp  # type: ignore[attr-defined]
    produce(share_broker.bootstrap, topic_name, 100, per_batch=10)  # 200 records in all
    set_group_configs(share_broker.bootstrap, member.group, share_partition_max_record_locks="100")
    first = member.fetch([tp], max_records=500)
    assert acquired(first)[tp] == [(0, 99, 1)] and first.error_code == ErrorCode.NONE
    started = time.monotonic()
    capped = member.fetch([tp], max_records=500, max_wait_ms=300)
    assert capped.error_code == ErrorCode.NONE and not acquired(capped)  # no error: just nothing
    assert time.monotonic() - started >= 0.25  # it waited, as a fetch with nothing to give does
    answer = member.fetch([tp], acks={tp: [(0, 49, [ACCEPT])]}, max_records=500)
    assert partition_errors(answer)[tp][1] == ErrorCode.NONE
    assert acquired(answer)[tp] == [(100, 149, 1)]


def test_renew_keeps_records_and_record_limit_mode_splits_batches(member: WireShareMember,
                                                                   share_broker: BrokerProcess) -> None:
    tp = member.tp  # type: ignore[attr-defined]
    set_group_configs(share_broker.bootstrap, member.group, share_record_lock_duration_ms="1000")
    got = member.fetch([tp], max_records=3, version=2, share_acquire_mode=1)
    assert acquired(got)[tp] == [(0, 2, 1)]  # exactly MaxRecords from a batch of 10
    assert got.acquisition_lock_timeout_ms == 1000
    for _ in range(3):  # kept past three lock durations by renewing
        time.sleep(0.5)
        renewed = member.acknowledge({tp: [(0, 2, [RENEW])]}, version=2, is_renew_ack=True)
        assert renewed.responses[0].partitions[0].error_code == ErrorCode.NONE
    v1 = member.acknowledge({tp: [(0, 2, [RENEW])]})
    assert v1.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST  # RENEW is v2's
    mixed = member.fetch([tp], acks={tp: [(0, 2, [RENEW])]}, version=2, is_renew_ack=True, max_records=5)
    assert mixed.error_code == ErrorCode.INVALID_REQUEST  # a renewing fetch fetches nothing
    set_group_configs(share_broker.bootstrap, member.group, share_renew_acknowledge_enable="false")
    off = member.acknowledge({tp: [(0, 2, [RENEW])]}, version=2, is_renew_ack=True)
    assert off.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    assert member.acknowledge({tp: [(0, 2, [ACCEPT])]}).responses[0].partitions[0].error_code == ErrorCode.NONE


def test_more_share_sessions_than_the_broker_keeps_are_refused(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("share-sessions")
    config = share_config(root, group_share_max_share_sessions=2, group_share_max_size=2)
    with BrokerProcess(root / "data", config=config) as small:
        topic = small.create_topic("sessions")
        tp = (topic_id(small.bootstrap, topic), 0)
        members = [WireShareMember(small.bootstrap, "sessions-g") for _ in range(3)]
        assert members[0].fetch([tp], max_wait_ms=0).error_code == ErrorCode.NONE
        assert members[1].fetch([tp], max_wait_ms=0).error_code == ErrorCode.NONE
        started = time.monotonic()
        refused = members[2].fetch([tp], max_wait_ms=300)
        assert refused.error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
        assert time.monotonic() - started >= 0.25  # held for the fetch's wait, so clients do not spin
        members[0].close()  # its connection goes, and its session with it
        time.sleep(0.2)
        assert members[2].fetch([tp], max_wait_ms=0).error_code == ErrorCode.NONE
        for one in members[1:]:
            one.close()


def test_list_offsets_v11_has_no_pending_upload_offset(share_broker: BrokerProcess, topic_name: str) -> None:
    share_broker.create_topic(topic_name)
    with WireClient.connect(share_broker.bootstrap) as client:
        cls = client.request_class("ListOffsets")
        response = client.call("ListOffsets", 11, cls(replica_id=-1, topics=[cls.ListOffsetsTopic(
            name=topic_name, partitions=[cls.ListOffsetsPartition(partition_index=0, timestamp=-6)])]))
        part = response.topics[0].partitions[0]
        assert (part.error_code, part.offset, part.timestamp) == (ErrorCode.NONE, -1, -1)
        old = client.call("ListOffsets", 10, cls(replica_id=-1, topics=[cls.ListOffsetsTopic(
            name=topic_name, partitions=[cls.ListOffsetsPartition(partition_index=0, timestamp=-6)])]))
        assert old.topics[0].partitions[0].error_code == ErrorCode.UNSUPPORTED_VERSION


def test_offset_commit_and_fetch_v10_name_topics_by_id(share_broker: BrokerProcess, topic_name: str) -> None:
    """KIP-848's v10: topics by id; an id no topic has is UNKNOWN_TOPIC_ID, per partition."""
    share_broker.create_topic(topic_name)
    tid = topic_id(share_broker.bootstrap, topic_name)
    nobody = uuid.UUID(int=12345)
    group = f"{topic_name}-v10"
    with WireClient.connect(share_broker.bootstrap) as client:
        commit_cls = client.request_class("OffsetCommit")
        commit = client.call("OffsetCommit", 10, commit_cls(
            group_id=group, generation_id_or_member_epoch=-1, member_id="",
            topics=[commit_cls.OffsetCommitRequestTopic(topic_id=t, partitions=[
                commit_cls.OffsetCommitRequestPartition(partition_index=0, committed_offset=7)]) for t in (tid, nobody)]))
        answers = {t.topic_id: t.partitions[0].error_code for t in commit.topics}
        assert answers == {tid: ErrorCode.NONE, nobody: ErrorCode.UNKNOWN_TOPIC_ID}
        fetch_cls = client.request_class("OffsetFetch")
        fetch = client.call("OffsetFetch", 10, fetch_cls(groups=[fetch_cls.OffsetFetchRequestGroup(
            group_id=group, topics=[fetch_cls.OffsetFetchRequestTopics(topic_id=t, partition_indexes=[0])
                                    for t in (tid, nobody)])]))
        got = {t.topic_id: (t.partitions[0].committed_offset, t.partitions[0].error_code)
               for t in fetch.groups[0].topics}
        assert got == {tid: (7, ErrorCode.NONE), nobody: (-1, ErrorCode.UNKNOWN_TOPIC_ID)}
        everything = client.call("OffsetFetch", 10, fetch_cls(groups=[fetch_cls.OffsetFetchRequestGroup(
            group_id=group, topics=None)]))
        assert [(t.topic_id, t.partitions[0].committed_offset) for t in everything.groups[0].topics] == [(tid, 7)]
