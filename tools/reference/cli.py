"""Every `sluice` command with its arguments and options, read from the Typer app (what `--help` prints)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer
import typer.main

from reference import cell, prose

INTRO = """\
# Command line

Every `sluice` command, its arguments and its options, as `sluice COMMAND --help` prints them. This page is
written from the command-line app when the site is built, so it always matches the installed `sluice`.
How the commands fit together: [the command-line guide](../guide/command-line.md).
"""


def _commands(command: Any, ctx: typer.Context) -> Iterator[tuple[Any, typer.Context]]:
    """Every command under `command`, depth first, in the order `--help` lists them."""
    if not hasattr(command, "list_commands"):
        return
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is None or sub.hidden:
            continue
        sub_ctx = typer.Context(sub, info_name=name, parent=ctx)
        yield sub, sub_ctx
        yield from _commands(sub, sub_ctx)


def _argument_row(param: Any) -> str:
    name = (param.metavar or param.name).upper()
    required = "required" if param.required else "optional"
    repeat = ", repeatable" if param.nargs == -1 else ""
    return f"| `{name}` | {cell(param.help or '')} ({required}{repeat}) |"


def _command_section(command: Any, ctx: typer.Context) -> list[str]:
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"## {ctx.command_path}", "", f"```text\n{ctx.command_path} {usage}\n```", ""]
    if command.help:
        lines += [prose(command.help.strip()), ""]
    rows = []
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            rows.append(_argument_row(param))
            continue
        record = param.get_help_record(ctx)
        if record is None or record[0] == "--help":
            continue
        names, text = record
        rows.append(f"| `{' '.join(names.split())}` | {cell(text)} |")
    if rows:
        lines += ["| argument or option | meaning |", "|---|---|", *rows, ""]
    return lines


def page() -> str:
    import sluice.cli

    root = typer.main.get_command(sluice.cli.app)
    root_ctx = typer.Context(root, info_name="sluice")
    lines = [INTRO]
    for command, ctx in _commands(root, root_ctx):
        lines += _command_section(command, ctx)
    return "\n".join(lines)
