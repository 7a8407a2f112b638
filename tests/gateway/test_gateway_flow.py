"""Flow control of the consume path: buffering, pausing and resuming partitions, range acks and batches."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from confluent_kafka import Producer
from gateway_helpers import unique_group

from sluice.gateway import Gateway, flow
from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc


def fill(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for index in range(count):
        producer.produce(topic, b"%d" % index, partition=index % partitions)
    assert producer.flush(30) == 0


async def consume_batches(
    sluice: pb_grpc.SluiceGatewayStub, topic: str, group: str, total: int, within: float = 60.0
) -> tuple[list[tuple[int, int]], float]:
    """ConsumeBatch until `total` messages came, acking each batch with the next call.

    Returns (partition, offset) in the order handed out and the seconds from the first batch to the last.
    """
    got: list[tuple[int, int]] = []
    acks: list[pb.PartitionOffsetRef] = []
    first_at = 0.0
    deadline = time.monotonic() + within
    while len(got) < total and time.monotonic() < deadline:
        try:
            reply = await sluice.ConsumeBatch(
                pb.ConsBatchRq(topic=topic, group=group, acks=acks, max_messages=200, wait_ms=1000)
            )
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND
            acks = []
            continue
        if not got:
            first_at = time.monotonic()
        got.extend((m.partition, m.offset) for m in reply.messages)
        acks = [pb.PartitionOffsetRef(partition=m.partition, offset=m.offset) for m in reply.messages]
    return got, time.monotonic() - first_at


async def take_batches(
    sluice: pb_grpc.SluiceGatewayStub,
    topic: str,
    group: str,
    count: int,
    *,
    max_messages: int | None = None,
    within: float = 30.0,
) -> list[pb.ConsRs]:
    """ConsumeBatch without acking until at least `count` messages came (or `within` seconds passed); a long
    poll that times out (NOT_FOUND) is retried. Each call asks for `max_messages`, by default what is missing."""
    got: list[pb.ConsRs] = []
    deadline = time.monotonic() + within
    while len(got) < count and time.monotonic() < deadline:
        wanted = max_messages if max_messages is not None else count - len(got)
        try:
            reply = await sluice.ConsumeBatch(
                pb.ConsBatchRq(topic=topic, group=group, max_messages=wanted, wait_ms=1000)
            )
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND
            continue
        got.extend(reply.messages)
    return got


async def committed_offsets(
    pixy: pb_grpc.KafkaPixyStub, topic: str, group: str, awaiting: list[int], within: float = 10.0
) -> list[int]:
    """The group's committed offsets (sorted), polled until they are `awaiting` or `within` s passed.

    Commits are periodic, so the offsets asked for arrive up to a commit interval late.
    """
    deadline = time.monotonic() + within
    while True:
        reply = await pixy.GetOffsets(pb.GetOffsetsRq(topic=topic, group=group))
        offsets = sorted(o.offset for o in reply.offsets)
        if offsets == awaiting or time.monotonic() >= deadline:
            return offsets
        await asyncio.sleep(0.1)


async def drain_through_a_small_buffer(
    kafka, make_gateway, monkeypatch: pytest.MonkeyPatch, hold_seconds: float
) -> tuple[Gateway, str, str, float]:
    """5,000 messages through a 50-message buffer by ConsumeBatch; (gateway, group, topic, seconds)."""
    monkeypatch.setattr(flow, "_BUFFER_HIGH_WATER", 50)
    monkeypatch.setattr(flow, "_HOLD_SECONDS", hold_seconds)
    gateway: Gateway = await make_gateway(max_pending_messages=1000)
    topic, group, total = kafka.create_topic(), unique_group(), 5000
    fill(kafka.bootstrap, topic, total)
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        got, seconds = await consume_batches(pb_grpc.SluiceGatewayStub(channel), topic, group, total)
    assert sorted(offset for _, offset in got) == list(range(total))
    return gateway, group, topic, seconds


async def test_resumed_partitions_fetch_again_at_once(
    kafka, make_gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No hold: the gateway pauses and resumes the partition every few hundred messages. librdkafka used
    # to notice each resume only about a second later; 5,000 messages are ~10 such cycles, so the old
    # stall would take ~10 s where a prompt resume takes well under one.
    _, _, _, seconds = await drain_through_a_small_buffer(kafka, make_gateway, monkeypatch, hold_seconds=0.0)
    assert seconds < 5.0, f"5000 messages took {seconds:.1f} s: resumed partitions stall"


def pauses(gateway: Gateway, group: str, topic: str) -> float:
    sample = gateway.service.metrics.registry.get_sample_value(
        "sluice_gateway_partition_pauses_total", {"cluster": "default", "group": group, "topic": topic}
    )
    return sample or 0.0


async def test_callers_draining_the_buffer_hold_fetching_without_pausing(
    kafka, make_gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a 50-message buffer, 5,000 messages reach the high-water mark ~100 times. Pausing there made
    # librdkafka drop and fetch again what it had prefetched each time; a caller taking steadily must only
    # hold the fetching. (A stall of the test process past the hold may still pause once or twice.)
    gateway, group, topic, _ = await drain_through_a_small_buffer(
        kafka, make_gateway, monkeypatch, hold_seconds=0.5
    )
    assert pauses(gateway, group, topic) <= 3


async def test_a_full_buffer_nobody_takes_from_is_paused_then_resumed(
    kafka, make_gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flow, "_BUFFER_HIGH_WATER", 50)
    gateway: Gateway = await make_gateway(max_pending_messages=1000)
    topic, group, total = kafka.create_topic(), unique_group(), 2000
    fill(kafka.bootstrap, topic, total)
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        sluice = pb_grpc.SluiceGatewayStub(channel)
        first = await take_batches(sluice, topic, group, 1, max_messages=1)
        deadline = time.monotonic() + 10
        while pauses(gateway, group, topic) < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert pauses(gateway, group, topic) >= 1, "a buffer nobody drains must end in a pause"
        rest, _ = await consume_batches(sluice, topic, group, total - 1)
    offsets = sorted([m.offset for m in first] + [offset for _, offset in rest])
    assert offsets == list(range(total))


async def test_batch_acks_as_offset_ranges_commit_and_reject_what_was_never_handed_out(
    kafka, make_gateway
) -> None:
    gateway: Gateway = await make_gateway()
    topic, group = kafka.create_topic(partitions=2), unique_group()
    fill(kafka.bootstrap, topic, 40, partitions=2)
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        pixy, sluice = pb_grpc.KafkaPixyStub(channel), pb_grpc.SluiceGatewayStub(channel)
        got = await take_batches(sluice, topic, group, 30)
        handed = {(m.partition, m.offset) for m in got}
        assert len(handed) == 30
        # One range per partition covers what was handed out, plus offsets 100-109 nobody saw: those are
        # refused, the rest is acknowledged all the same.
        ranges = [
            pb.OffsetRange(partition=p, begin=0, end=1 + max(o for q, o in handed if q == p)) for p in (0, 1)
        ]
        bogus = pb.OffsetRange(partition=0, begin=100, end=110)
        error = await _status(
            sluice.ConsumeBatch(
                pb.ConsBatchRq(topic=topic, group=group, ack_ranges=[*ranges, bogus], wait_ms=200)
            )
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "partition=0 offset=100" in (error.details() or "")
        # An inverted range is malformed.
        error = await _status(
            sluice.ConsumeBatch(
                pb.ConsBatchRq(
                    topic=topic, group=group, ack_ranges=[pb.OffsetRange(partition=0, begin=5, end=5)]
                )
            )
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        # The ten messages not handed out yet come next; the acked thirty never come back.
        rest = await take_batches(sluice, topic, group, 10, max_messages=50)
        assert not handed & {(m.partition, m.offset) for m in rest}
        assert len(rest) == 10
        tail = [pb.OffsetRange(partition=m.partition, begin=m.offset, end=m.offset + 1) for m in rest]
        error = await _status(
            sluice.ConsumeBatch(pb.ConsBatchRq(topic=topic, group=group, ack_ranges=tail, wait_ms=200))
        )
        assert error.code() == grpc.StatusCode.NOT_FOUND  # acked, and nothing left to hand out

        assert await committed_offsets(pixy, topic, group, awaiting=[20, 20]) == [20, 20]


async def test_batch_callers_have_their_own_pending_limit(kafka, make_gateway) -> None:
    # kafka-pixy's max_pending_messages still holds ConsumeNAck back; ConsumeBatch may hold more.
    gateway: Gateway = await make_gateway(max_pending_messages=2, max_pending_batch_messages=6)
    topic, group = kafka.create_topic(), unique_group()
    fill(kafka.bootstrap, topic, 10)
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        pixy, sluice = pb_grpc.KafkaPixyStub(channel), pb_grpc.SluiceGatewayStub(channel)
        got = await take_batches(sluice, topic, group, 6, max_messages=10)
        assert [m.offset for m in got] == list(range(6))
        # Six un-acked: the batch limit is reached, and ConsumeNAck's limit of two long since.
        error = await _status(
            sluice.ConsumeBatch(pb.ConsBatchRq(topic=topic, group=group, max_messages=10, wait_ms=300))
        )
        assert error.code() == grpc.StatusCode.NOT_FOUND
        error = await _status(pixy.ConsumeNAck(pb.ConsNAckRq(topic=topic, group=group, no_ack=True)))
        assert error.code() == grpc.StatusCode.NOT_FOUND
        # Acking five leaves one pending and this call takes a second: ConsumeNAck's limit of two is
        # reached again, the batch limit of six is not.
        reply = await sluice.ConsumeBatch(
            pb.ConsBatchRq(
                topic=topic,
                group=group,
                ack_ranges=[pb.OffsetRange(partition=0, begin=0, end=5)],
                max_messages=1,
                wait_ms=1000,
            )
        )
        assert [m.offset for m in reply.messages] == [6]
        error = await _status(pixy.ConsumeNAck(pb.ConsNAckRq(topic=topic, group=group, no_ack=True)))
        assert error.code() == grpc.StatusCode.NOT_FOUND
        reply = await sluice.ConsumeBatch(
            pb.ConsBatchRq(topic=topic, group=group, max_messages=10, wait_ms=1000)
        )
        assert [m.offset for m in reply.messages] == [7, 8, 9]


async def test_stream_replies_carry_many_messages_and_take_range_acks(kafka, make_gateway) -> None:
    gateway: Gateway = await make_gateway()
    topic, group = kafka.create_topic(), unique_group()
    fill(kafka.bootstrap, topic, 300)
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        pixy, sluice = pb_grpc.KafkaPixyStub(channel), pb_grpc.SluiceGatewayStub(channel)
        requests: asyncio.Queue[pb.ConsStreamRq | None] = asyncio.Queue()
        await requests.put(pb.ConsStreamRq(topic=topic, group=group, credit=250))

        async def request_stream():  # type: ignore[no-untyped-def]
            while (request := await requests.get()) is not None:
                yield request

        call = sluice.ConsumeStream(request_stream())
        got: list[pb.ConsRs] = []
        replies = 0
        while len(got) < 250:
            reply = await asyncio.wait_for(call.read(), 30)
            assert reply is not grpc.aio.EOF and 0 < len(reply.messages) <= 250 - len(got)
            got.extend(reply.messages)
            replies += 1
        assert [m.offset for m in got] == list(range(250))
        assert replies < 250  # batched, not one reply per message
        # Credit spent: nothing more until granted, then the last 50 arrive (and, credit used up after the
        # client stopped sending, the stream ends).
        await requests.put(
            pb.ConsStreamRq(ack_ranges=[pb.OffsetRange(partition=0, begin=0, end=250)], credit=50)
        )
        while len(got) < 300:
            reply = await asyncio.wait_for(call.read(), 30)
            assert reply is not grpc.aio.EOF, await call.details()
            got.extend(reply.messages)
        assert [m.offset for m in got[250:]] == list(range(250, 300))
        await requests.put(pb.ConsStreamRq(ack_ranges=[pb.OffsetRange(partition=0, begin=250, end=300)]))
        await requests.put(None)
        assert await asyncio.wait_for(call.read(), 10) is grpc.aio.EOF

        assert await committed_offsets(pixy, topic, group, awaiting=[300]) == [300]


async def _status(call: object) -> grpc.aio.AioRpcError:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError("the call succeeded")


def test_buffer_high_water_shrinks_with_partitions_and_message_size() -> None:
    small = 200.0
    assert flow.buffer_high_water(1, small) == 8000
    assert flow.buffer_high_water(4, small) == 8000
    assert flow.buffer_high_water(16, small) == 2000  # the consumer's 32,000 shared out
    # 1 MB messages: the 64 MiB byte budget rules, not the message counts.
    assert flow.buffer_high_water(1, 1_000_000) == 67
    assert flow.buffer_high_water(4, 1_000_000) == 16
    assert flow.buffer_high_water(1000, 1_000_000) == 1  # never zero: a partition must still move


def run_messages(
    runs: list[pb.MessageRun],
) -> list[tuple[int, int, bytes | None, bytes, list[tuple[str, bytes]]]]:
    """(partition, offset, key, value, headers) of every message in MessageRuns, as a client decodes them."""
    decoded = []
    for run in runs:
        count = len(run.values)
        offsets = list(run.offsets) or [run.first_offset + i for i in range(count)]
        undefined = set(run.undefined_keys)
        assert len(run.timestamps) == count and len(offsets) == count
        for i in range(count):
            key = None if not run.keys or i in undefined else run.keys[i]
            headers = [(h.key, h.value) for h in run.headers[i].headers] if run.headers else []
            decoded.append((run.partition, offsets[i], key, run.values[i], headers))
    return decoded


async def test_stream_hands_out_runs_column_by_column(kafka, make_gateway) -> None:
    gateway: Gateway = await make_gateway()
    topic, group = kafka.create_topic(partitions=2), unique_group()
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    sent = {}
    for index in range(60):
        key = None if index % 3 == 0 else b"k%d" % index
        headers = [("h", b"%d" % index)] if index % 4 == 0 else None
        value = None if index == 7 else b"v%d" % index  # one tombstone: an empty value on the wire
        producer.produce(topic, value, key, partition=index % 2, headers=headers)
        sent[(index % 2, index // 2)] = (key, value or b"", [("h", b"%d" % index)] if headers else [])
    assert producer.flush(30) == 0
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        pixy, sluice = pb_grpc.KafkaPixyStub(channel), pb_grpc.SluiceGatewayStub(channel)
        requests: asyncio.Queue[pb.ConsStreamRq | None] = asyncio.Queue()
        await requests.put(pb.ConsStreamRq(topic=topic, group=group, credit=60, runs=True))

        async def request_stream():  # type: ignore[no-untyped-def]
            while (request := await requests.get()) is not None:
                yield request

        call = sluice.ConsumeStream(request_stream())
        got = []
        acks = []
        while len(got) < 60:
            reply = await asyncio.wait_for(call.read(), 30)
            assert reply is not grpc.aio.EOF and not reply.messages and reply.runs
            assert all(run.attempt == 0 for run in reply.runs)
            got.extend(run_messages(reply.runs))
            acks.extend(
                pb.OffsetRange(
                    partition=r.partition, begin=r.first_offset, end=r.first_offset + len(r.values)
                )
                for r in reply.runs
            )
        assert {(p, o): (k, v, h) for p, o, k, v, h in got} == sent
        await requests.put(pb.ConsStreamRq(ack_ranges=acks))
        await requests.put(None)
        assert await asyncio.wait_for(call.read(), 10) is grpc.aio.EOF

        assert await committed_offsets(pixy, topic, group, awaiting=[30, 30]) == [30, 30]


async def test_batch_runs_redeliver_only_what_was_not_acked(kafka, make_gateway) -> None:
    gateway: Gateway = await make_gateway(ack_timeout="1s")
    topic, group = kafka.create_topic(), unique_group()
    fill(kafka.bootstrap, topic, 10)
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        sluice = pb_grpc.SluiceGatewayStub(channel)
        first = await sluice.ConsumeBatch(
            pb.ConsBatchRq(topic=topic, group=group, max_messages=10, wait_ms=10_000, runs=True)
        )
        assert [(p, o) for p, o, *_ in run_messages(first.runs)] == [(0, o) for o in range(10)]
        # Ack 0-2 and 5 only: after the ack timeout the six others come back once more, flagged as a
        # redelivery, in runs that skip what was acknowledged.
        acks = [pb.PartitionOffsetRef(partition=0, offset=5)]
        again = await sluice.ConsumeBatch(
            pb.ConsBatchRq(
                topic=topic,
                group=group,
                acks=acks,
                ack_ranges=[pb.OffsetRange(partition=0, begin=0, end=3)],
                max_messages=10,
                wait_ms=10_000,
                runs=True,
            )
        )
        redelivered = run_messages(again.runs)
        assert [o for _, o, *_ in redelivered] == [3, 4, 6, 7, 8, 9]
        assert [v for *_, v, _ in redelivered] == [b"3", b"4", b"6", b"7", b"8", b"9"]
        assert all(run.attempt == 1 for run in again.runs)
        assert any(run.offsets for run in again.runs)  # the gap at 5 is spelled out


async def test_a_caller_that_cannot_take_passes_new_messages_on(kafka, make_gateway) -> None:
    # Waiting callers are woken one at a time. The first in line here is a ConsumeNAck caller at its
    # pending limit: it cannot take the new messages and must hand the wakeup to the batch caller
    # behind it, which would otherwise sit out its whole wait.
    gateway: Gateway = await make_gateway(
        long_polling_timeout="10s", max_pending_messages=1, max_pending_batch_messages=50
    )
    topic, group = kafka.create_topic(), unique_group()
    fill(kafka.bootstrap, topic, 1)
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        pixy, sluice = pb_grpc.KafkaPixyStub(channel), pb_grpc.SluiceGatewayStub(channel)
        first = await pixy.ConsumeNAck(pb.ConsNAckRq(topic=topic, group=group, no_ack=True))
        assert first.offset == 0  # un-acked: this group's ConsumeNAck callers are at their limit
        blocked = asyncio.ensure_future(
            pixy.ConsumeNAck(pb.ConsNAckRq(topic=topic, group=group, no_ack=True))
        )
        await asyncio.sleep(0.5)
        started = time.monotonic()
        batch = asyncio.ensure_future(
            sluice.ConsumeBatch(pb.ConsBatchRq(topic=topic, group=group, max_messages=10, wait_ms=8000))
        )
        await asyncio.sleep(0.5)
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 50})
        for index in range(5):
            producer.produce(topic, b"new-%d" % index)
        assert producer.flush(30) == 0
        reply = await asyncio.wait_for(batch, 10)
        got = [m.message for m in reply.messages]
        assert got and got == [b"new-%d" % i for i in range(len(got))]
        assert time.monotonic() - started < 7.0  # answered when the messages came, before wait_ms (8 s)
        assert not blocked.done()
        blocked.cancel()


def test_flow_control_holds_while_callers_take_and_pauses_when_they_stop_or_trickle() -> None:
    control = flow.FlowControl()
    high = 100
    # Under the shared budget (100 each, two partitions): fetch on.
    assert not control.due_for_pause({0: 150, 1: 40}, high, now=0.0) and control.held_since is None
    # One busy partition may use the other's room; at the budget fetching is held, not paused.
    assert not control.due_for_pause({0: 190, 1: 10}, high, now=1.0) and control.held_since == 1.0
    assert not control.due_for_pause({0: 190, 1: 10}, high, now=1.0 + flow._HOLD_SECONDS / 2)
    # Nothing taken for the hold's length: pause.
    assert control.due_for_pause({0: 190, 1: 10}, high, now=1.0 + flow._HOLD_SECONDS)
    # Takes restart the wait...
    level, now = 400, 10.0
    step = flow._HOLD_SECONDS / 2
    while now < 10.0 + flow._HOLD_MAX_SECONDS - step:
        assert not control.due_for_pause({0: level}, high=200, now=now), now
        level, now = level - 1, now + step
    # ...but callers trickling at a full buffer do not hold it past the cap.
    assert control.due_for_pause({0: level}, high=200, now=10.0 + flow._HOLD_MAX_SECONDS)


async def test_batch_and_stream_replies_keep_to_max_bytes(kafka, make_gateway) -> None:
    # 12 messages of 400 KB: one ConsumeBatch of all twelve would be 4.8 MB, past the 4 MiB a gRPC client
    # takes by default. The default 1 MiB reply carries two; a caller's own max_bytes is kept too.
    gateway: Gateway = await make_gateway()
    topic, group = kafka.create_topic(), unique_group()
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    for index in range(12):
        producer.produce(topic, bytes([index]) * 400_000, partition=0)
    assert producer.flush(30) == 0
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        sluice = pb_grpc.SluiceGatewayStub(channel)
        sizes: list[int] = []
        acks: list[pb.OffsetRange] = []
        got: list[int] = []
        while len(got) < 8:
            reply = await sluice.ConsumeBatch(
                pb.ConsBatchRq(topic=topic, group=group, max_messages=12, wait_ms=5000, ack_ranges=acks)
            )
            sizes.append(len(reply.messages))
            assert all(m.message == bytes([m.offset]) * 400_000 for m in reply.messages)
            got.extend(m.offset for m in reply.messages)
            acks = [pb.OffsetRange(partition=0, begin=got[-len(reply.messages)], end=got[-1] + 1)]
        # The 1 MiB cap: never three 400 KB messages in a reply, and two do fit. A reply carries what the
        # gateway holds when it is asked, so on a loaded machine the first one may come before the second
        # message has been fetched: the count of replies is not the point, their size is.
        assert max(sizes) == 2 and sizes.count(2) >= 3, sizes
        assert got == list(range(len(got))), got
        # A stream asking for at most 1,000 bytes a reply gets one message a reply, each whole.
        requests: asyncio.Queue[pb.ConsStreamRq | None] = asyncio.Queue()
        await requests.put(
            pb.ConsStreamRq(topic=topic, group=group, credit=4, max_bytes=1000, ack_ranges=acks)
        )

        async def request_stream():  # type: ignore[no-untyped-def]
            while (request := await requests.get()) is not None:
                yield request

        call = sluice.ConsumeStream(request_stream())
        for expected in range(len(got), 12):
            reply = await asyncio.wait_for(call.read(), 30)
            assert reply is not grpc.aio.EOF, await call.details()
            assert [(m.offset, len(m.message)) for m in reply.messages] == [(expected, 400_000)]
        await requests.put(None)
        call.cancel()
        bad = sluice.ConsumeBatch(pb.ConsBatchRq(topic=topic, group=group, max_messages=1, max_bytes=-1))
        assert (await _status(bad)).code() == grpc.StatusCode.INVALID_ARGUMENT
