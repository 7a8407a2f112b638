"""The root `sluice` Typer app; each command family module adds its commands to it."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Kafka from any program: an embedded broker, a kafka-pixy-compatible gateway, PySpark jobs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
