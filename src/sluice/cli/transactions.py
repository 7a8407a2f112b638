"""`sluice transactions`: list, describe and abort transactions, like Kafka's kafka-transactions.sh.

confluent-kafka has no admin call for transactions, so these speak the Kafka protocol directly through
sluice's wire client (FindCoordinator, ListTransactions, DescribeTransactions, WriteTxnMarkers): they work
against any broker that serves those APIs, one coordinator at a time (sluice has one).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sluice.cli.common import DEFAULT_BOOTSTRAP, Bootstrap, console, fail

if TYPE_CHECKING:
    from rich.table import Table

app = typer.Typer(help="List, describe and abort transactions.", no_args_is_help=True)
JsonOutput = Annotated[bool, typer.Option("--json", help="Machine-readable JSON instead of tables.")]
TIMEOUT_S = 15.0


def _client(bootstrap: str) -> Any:
    from sluice.client.wire import WireClient

    first = bootstrap.split(",")[0].strip()
    try:
        return WireClient.connect(first, timeout=TIMEOUT_S)
    except OSError as exc:
        fail(f"cannot connect to {first}: {exc}")


def _describe(client: Any, ids: list[str]) -> list[Any]:
    cls = client.request_class("DescribeTransactions")
    return list(client.call("DescribeTransactions", 0, cls(transactional_ids=ids)).transaction_states)


def _row(state: Any, now_ms: int) -> dict[str, Any]:
    start = state.transaction_start_time_ms
    return {
        "transactional_id": state.transactional_id,
        "state": state.transaction_state,
        "producer_id": state.producer_id,
        "producer_epoch": state.producer_epoch,
        "timeout_ms": state.transaction_timeout_ms,
        "age_ms": now_ms - start if start >= 0 else None,
        "partitions": [f"{t.topic}-{p}" for t in state.topics for p in t.partitions],
    }


def _error_name(code: int) -> str:
    # Imported here: every other command would load the error table at start-up for nothing.
    from sluice.errors import ErrorCode

    return ErrorCode(code).name


def _table(rows: list[dict[str, Any]]) -> Table:
    from rich.table import Table

    table = Table("TRANSACTIONAL ID", "STATE", "PRODUCER ID", "EPOCH", "TIMEOUT MS", "AGE MS", "PARTITIONS")
    for r in rows:
        table.add_row(
            r["transactional_id"],
            r["state"],
            str(r["producer_id"]),
            str(r["producer_epoch"]),
            str(r["timeout_ms"]),
            "-" if r["age_ms"] is None else str(r["age_ms"]),
            ", ".join(r["partitions"]) or "-",
            overflow="fold",
        )
    return table


@app.command("list")
def list_transactions(
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    state: Annotated[
        list[str] | None, typer.Option("--state", help="Only these states (Ongoing, ...).")
    ] = None,
    as_json: JsonOutput = False,
) -> None:
    """Every transactional id the coordinator knows, with state, producer, partitions and age."""
    with _client(bootstrap) as client:
        cls = client.request_class("ListTransactions")
        listed = client.call("ListTransactions", 1, cls(state_filters=state or []))
        if listed.error_code:
            fail(f"ListTransactions failed: {_error_name(listed.error_code)}")
        ids = [t.transactional_id for t in listed.transaction_states]
        described = _describe(client, ids) if ids else []
    now = int(time.time() * 1000)
    rows = [_row(s, now) for s in described if s.error_code == 0]
    if as_json:
        console.print_json(json.dumps(rows))
    else:
        console.print(_table(rows))


@app.command("describe")
def describe_transaction(
    transactional_id: Annotated[str, typer.Argument(help="The transactional id.")],
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    as_json: JsonOutput = False,
) -> None:
    """One transactional id: state, producer id and epoch, partitions of its open transaction, age."""
    with _client(bootstrap) as client:
        described = _describe(client, [transactional_id])
    state = described[0]
    if state.error_code:
        fail(f"{transactional_id}: {_error_name(state.error_code)}")
    row = _row(state, int(time.time() * 1000))
    if as_json:
        console.print_json(json.dumps(row))
    else:
        console.print(_table([row]))


@app.command("abort")
def abort_transaction(
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    transactional_id: Annotated[
        str | None,
        typer.Option("--transactional-id", help="Abort this id's open transaction (its producer is fenced)."),
    ] = None,
    topic: Annotated[
        str | None, typer.Option("--topic", help="A hanging transaction's partition: topic...")
    ] = None,
    partition: Annotated[int | None, typer.Option("--partition", help="...and partition.")] = None,
    producer_id: Annotated[
        int | None, typer.Option("--producer-id", help="The hanging transaction's producer id.")
    ] = None,
    producer_epoch: Annotated[int, typer.Option("--producer-epoch", help="Its producer epoch.")] = 0,
    coordinator_epoch: Annotated[
        int, typer.Option("--coordinator-epoch", help="Coordinator epoch for the marker.")
    ] = 0,
) -> None:
    """Abort a transaction: by transactional id, or (kafka-transactions.sh style) by partition and producer."""
    with _client(bootstrap) as client:
        if transactional_id is not None:
            state = _describe(client, [transactional_id])[0]
            if state.error_code:
                fail(f"{transactional_id}: {_error_name(state.error_code)}")
            if state.transaction_state != "Ongoing":
                fail(f"{transactional_id} has no open transaction (state {state.transaction_state})")
            pid, epoch = state.producer_id, state.producer_epoch
            targets = [(t.topic, list(t.partitions)) for t in state.topics]
        elif topic is not None and partition is not None and producer_id is not None:
            pid, epoch, targets = producer_id, producer_epoch, [(topic, [partition])]
        else:
            fail("give --transactional-id, or --topic, --partition and --producer-id")
            return
        cls = client.request_class("WriteTxnMarkers")
        request = cls(
            markers=[
                cls.WritableTxnMarker(
                    producer_id=pid,
                    producer_epoch=epoch,
                    transaction_result=False,
                    coordinator_epoch=coordinator_epoch,
                    topics=[cls.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in targets],
                )
            ]
        )
        response = client.call("WriteTxnMarkers", 1, request)
    errors = [
        (t.name, p.partition_index, _error_name(p.error_code))
        for m in response.markers
        for t in m.topics
        for p in t.partitions
        if p.error_code
    ]
    if errors:
        fail("; ".join(f"{t}-{p}: {e}" for t, p, e in errors))
    console.print(f"aborted the transaction of producer {pid}")
