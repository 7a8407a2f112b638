"""The pure transaction coordinator: state transitions, fencing, timeouts, expiry and crash recovery."""

from __future__ import annotations

from sluice.coordinator.transaction_log import decode_value, state_key
from sluice.coordinator.transactions import PendingOffset, TransactionCoordinator, TxnConfig, TxnState
from sluice.errors import ErrorCode


def coordinator(**config: int) -> TransactionCoordinator:
    return TransactionCoordinator(TxnConfig(**config))


def started(tc: TransactionCoordinator, txn: str = "t") -> tuple[int, int]:
    out = tc.init_producer_id(txn, 60_000, -1, -1, 0, new_producer_id=100)
    assert out.error == ErrorCode.NONE
    assert (
        tc.add_partitions(txn, out.producer_id, out.epoch, [("a", 0), ("b", 1)], 10).error == ErrorCode.NONE
    )
    return out.producer_id, out.epoch


def test_commit_prepares_before_markers_and_completes_after() -> None:
    tc = coordinator()
    pid, epoch = started(tc)
    out = tc.end_txn("t", pid, epoch, True, 20)
    assert out.error == ErrorCode.NONE
    assert [m.partitions for m in out.markers] == [[("a", 0), ("b", 1)]]
    assert out.markers[0].commit and out.markers[0].epoch == epoch
    prepared, completed = (
        decode_value("t", value or b"")[0].state for value in (out.prepare[0][1], out.records[-1][1])
    )
    assert (prepared, completed) == (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
    assert tc.txns["t"].state is TxnState.COMPLETE_COMMIT
    # A retry of the same EndTxn answers the same; the opposite decision is refused.
    assert tc.end_txn("t", pid, epoch, True, 21).error == ErrorCode.NONE
    assert tc.end_txn("t", pid, epoch, False, 21).error == ErrorCode.INVALID_TXN_STATE


def test_reinit_fences_the_old_epoch_and_aborts_its_transaction() -> None:
    tc = coordinator()
    pid, epoch = started(tc)
    out = tc.init_producer_id("t", 60_000, -1, -1, 30, new_producer_id=200)
    assert out.producer_id == pid and out.epoch > epoch
    assert [(m.commit, m.partitions) for m in out.markers] == [(False, [("a", 0), ("b", 1)])]
    # A produce with the old epoch: abortable INVALID_PRODUCER_EPOCH as in Kafka 2.7+; EndTxn is fatal.
    assert tc.verify(pid, epoch, "a", 0) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert tc.end_txn("t", pid, epoch, True, 31).error == ErrorCode.PRODUCER_FENCED
    assert tc.add_partitions("t", pid, epoch, [("a", 0)], 31, fenced_code=False).error == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )


def test_timeout_aborts_and_the_producer_recovers_with_kip_360() -> None:
    tc = coordinator()
    pid, epoch = started(tc)
    assert tc.next_deadline() == 10 + 60_000
    out = tc.tick(10 + 60_000, new_producer_id=300)
    assert [m.commit for m in out.markers] == [False]
    assert tc.txns["t"].state is TxnState.COMPLETE_ABORT
    assert tc.end_txn("t", pid, epoch, True, 70_000).error == ErrorCode.PRODUCER_FENCED
    again = tc.init_producer_id("t", 60_000, pid, epoch, 70_001, new_producer_id=400)
    assert again.error == ErrorCode.NONE and again.producer_id == pid and again.epoch > epoch
    # Someone else's id is not recovered.
    assert (
        tc.init_producer_id("t", 60_000, 999, 0, 70_002, 500).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )


def test_timeout_above_the_maximum_is_refused() -> None:
    tc = coordinator(max_timeout_ms=1000)
    assert tc.init_producer_id("t", 1001, -1, -1, 0, 1).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert tc.init_producer_id("t", 1000, -1, -1, 0, 1).error == ErrorCode.NONE


def test_state_survives_load_and_a_prepared_commit_is_finished() -> None:
    tc = coordinator()
    pid, epoch = started(tc)
    tc.add_offsets("t", pid, epoch, "g", 11)
    assert tc.txn_offset_commit("t", pid, epoch, "g", {("a", 0): PendingOffset(5, -1, "")}, 12).error == 0
    out = tc.end_txn("t", pid, epoch, True, 20)
    # A crash after the prepare record only: the log holds everything up to it.
    log = [r for r in tc_records(tc, pid)] + out.prepare
    fresh = coordinator()
    for key, value in log:
        fresh.apply(key, value)
    assert fresh.loaded(100) == []
    assert fresh.txns["t"].state is TxnState.PREPARE_COMMIT
    recovered = fresh.recover(100)
    assert [(m.commit, m.partitions) for m in recovered.markers] == [(True, [("a", 0), ("b", 1)])]
    assert recovered.markers[0].offsets == {"g": {("a", 0): PendingOffset(5, -1, "")}}
    assert fresh.txns["t"].state is TxnState.COMPLETE_COMMIT


def tc_records(tc: TransactionCoordinator, pid: int) -> list[tuple[bytes, bytes | None]]:
    # What init + add partitions persisted, rebuilt by replaying on a fresh coordinator.
    replay = coordinator()
    first = replay.init_producer_id("t", 60_000, -1, -1, 0, new_producer_id=pid)
    second = replay.add_partitions("t", pid, first.epoch, [("a", 0), ("b", 1)], 10)
    third = replay.add_offsets("t", pid, first.epoch, "g", 11)
    return first.records + second.records + third.records


def test_idle_transactional_ids_expire() -> None:
    tc = coordinator(id_expiration_ms=1000, expiration_check_interval_ms=100)
    tc.init_producer_id("t", 500, -1, -1, 0, 1)
    tc.tick(0, 2)
    assert tc.tick(100, 2).records == []
    out = tc.tick(1200, 2)
    assert out.records == [(state_key("t"), None)] and "t" not in tc.txns
