"""OffsetCommit, OffsetFetch, OffsetDelete, expiry and the admin reset."""

from __future__ import annotations

import pytest
from coordinator_driver import GROUP, Driver, consumer_protocols

from sluice.coordinator import CoordinatorConfig
from sluice.coordinator.messages import (
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitResult,
    OffsetCommitTopic,
    OffsetDelete,
    OffsetDeleteResult,
    OffsetDeleteTopic,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
    OffsetFetchTopic,
)
from sluice.coordinator.records import OffsetCommitKey, decode_key
from sluice.errors import ErrorCode, KafkaError


def commit(
    driver: Driver,
    offsets: dict[tuple[str, int], int],
    *,
    generation_id: int = -1,
    member_id: str = "",
    metadata: str | None = None,
    group_id: str = GROUP,
    group_instance_id: str | None = None,
) -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list[OffsetCommitPartition]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            OffsetCommitPartition(partition, offset, committed_leader_epoch=5, committed_metadata=metadata)
        )
    request = OffsetCommit(
        group_id,
        [OffsetCommitTopic(t, ps) for t, ps in topics.items()],
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
    )
    result = driver.call("offset_commit", request)
    assert isinstance(result, OffsetCommitResult)
    return {(t.name, p.partition_index): p.error_code for t in result.topics for p in t.partitions}


def fetch(
    driver: Driver, topics: dict[str, list[int]] | None, group_id: str = GROUP
) -> dict[tuple[str, int], tuple[int, str | None, int]]:
    wanted = None if topics is None else [OffsetFetchTopic(t, ps) for t, ps in topics.items()]
    result = driver.call("offset_fetch", OffsetFetch([OffsetFetchGroup(group_id, wanted)]))
    assert isinstance(result, OffsetFetchResult)
    return {
        (t.name, p.partition_index): (p.committed_offset, p.metadata, p.committed_leader_epoch)
        for t in result.groups[0].topics
        for p in t.partitions
    }


def delete(driver: Driver, topics: dict[str, list[int]]) -> OffsetDeleteResult:
    request = OffsetDelete(GROUP, [OffsetDeleteTopic(t, ps) for t, ps in topics.items()])
    result = driver.call("offset_delete", request)
    assert isinstance(result, OffsetDeleteResult)
    return result


def test_simple_commit_without_a_group_creates_an_empty_group_and_fetch_returns_it() -> None:
    driver = Driver()
    assert commit(driver, {("orders", 0): 42, ("orders", 1): 7}) == {
        ("orders", 0): ErrorCode.NONE,
        ("orders", 1): ErrorCode.NONE,
    }
    assert driver.state() == "Empty"
    fetched = fetch(driver, {"orders": [0, 1, 2]})
    assert fetched[("orders", 0)] == (42, "", 5)
    assert fetched[("orders", 1)] == (7, "", 5)
    assert fetched[("orders", 2)] == (-1, "", -1), "never committed"
    assert len(driver.records) == 2


def test_fetch_without_topics_returns_everything_committed() -> None:
    driver = Driver()
    commit(driver, {("b", 1): 1, ("a", 0): 2})
    assert set(fetch(driver, None)) == {("a", 0), ("b", 1)}


def test_fetch_of_an_unknown_group_is_not_an_error() -> None:
    driver = Driver()
    assert fetch(driver, {"t": [0]}, group_id="nobody") == {("t", 0): (-1, "", -1)}
    assert fetch(driver, None, group_id="nobody") == {}


def test_fetch_for_several_groups_answers_each() -> None:
    driver = Driver()
    commit(driver, {("t", 0): 1}, group_id="one")
    commit(driver, {("t", 0): 2}, group_id="two")
    request = OffsetFetch([OffsetFetchGroup("one", None), OffsetFetchGroup("two", None)], require_stable=True)
    result = driver.call("offset_fetch", request)
    assert isinstance(result, OffsetFetchResult)
    offsets = [(g.group_id, g.topics[0].partitions[0].committed_offset) for g in result.groups]
    assert offsets == [("one", 1), ("two", 2)]


def test_commit_metadata_is_kept_exactly() -> None:
    driver = Driver()
    odd = "  tabs\tnewlines\n ünïcødé 🚀 "
    commit(driver, {("t", 0): 1}, metadata=odd)
    assert fetch(driver, {"t": [0]})[("t", 0)][1] == odd


def test_metadata_over_the_limit_fails_only_that_commit() -> None:
    driver = Driver()
    assert commit(driver, {("t", 0): 1}, metadata="x" * 4096) == {("t", 0): ErrorCode.NONE}
    assert commit(driver, {("t", 0): 2}, metadata="x" * 4097) == {
        ("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE
    }
    assert fetch(driver, {"t": [0]})[("t", 0)][0] == 1


def test_member_commit_validates_generation_and_member() -> None:
    driver = Driver()
    ids = driver.stable_group("a")
    member = ids["a"]
    assert commit(driver, {("orders", 0): 5}, generation_id=1, member_id=member) == {
        ("orders", 0): ErrorCode.NONE
    }
    assert commit(driver, {("orders", 0): 6}, generation_id=0, member_id=member) == {
        ("orders", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert commit(driver, {("orders", 0): 6}, generation_id=1, member_id="ghost") == {
        ("orders", 0): ErrorCode.UNKNOWN_MEMBER_ID
    }
    assert commit(driver, {("orders", 0): 6}) == {("orders", 0): ErrorCode.UNKNOWN_MEMBER_ID}, (
        "no simple commits into an active group"
    )
    assert fetch(driver, {"orders": [0]})[("orders", 0)][0] == 5


def test_commit_with_a_generation_for_an_unknown_group_is_illegal_generation() -> None:
    driver = Driver()
    assert commit(driver, {("t", 0): 1}, generation_id=3, member_id="m") == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert driver.state() is None


def test_commit_between_join_and_sync_is_rebalance_in_progress() -> None:
    driver = Driver()
    member, _ = driver.join_with_member_id("a")
    assert driver.state() == "CompletingRebalance"
    assert commit(driver, {("t", 0): 1}, generation_id=1, member_id=member) == {
        ("t", 0): ErrorCode.REBALANCE_IN_PROGRESS
    }


def test_commit_of_the_old_generation_is_accepted_while_preparing_a_rebalance() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    driver.join(member_id=ids["a"], client_id="a", protocols=consumer_protocols("x"))
    assert driver.state() == "PreparingRebalance"
    # b has not heard of the rebalance yet; its commit for what it processed still counts.
    assert commit(driver, {("t", 0): 9}, generation_id=1, member_id=ids["b"]) == {("t", 0): ErrorCode.NONE}


def test_delete_offsets_of_an_empty_group_writes_tombstones() -> None:
    driver = Driver()
    commit(driver, {("t", 0): 1, ("t", 1): 2})
    result = delete(driver, {"t": [0]})
    assert result.error_code == ErrorCode.NONE
    assert [p.error_code for p in result.topics[0].partitions] == [ErrorCode.NONE]
    assert driver.records[-1].value is None
    assert fetch(driver, {"t": [0, 1]}) == {("t", 0): (-1, "", -1), ("t", 1): (2, "", 5)}


def test_delete_offsets_of_a_topic_the_group_consumes_is_refused() -> None:
    driver = Driver()
    ids = driver.stable_group("a")
    commit(driver, {("orders", 0): 1, ("old-topic", 0): 1}, generation_id=1, member_id=ids["a"])
    result = delete(driver, {"orders": [0], "old-topic": [0]})
    errors = {t.name: t.partitions[0].error_code for t in result.topics}
    assert errors == {"orders": ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, "old-topic": ErrorCode.NONE}
    assert set(fetch(driver, None)) == {("orders", 0)}


def test_delete_offsets_of_an_unknown_group_is_group_id_not_found() -> None:
    assert delete(Driver(), {"t": [0]}).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_reset_offsets_refuses_a_group_with_members() -> None:
    driver = Driver()
    driver.stable_group("a")
    with pytest.raises(KafkaError) as refused:
        driver.coordinator.reset_offsets(GROUP, {("orders", 0): 0}, driver.now)
    assert refused.value.code == ErrorCode.NON_EMPTY_GROUP
    assert "Stable" in str(refused.value)


def test_reset_offsets_of_an_empty_group_overwrites_them() -> None:
    driver = Driver()
    commit(driver, {("t", 0): 100})
    records = driver.coordinator.reset_offsets(GROUP, {("t", 0): 3, ("t", 1): 4}, driver.now)
    assert len(records) == 2
    assert {k: v[0] for k, v in fetch(driver, None).items()} == {("t", 0): 3, ("t", 1): 4}


def expiring_driver() -> Driver:
    """Offsets kept 60 s, checked every 10 s."""
    config = CoordinatorConfig(
        group_initial_rebalance_delay_ms=0,
        offsets_retention_ms=60_000,
        offsets_retention_check_interval_ms=10_000,
    )
    return Driver(config)


def test_offsets_of_an_abandoned_group_expire_after_retention_and_the_group_goes() -> None:
    driver = expiring_driver()
    commit(driver, {("t", 0): 1})
    driver.advance(50_000)
    assert driver.state() == "Empty"
    driver.advance(20_000)
    assert driver.state() is None
    tombstones = [r for r in driver.records if r.value is None]
    assert len(tombstones) == 2, "one for the offset, one for the group"


def test_deleting_a_topic_tombstones_its_offsets_in_every_group_and_an_emptied_group_goes_later() -> None:
    driver = expiring_driver()
    ids = driver.stable_group("a")
    commit(driver, {("gone", 0): 5, ("gone", 1): 6, ("kept", 0): 7}, generation_id=1, member_id=ids["a"])
    commit(driver, {("gone", 1): 8}, group_id="only-gone")
    driver.records.clear()
    outcome = driver.coordinator.topics_deleted(["gone"], driver.now)
    tombstones = {decode_key(r.key) for r in outcome.records if r.value is None}
    assert tombstones == {
        OffsetCommitKey(GROUP, "gone", 0),
        OffsetCommitKey(GROUP, "gone", 1),
        OffsetCommitKey("only-gone", "gone", 1),
    }
    assert len(outcome.records) == 3 and not outcome.replies
    assert {k: v[0] for k, v in fetch(driver, None).items()} == {("kept", 0): 7}
    assert fetch(driver, None, group_id="only-gone") == {}
    # As in Kafka, the group left Empty without offsets is not deleted with the topic, but at the next check.
    assert driver.state("only-gone") == "Empty"
    driver.advance(10_000)
    assert driver.state("only-gone") is None
    assert {k: v[0] for k, v in fetch(driver, None).items()} == {("kept", 0): 7}
    assert not driver.coordinator.topics_deleted(["gone", "never-there"], driver.now).records


def test_offsets_of_a_stable_group_do_not_expire_while_subscribed() -> None:
    driver = expiring_driver()
    ids = driver.stable_group("a")
    commit(driver, {("orders", 0): 1, ("gone", 0): 1}, generation_id=1, member_id=ids["a"])
    for _ in range(10):
        driver.advance(9_000)
        driver.heartbeat(ids["a"], 1)
    assert set(fetch(driver, None)) == {("orders", 0)}


def test_generation_minus_one_commits_into_an_empty_group_whatever_the_member_id() -> None:
    driver = Driver()
    commit(driver, {("t", 0): 1})
    assert commit(driver, {("t", 0): 2}, member_id="admin-tool") == {("t", 0): ErrorCode.NONE}
    assert fetch(driver, {"t": [0]})[("t", 0)][0] == 2
