"""The reference pages of the documentation site, written from the code at build time so they cannot drift.

Each module renders one page as Markdown from the code's own definitions: `cli` from the Typer app, `settings`
from BrokerConfig and the config definitions, `kafka_apis` from the handler registry and the protocol's
messages, `metrics` from the Prometheus registries. tools/mkdocs_hooks.py adds them to the site as
reference/*.md; none is committed, so there is no copy to fall behind. `python tools/reference NAME` prints
one (NAME: cli, settings, kafka-apis, metrics), to read without building the site.
"""

from __future__ import annotations

import importlib

_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\*_<[]`"})


def prose(text: object) -> str:
    """Plain text (a help string, a docstring) that Markdown shows as written: no emphasis, tags or links."""
    return str(text).translate(_MARKDOWN_SPECIAL)


def cell(text: object) -> str:
    """Plain text safe inside one Markdown table cell: no pipe ends the cell, no newline ends the row."""
    return prose(" ".join(str(text).split())).replace("|", "\\|")


def code(text: object) -> str:
    """Inline code that survives any backticks inside it."""
    value = str(text)
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


# The site path of each generated page -> the module here that writes it.
PAGES = {
    "reference/cli.md": "cli",
    "reference/settings.md": "settings",
    "reference/kafka-apis.md": "kafka_apis",
    "reference/metrics.md": "metrics",
}


def render(site_path: str) -> str:
    """The Markdown of one generated page (imported only when asked: the metrics page starts a broker)."""
    module = importlib.import_module(f"reference.{PAGES[site_path]}")
    return module.page()
