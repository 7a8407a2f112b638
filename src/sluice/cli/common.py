"""What every command family shares: consoles, the bootstrap option, errors, logging, clients."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")


class _LazyConsole:
    """A rich Console made at its first use: importing rich.console adds ~16 ms to every start, and most
    runs of client commands (a `sluice consume` writing to stdout, say) never print through it."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            # soft_wrap: a line naming a group or topic stays one line at any terminal width (scripts grep
            # it); tables still fit the width.
            self._console = Console(stderr=self._stderr, soft_wrap=True)
        return getattr(self._console, name)


console = cast("Console", _LazyConsole())
err_console = cast("Console", _LazyConsole(stderr=True))

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
Bootstrap = Annotated[
    str,
    typer.Option(
        "--bootstrap", "-b", envvar="SLUICE_BOOTSTRAP", help="Kafka bootstrap servers (host:port,...)"
    ),
]
# librdkafka properties for every client a command makes (security.protocol, sasl.*, ssl.*, ...), like kcat -X.
Settings = Annotated[
    list[str] | None,
    typer.Option(
        "--setting", "-X", help="KEY=VALUE client setting (librdkafka property), repeatable, like kcat -X."
    ),
]


def split_hostport(value: str, option: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise typer.BadParameter(f"expected HOST:PORT, got {value!r}", param_hint=option)
    return host.strip("[]"), int(port)


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def fail(message: str) -> None:
    err_console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


def parse_settings(settings: list[str] | None) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for item in settings or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="-X")
        parsed[key.strip()] = value
    return parsed


def client_config(bootstrap: str, settings: list[str] | None = None, **defaults: Any) -> dict[str, Any]:
    """A confluent-kafka config: bootstrap, then the command's own defaults, then the user's -X settings
    (last, so a user can override anything, security included)."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    # librdkafka properties are dotted; confluent-kafka's callbacks (error_cb...) keep their underscores.
    config.update(
        {key if key.endswith("_cb") else key.replace("_", "."): value for key, value in defaults.items()}
    )
    config.update(parse_settings(settings))
    return config


def end_on_authentication_failure(error: Any) -> None:
    """librdkafka retries a failed login for as long as the command waits (and the broker answers each retry
    later than the last); for a command at a terminal a wrong password is final: say so and stop now.
    Runs on whichever thread librdkafka serves callbacks from, hence os._exit after flushing."""
    from confluent_kafka import KafkaError

    if error.code() != KafkaError._AUTHENTICATION:
        return
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.write(f"error: authentication failed: {error.str()}\n")
    sys.stderr.flush()
    os._exit(1)


def serving(
    client: Any,
    wait: Callable[[float], T],
    timeout: float,
    step: float = 0.25,
    not_yet: tuple[type[BaseException], ...] = (TimeoutError,),
) -> T:
    """`wait(t)`, a blocking confluent-kafka call that gives up after t seconds, run in slices of `step` with the
    client's callbacks served in between: librdkafka reports a failed login only through error_cb, which runs
    in poll(), so a wrong password ends the command at once instead of after `timeout`. A slice that ends
    with `not_yet` (a future's result: TimeoutError) is retried until `timeout`; any other outcome, an error
    included, is final."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return wait(max(0.001, min(step, left)))
        except not_yet:
            if time.monotonic() >= deadline:
                raise
        client.poll(0)


def metadata_serving(client: Any, timeout: float) -> Any:
    """`client.list_topics()` through `serving`: a slice it gets no answer in raises KafkaException."""
    from confluent_kafka import KafkaException

    return serving(client, lambda t: client.list_topics(timeout=t), timeout, not_yet=(KafkaException,))


def new_client(factory: Callable[[dict[str, Any]], T], config: dict[str, Any]) -> T:
    """A confluent-kafka client; settings librdkafka refuses (e.g. a mistyped -X) end the command with
    librdkafka's reason rather than a traceback."""
    from confluent_kafka import KafkaException

    config.setdefault("error_cb", end_on_authentication_failure)
    try:
        return factory(config)
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        fail(f"bad client settings: {reason}")
        raise  # unreachable: fail() exits


def admin_client(bootstrap: str, settings: list[str] | None = None) -> Any:
    from confluent_kafka.admin import AdminClient

    return new_client(AdminClient, client_config(bootstrap, settings, socket_timeout_ms=10000))


# ----- client security options (`sluice users`, `sluice acls`), declared once for every command -----


@dataclass(frozen=True)
class ClientSecurity:
    """What the client security options ask for (the defaults are the options' defaults)."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "SCRAM-SHA-256"
    username: str | None = None
    password: str | None = None
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    def settings(self) -> dict[str, str]:
        """librdkafka settings for these options; SASL without a user and password ends the command."""
        settings = {"security.protocol": self.protocol}
        if self.protocol.startswith("SASL"):
            if not self.username or self.password is None:
                fail("--sasl-username and --sasl-password (or $SLUICE_SASL_PASSWORD) are needed for SASL")
            settings |= {
                "sasl.mechanism": self.mechanism,
                "sasl.username": self.username or "",
                "sasl.password": self.password or "",
            }
        if self.protocol.endswith("SSL"):
            for key, path in (
                ("ssl.ca.location", self.cafile),
                ("ssl.certificate.location", self.certfile),
                ("ssl.key.location", self.keyfile),
            ):
                if path:
                    settings[key] = path
        return settings


# ClientSecurity field -> (the command parameter typer sees, its option), in the order help lists them.
_SECURITY_OPTIONS: dict[str, tuple[str, Any]] = {
    "protocol": (
        "security_protocol",
        Annotated[
            str, typer.Option("--security-protocol", help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.")
        ],
    ),
    "mechanism": (
        "sasl_mechanism",
        Annotated[str, typer.Option("--sasl-mechanism", help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.")],
    ),
    "username": (
        "sasl_username",
        Annotated[str | None, typer.Option("--sasl-username", help="Who this command logs in as.")],
    ),
    "password": (
        "sasl_password",
        Annotated[
            str | None,
            typer.Option("--sasl-password", envvar="SLUICE_SASL_PASSWORD", help="Or $SLUICE_SASL_PASSWORD."),
        ],
    ),
    "cafile": (
        "ssl_cafile",
        Annotated[
            str | None, typer.Option("--ssl-cafile", help="CA bundle that signs the broker's certificate.")
        ],
    ),
    "certfile": (
        "ssl_certfile",
        Annotated[str | None, typer.Option("--ssl-certfile", help="Client certificate (mutual TLS).")],
    ),
    "keyfile": (
        "ssl_keyfile",
        Annotated[str | None, typer.Option("--ssl-keyfile", help="Client key (mutual TLS).")],
    ),
}


def with_client_security(command: Callable[..., T]) -> Callable[..., T]:
    """Give `command` the client security options: where it declares `security: ClientSecurity`, typer
    sees the seven options (and help lists them there); the command receives them as one ClientSecurity.
    Goes under `@app.command(...)`."""
    signature = inspect.signature(command, eval_str=True)
    defaults = ClientSecurity()
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.name != "security":
            parameters.append(parameter)
            continue
        parameters += [
            inspect.Parameter(name, parameter.kind, default=getattr(defaults, field), annotation=option)
            for field, (name, option) in _SECURITY_OPTIONS.items()
        ]
    if len(parameters) == len(signature.parameters):
        raise TypeError(f"{command.__name__} has no `security: ClientSecurity` parameter")

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> T:
        given = {field: kwargs.pop(name) for field, (name, _) in _SECURITY_OPTIONS.items()}
        return command(*args, security=ClientSecurity(**given), **kwargs)

    run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return run


# ----- the broker's admin HTTP API (sluice extensions: groups create, live rewind, ...) -----

ADMIN_PORT = 9644
Admin = Annotated[
    str | None,
    typer.Option(
        "--admin",
        envvar="SLUICE_ADMIN",
        help=(
            f"The broker's admin listener: HOST:PORT (default: the first bootstrap host, port {ADMIN_PORT}) or a "
            "URL, https://USER:PASSWORD@HOST:PORT for a listener with admin_tls and admin_auth. A bearer token "
            "comes from SLUICE_ADMIN_TOKEN; an HTTPS listener's CA from SSL_CERT_FILE."
        ),
    ),
]


def admin_address(admin: str | None, bootstrap: str) -> str:
    if admin:
        if "://" not in admin:
            split_hostport(admin, "--admin")
        return admin
    first = bootstrap.split(",")[0].strip()
    host = first.rpartition(":")[0] or first
    return f"{host}:{ADMIN_PORT}"


def _admin_request(address: str, method: str, path: str, data: bytes | None) -> Any:
    """The urllib request for `path` on the admin listener at `address` (HOST:PORT or a URL with credentials)."""
    import base64
    import os
    import urllib.parse
    import urllib.request

    url = urllib.parse.urlsplit(address if "://" in address else f"http://{address}")
    if url.scheme not in ("http", "https") or not url.hostname:
        fail(f"--admin {address!r}: expected HOST:PORT or an http(s):// URL")
    headers = {"Content-Type": "application/json"}
    if url.username is not None:
        secret = f"{urllib.parse.unquote(url.username)}:{urllib.parse.unquote(url.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(secret.encode()).decode()
    elif token := os.environ.get("SLUICE_ADMIN_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    netloc = url.hostname if ":" not in url.hostname else f"[{url.hostname}]"
    if url.port is not None:
        netloc += f":{url.port}"
    base = f"{url.scheme}://{netloc}{url.path.rstrip('/')}"
    return urllib.request.Request(base + path, data=data, method=method, headers=headers)


def admin_call(
    address: str, method: str, path: str, body: Any = None, timeout: float = 30.0
) -> tuple[int, Any]:
    """(HTTP status, decoded JSON) of one admin API call; a connection failure exits with a clear error."""
    import json
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = _admin_request(address, method, path, data)
    shown = request.full_url.removesuffix(path)  # the credentials are not printed
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        if exc.code == 401:
            fail(
                f"the broker's admin API at {shown} wants credentials (admin_auth): pass --admin "
                "https://USER:PASSWORD@HOST:PORT or set SLUICE_ADMIN_TOKEN"
            )
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, {"error": str(exc.code), "message": raw.decode(errors="replace")}
    except (urllib.error.URLError, OSError) as exc:
        fail(
            f"cannot reach the broker's admin API at {shown} ({exc}): the broker serves it on 127.0.0.1:9644 "
            "unless started with --admin-listen HOST:PORT|off; point this command at it with --admin HOST:PORT "
            "(or SLUICE_ADMIN)"
        )
        raise  # unreachable: fail() exits


def unescape(text: str) -> bytes:
    """kcat's escapes in -f/-D/-K: \\n, \\t, \\r, \\\\, \\0 and \\xHH."""
    return text.encode("utf-8").decode("unicode_escape").encode("latin-1")
