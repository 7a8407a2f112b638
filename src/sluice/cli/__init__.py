"""`sluice` command line: one module per command family, all mounted on one Typer app.

| module | commands |
|---|---|
| broker | broker, serve, gateway |
| topics | topics create/list/describe/delete |
| produce | produce |
| consume | consume |
| groups | groups list/describe/delete/reset-offsets |
| pipeline | pipeline archive/replay/stats (pyspark imported only when a job runs) |
| console | console (the web console) |
| registry | registry (the Schema Registry) |
| storage | storage verify/repair (offline checks of a data directory) |
| transactions | transactions list/describe/abort (kafka-transactions.sh) |
| users | users create/list/delete (SCRAM; offline in a data dir or online) |
| acls | acls add/list/remove |
"""

from __future__ import annotations

from sluice.cli import broker, console, consume, produce, registry, storage, topics  # noqa: F401  (each registers its commands on `app`)
from sluice.cli.acls import app as acls_app
from sluice.cli.app import app
from sluice.cli.common import err_console
from sluice.cli.groups import app as groups_app
from sluice.cli.pipeline import app as pipeline_app
from sluice.cli.transactions import app as transactions_app
from sluice.cli.users import app as users_app

app.add_typer(groups_app, name="groups")
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(transactions_app, name="transactions")
app.add_typer(users_app, name="users")
app.add_typer(acls_app, name="acls")


def main() -> None:
    try:
        app()
    except Exception as exc:
        # A Kafka client's failure (broker unreachable, authentication refused, ...) that a command did not
        # handle itself: one error line, not a traceback. confluent_kafka is imported only here, so
        # commands that never load it do not pay for it at start-up.
        from confluent_kafka import KafkaException

        if not isinstance(exc, KafkaException):
            raise
        error = exc.args[0] if exc.args else exc
        reason = error.str() if hasattr(error, "str") else str(error)
        err_console.print(f"[red]error:[/red] {reason}")
        raise SystemExit(1) from None


__all__ = ["app", "main"]
