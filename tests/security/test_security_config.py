"""Security settings: Kafka's names, refused with the setting named when they cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest
from secure_broker import sluice_cli

from sluice.broker.config import BrokerConfig, parse_listener


def test_listeners_parse_and_advertise_per_protocol() -> None:
    assert parse_listener("SASL_SSL://[::1]:9094") == ("SASL_SSL", "::1", 9094)
    config = BrokerConfig(
        listeners=["PLAINTEXT://127.0.0.1:9092", "SASL_SSL://0.0.0.0:9094"],
        advertised_listeners=["SASL_SSL://kafka.example.com:19094"],
        ssl_certfile="c",
        ssl_keyfile="k",
    )
    config.validate()
    assert config.advertised_for("SASL_SSL") == ("kafka.example.com", 19094)
    assert config.advertised_for("PLAINTEXT") == ("127.0.0.1", 9092)
    assert BrokerConfig(listen_port=9999).listener_specs() == [("PLAINTEXT", "127.0.0.1", 9999)]


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"listeners": ["HTTP://h:1"]}, "protocol must be one of"),
        ({"listeners": ["PLAINTEXT://h"]}, "PROTOCOL://host:port"),
        ({"listeners": ["PLAINTEXT://h:1", "PLAINTEXT://h:2"]}, "one listener per protocol"),
        ({"listeners": ["SSL://h:1"]}, "ssl_certfile"),
        ({"ssl_client_auth": "maybe"}, "ssl_client_auth"),
        ({"ssl_client_auth": "required"}, "ssl_cafile"),
        ({"sasl_enabled_mechanisms": ["GSSAPI"]}, "unknown"),
        ({"authorizer": "opa"}, "authorizer"),
        ({"super_users": ["admin"]}, "TYPE:NAME"),
    ],
)
def test_bad_settings_are_refused(settings: dict, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        BrokerConfig(**settings).validate()


def test_the_broker_command_names_the_bad_setting(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("listeners: [SASL_SSL://127.0.0.1:0]\n")
    result = sluice_cli(
        "broker", "--config", str(config), "--data-dir", ":memory:", "--admin-listen", "off", check=False
    )
    assert result.returncode == 1 and "ssl_certfile" in result.stderr
