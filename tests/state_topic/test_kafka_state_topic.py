"""state_topic/kafka: a compacted topic replayed into a state machine, shared by several processes' worth
of readers, on the real broker."""

from __future__ import annotations

import asyncio

from confluent_kafka.admin import AdminClient, ConfigResource
from state_machines import Tally

from sluice.state_topic.kafka import KafkaStateTopic, StoreUnavailable


async def test_appends_are_read_back_and_replayed(bootstrap: str, topic_name: str) -> None:
    settings = {"bootstrap.servers": bootstrap}
    writer_state, reader_state = Tally(), Tally()
    writer = KafkaStateTopic(settings, topic_name, writer_state, replication_factor=1)
    reader = KafkaStateTopic(settings, topic_name, reader_state, replication_factor=1)
    await writer.start()
    await reader.start()
    assert len(writer_state.loaded_at) == 1 and len(reader_state.loaded_at) == 1
    try:
        last = await writer.append([(b"a", b"1"), (b"b", b"2"), (b"a", None)])
        # Read-your-writes: the writer's own machine has all three when append returns.
        assert writer_state.order == [b"a", b"b", b"a"] and writer_state.values == {b"a": None, b"b": b"2"}
        assert writer.applied == last + 1
        await reader.sync()  # another process catches up to everything written so far
        assert reader_state.values == writer_state.values
    finally:
        await writer.close()
        await reader.close()
    replayed = Tally()
    again = KafkaStateTopic(settings, topic_name, replayed, replication_factor=1)
    await again.start()
    await again.close()
    assert replayed.order == [b"a", b"b", b"a"]
    admin = AdminClient(settings)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    config = admin.describe_configs([resource])[resource].result(30)
    assert config["cleanup.policy"].value == "compact"


async def test_unreachable_kafka_is_a_bounded_error() -> None:
    from sluice.testing import free_port

    topic = KafkaStateTopic({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, "t", Tally(), timeout_s=0.5)
    started = asyncio.get_running_loop().time()
    try:
        await topic.start(start_timeout_s=1)
    except StoreUnavailable as exc:
        assert "Kafka" in str(exc) or "reach" in str(exc)
    else:
        raise AssertionError("started without a broker")
    assert asyncio.get_running_loop().time() - started < 15
