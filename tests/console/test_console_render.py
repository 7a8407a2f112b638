"""The console's pure parts: how values are shown, the paging cursor, reset arithmetic, client settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from sluice.cli.console import client_settings, parse_basic_auth
from sluice.console.app import Samples
from sluice.console.groups import new_offset
from sluice.console.messages import format_cursor, parse_cursor
from sluice.console.render import MAX_SHOWN_BYTES, human_bytes, lag_chart, render_bytes


def test_values_render_as_pretty_json_text_or_hex() -> None:
    shown = render_bytes(b'{"a": [1, 2], "b": "\xc3\xa9"}')
    assert shown.kind == "json" and shown.text == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "é"\n}'
    assert shown.preview == '{"a": [1, 2], "b": "é"}'
    assert render_bytes(b"hello world").kind == "text"
    assert render_bytes(b"{not json").kind == "text"
    binary = render_bytes(bytes(range(40)))
    assert binary.kind == "hex" and binary.text.startswith("00000000  00 01 02 03")
    assert render_bytes(b"\x00\x01ok").kind == "hex"  # decodes as UTF-8 but is not printable
    assert render_bytes(None).kind == "null"
    big = render_bytes(b"y" * (MAX_SHOWN_BYTES + 10))
    assert big.cut and len(big.text) == MAX_SHOWN_BYTES and big.size == MAX_SHOWN_BYTES + 10


def test_the_paging_cursor_round_trips_and_rejects_garbage() -> None:
    assert parse_cursor(format_cursor({2: 90, 0: 120})) == {0: 120, 2: 90}
    assert parse_cursor("") is None
    with pytest.raises(ValueError):
        parse_cursor("0:abc")


def test_reset_targets_are_clamped_to_the_log() -> None:
    assert new_offset("earliest", earliest=5, latest=50) == 5
    assert new_offset("latest", earliest=5, latest=50) == 50
    assert new_offset("offset", earliest=5, latest=50, value=2) == 5
    assert new_offset("offset", earliest=5, latest=50, value=70) == 50
    assert new_offset("timestamp", earliest=5, latest=50, for_time=-1) == 50  # every record is older
    assert new_offset("duration", earliest=5, latest=50, for_time=17) == 17
    with pytest.raises(ValueError):
        new_offset("sideways", earliest=0, latest=1)


def test_client_settings_come_from_yaml_then_x_flags(tmp_path: Path) -> None:
    config = tmp_path / "client.yaml"
    config.write_text(
        "security.protocol: SASL_SSL\nsasl.mechanism: PLAIN\nenable.ssl.certificate.verification: false\n"
    )
    settings = client_settings("h:9092", ["sasl.mechanism=SCRAM-SHA-512", "client.id=ops=1"], config)
    assert settings == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "enable.ssl.certificate.verification": "false",
        "client.id": "ops=1",
        "bootstrap.servers": "h:9092",
    }
    with pytest.raises(typer.BadParameter):
        client_settings("h:9092", ["novalue"], None)
    config.write_text("- a list\n")
    with pytest.raises(typer.BadParameter):
        client_settings("h:9092", None, config)
    assert parse_basic_auth("ops:pa:ss") == ("ops", "pa:ss")
    with pytest.raises(typer.BadParameter):
        parse_basic_auth("nopassword")


def test_sizes_and_the_lag_chart() -> None:
    assert (human_bytes(None), human_bytes(512), human_bytes(3 * 1024 * 1024)) == ("—", "512 B", "3.0 MiB")
    svg = str(lag_chart([(1000.0, 10), (1060.0, 250)], now=1100.0))
    assert svg.startswith("<svg") and "<polyline" in svg and ">500<" in svg  # axis rounded up to 500
    assert "no samples yet" in str(lag_chart([], now=1100.0))


def test_rates_come_from_the_last_two_samples() -> None:
    samples = Samples()
    assert samples.rates() == (None, None)
    samples.totals.append((100.0, 1_000, 400))
    samples.totals.append((102.0, 1_600, 500))
    assert samples.rates() == (300.0, 50.0)
    samples.totals.append((104.0, 10, 500))  # a deleted topic shrinks the total: no negative rate
    assert samples.rates() == (0.0, 0.0)


def test_every_template_and_static_file_ships_in_the_wheel_and_no_page_loads_a_script_from_elsewhere() -> (
    None
):
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[2]
    package = root / "src" / "sluice"
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "sluice"
    ]
    console_files = [
        p.relative_to(package).as_posix()
        for folder in ("console/templates", "console/static")
        for p in (package / folder).iterdir()
        if p.is_file()
    ]
    assert console_files
    unshipped = [f for f in console_files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert unshipped == []
    # The only JavaScript is the vendored htmx: no CDN, no bundle a node step would have to build.
    base = (package / "console" / "templates" / "base.html").read_text()
    scripts = [line for line in base.splitlines() if "<script" in line]
    assert scripts and all("/static/htmx.min.js" in line and "http" not in line for line in scripts)


def test_the_admin_address_is_taken_as_host_port_or_url() -> None:
    from sluice.cli.console import admin_url

    assert admin_url(None) is None
    assert admin_url("127.0.0.1:9644") == "http://127.0.0.1:9644"
    assert admin_url("http://broker:9644/") == "http://broker:9644"
    with pytest.raises(typer.BadParameter):
        admin_url("no-port-here")
