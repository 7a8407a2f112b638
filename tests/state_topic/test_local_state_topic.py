"""state_topic/local: a compacted topic of the broker's own log replayed into a state machine, on an
in-process broker (no sockets: the backend is called as the broker's services call it)."""

from __future__ import annotations

from state_machines import Tally

from sluice.broker.broker import Broker
from sluice.broker.config import BrokerConfig
from sluice.state_topic.local import LocalStateTopic
from sluice.storage.memory import MemoryStorage

NAME = "__test_state"


def test_appends_are_replayed_into_a_fresh_machine_in_order() -> None:
    broker = Broker(BrokerConfig(data_dir=None), MemoryStorage())
    first = Tally()
    topic = LocalStateTopic.open(broker, NAME, 1 << 20, first)
    assert topic.load(first, 10) == 0 and first.loaded_at == [10]
    topic.append([(b"a", b"1"), (b"b", b"2"), (b"a", None)], 20)
    # The machine already holds what it appended: everything below `applied` is in it.
    assert topic.applied == 3
    assert broker.storage.topic(NAME).config.compacts  # type: ignore[union-attr]
    again = Tally()
    assert topic.load(again, 30) == 3
    assert again.order == [b"a", b"b", b"a"] and again.values == {b"a": None, b"b": b"2"}
    assert again.loaded_at == [30] and topic.machine is again


def test_loaded_records_are_appended_and_a_bad_record_is_skipped() -> None:
    broker = Broker(BrokerConfig(data_dir=None), MemoryStorage())
    topic = LocalStateTopic.open(broker, NAME, 1 << 20, Tally())
    topic.append([(b"old", b"x"), (b"bad", b"y"), (b"c", b"z")], 1)
    # `loaded` asks for a rewrite (as the transaction coordinator migrates an old layout): it is appended.
    migrating = Tally(migration=[(b"old", None), (b"new", b"x")], poison=b"bad")
    assert topic.load(migrating, 2) == 3
    assert migrating.order == [b"old", b"c"], "the record apply raised on is skipped, the replay goes on"
    assert topic.applied == 5
    replayed = Tally()
    topic.load(replayed, 3)
    assert replayed.order == [b"old", b"bad", b"c", b"old", b"new"]
    assert replayed.values[b"old"] is None and replayed.values[b"new"] == b"x"
