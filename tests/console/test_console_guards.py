"""What the console refuses and how it fails: read-only mode, logins off loopback, cross-site writes, bad
input, an unreachable or killed broker, and `sluice serve` serving it beside the broker."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from console_helpers import ConsoleThread

from sluice.console.app import ConsoleConfig
from sluice.testing import BrokerProcess, create_topic, free_port


def fetch(
    url: str, *, method: str = "GET", data: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def hx_post(url: str, fields: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    from urllib.parse import urlencode

    return fetch(
        url,
        method="POST",
        data=urlencode(fields).encode(),
        headers={"HX-Request": "true", "Content-Type": "application/x-www-form-urlencoded"},
    )


def test_read_only_hides_every_write_and_refuses_them(
    broker: Any, page: Any, bootstrap: str, topic_name: str, shots: Path
) -> None:
    topic = create_topic(bootstrap, partitions=1, name=topic_name)
    console = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": bootstrap}, port=free_port(), read_only=True)
    ).start()
    try:
        page.goto(console.url + f"/topics/{topic}")
        assert "read-only" in page.inner_text("header")
        for write in ("form.produce", "#create-topic", "button:has-text('Delete topic')", "form.cfg"):
            assert page.locator(write).count() == 0, write
        page.screenshot(path=shots / "sluice-topic-read-only.png")
        status, body, _ = hx_post(console.url + f"/topics/{topic}/produce", {"value": "sneaky"})
        assert (status, body) == (403, "this console is read-only")
        status, _, _ = hx_post(console.url + f"/topics/{topic}/delete", {})
        assert status == 403
        # Searching only reads, so it stays.
        page.fill("form.scan input[name=needle]", "anything")
        page.click("form.scan button[type=submit]")
        page.wait_for_selector("#scan .scan-status:has-text('Search done')")
    finally:
        console.stop()
    ends = AdminClient({"bootstrap.servers": bootstrap})
    assert topic in ends.list_topics(timeout=10).topics


def test_off_loopback_a_login_is_required(bootstrap: str) -> None:
    with pytest.raises(ValueError, match="configure a login"):
        ConsoleConfig({"bootstrap.servers": bootstrap}, host="0.0.0.0").check()
    ConsoleConfig({"bootstrap.servers": bootstrap}, host="0.0.0.0", token="t0k3n").check()

    token = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": bootstrap}, port=free_port(), token="t0k3n")
    ).start()
    basic = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": bootstrap}, port=free_port(), basic_auth=("ops", "s3cret"))
    ).start()
    try:
        assert fetch(token.url + "/topics")[0] == 401
        assert fetch(token.url + "/topics", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert fetch(token.url + "/topics", headers={"Authorization": "Bearer t0k3n"})[0] == 200
        status, _, headers = fetch(token.url + "/?token=t0k3n")
        assert status == 200 and "sluice_console_token=t0k3n" in headers.get("Set-Cookie", "")
        assert fetch(token.url + "/", headers={"Cookie": "sluice_console_token=t0k3n"})[0] == 200

        status, _, headers = fetch(basic.url + "/groups")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        wrong = base64.b64encode(b"ops:guess").decode()
        assert fetch(basic.url + "/groups", headers={"Authorization": f"Basic {wrong}"})[0] == 401
        right = base64.b64encode(b"ops:s3cret").decode()
        assert fetch(basic.url + "/groups", headers={"Authorization": f"Basic {right}"})[0] == 200
    finally:
        token.stop()
        basic.stop()


def test_a_browser_logs_in_by_token_link_or_basic_auth_and_its_writes_go_through(
    browser: Any, bootstrap: str, topic_name: str
) -> None:
    topic = create_topic(bootstrap, partitions=1, name=topic_name)
    token = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": bootstrap}, port=free_port(), token="t0k3n")
    ).start()
    basic = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": bootstrap}, port=free_port(), basic_auth=("ops", "s3cret"))
    ).start()
    contexts = []
    try:
        # Opened once with ?token=, the browser is logged in: later pages and htmx writes need no token.
        tab = browser.new_context().new_page()
        contexts.append(tab.context)
        assert tab.goto(token.url + f"/topics/{topic}").status == 401
        assert tab.goto(token.url + "/?token=t0k3n").status == 200
        assert tab.goto(token.url + f"/topics/{topic}").status == 200
        tab.fill("form.produce textarea[name=value]", "sent by a logged-in browser")
        tab.click("form.produce button[type=submit]")
        tab.wait_for_selector("#produced")
        assert "at offset 0" in tab.inner_text("#produced")

        # Basic auth: without credentials the browser is refused; with them it browses and writes.
        refused = browser.new_context().new_page()
        contexts.append(refused.context)
        # (headless Chromium has no login prompt to show: it gives up on the 401 with an auth error)
        with pytest.raises(Exception, match="ERR_INVALID_AUTH_CREDENTIALS"):
            refused.goto(basic.url + "/topics")
        tab = browser.new_context(http_credentials={"username": "ops", "password": "s3cret"}).new_page()
        contexts.append(tab.context)
        assert tab.goto(basic.url + f"/topics/{topic}").status == 200
        tab.fill("form.produce textarea[name=value]", "sent with basic auth")
        tab.click("form.produce button[type=submit]")
        tab.wait_for_selector("#produced")
        assert "at offset 1" in tab.inner_text("#produced")
    finally:
        for context in contexts:
            context.close()
        token.stop()
        basic.stop()


def test_writes_come_only_from_the_consoles_own_pages(
    sluice_console: Any, bootstrap: str, topic_name: str
) -> None:
    from urllib.parse import urlencode

    form = urlencode({"name": topic_name}).encode()
    plain = {"Content-Type": "application/x-www-form-urlencoded"}
    # A form on another site can POST here, but cannot add htmx's header.
    assert fetch(sluice_console.url + "/topics", method="POST", data=form, headers=plain)[0] == 403
    foreign = {**plain, "HX-Request": "true", "Origin": "http://evil.example"}
    assert fetch(sluice_console.url + "/topics", method="POST", data=form, headers=foreign)[0] == 403
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_bad_input_gets_a_named_error_not_a_crash(
    sluice_console: Any, bootstrap: str, topic_name: str
) -> None:
    topic = create_topic(bootstrap, partitions=2, name=topic_name)
    base = sluice_console.url
    status, body, _ = fetch(base + f"/topics/{topic}?mode=offset&value=abc")
    assert status == 400 and "INVALID_REQUEST" in body and "whole number" in body
    status, body, _ = fetch(base + f"/topics/{topic}/messages?partition=7")
    assert status == 404 and "has no partition 7" in body
    status, body, _ = fetch(base + f"/topics/{topic}?cursor=0:zz")
    assert status == 400 and "cursor" in body
    status, body, _ = fetch(base + "/topics/no-such-topic-here")
    assert status == 404 and "UNKNOWN_TOPIC_OR_PART" in body
    status, body, _ = fetch(base + "/groups/no-such-group-here")
    assert status == 404 and "GROUP_ID_NOT_FOUND" in body
    assert "Traceback" not in body
    # htmx actions answer with an error fragment the page swaps in.
    status, body, _ = hx_post(base + "/topics", {"name": "bad name!"})
    assert status == 200 and "INVALID_REQUEST" in body
    status, body, _ = hx_post(base + f"/topics/{topic}/produce", {"value": "x", "partition": "9"})
    assert status == 200 and 'class="alert' in body and "UNKNOWN_PARTITION" in body
    status, body, _ = hx_post(base + f"/topics/{topic}/produce", {"value": "x" * (1024 * 1024 + 1)})
    assert status == 200 and "at most 1048576 bytes" in body
    status, body, _ = hx_post(base + f"/topics/{topic}/config", {"key": "retention.ms", "value": "soon"})
    assert status == 200 and "INVALID_CONFIG" in body
    status, body, _ = hx_post(base + f"/groups/{topic}-g/reset", {"kind": "duration", "duration": "a while"})
    assert status == 200 and "duration like 30m" in body


def test_an_unreachable_cluster_shows_a_banner_and_a_killed_broker_comes_back(
    page: Any, tmp_path: Path, shots: Path
) -> None:
    dead = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, port=free_port(), timeout_s=2)
    ).start()
    try:
        response = page.goto(dead.url + "/topics")
        assert response.status == 503
        banner = page.inner_text(".alert-down")
        assert "Cannot reach the cluster" in banner
        assert "Connection refused" in banner  # librdkafka's reason, not only "transport failure"
        assert "Traceback" not in page.content()
        page.screenshot(path=shots / "unreachable.png")
    finally:
        dead.stop()

    # Client settings that do not match the listener (TLS spoken to a plaintext port): the reason is named.
    broker = BrokerProcess(tmp_path / "tls-mismatch").start()
    mismatched = ConsoleThread(
        ConsoleConfig(
            {"bootstrap.servers": broker.bootstrap, "security.protocol": "SSL"}, port=free_port(), timeout_s=2
        )
    ).start()
    try:
        response = page.goto(mismatched.url + "/")
        assert response.status == 503
        # librdkafka's words vary ("SSL handshake failed", "SSL connection closed by peer"); its generic
        # "Broker transport failure" names no SSL at all.
        assert "SSL" in page.inner_text(".alert-down")
    finally:
        mismatched.stop()
        broker.stop()

    broker = BrokerProcess(tmp_path / "data").start()
    console = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": broker.bootstrap}, port=free_port(), timeout_s=3)
    ).start()
    try:
        topic = create_topic(broker.bootstrap, partitions=1, name="survivor")
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(10):
            producer.produce(topic, value=b"v%d" % i)
        assert producer.flush(10) == 0
        page.goto(console.url + f"/topics/{topic}")
        assert page.locator("#messages-table tbody tr").count() == 10

        broker.kill()
        response = page.goto(console.url + f"/topics/{topic}")
        assert response.status == 503 and "Cannot reach the cluster" in page.inner_text("main")

        broker.restart()
        deadline = time.monotonic() + 30
        while True:
            response = page.goto(console.url + f"/topics/{topic}")
            if response.status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert response.status == 200
        assert page.locator("#messages-table tbody tr").count() == 10  # every acknowledged message is there
    finally:
        console.stop()
        broker.stop()


def test_sluice_serve_serves_the_console_with_the_gateways_in_flight_messages(
    tmp_path: Path, page: Any, shots: Path
) -> None:
    kafka, grpc_port, http_port, console_port = free_port(), free_port(), free_port(), free_port()
    admin_port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "serve",
            "--kafka-listen",
            f"127.0.0.1:{kafka}",
            "--grpc-listen",
            f"127.0.0.1:{grpc_port}",
            "--http-listen",
            f"127.0.0.1:{http_port}",
            "--console-listen",
            f"127.0.0.1:{console_port}",
            "--metrics-listen",
            f"127.0.0.1:{admin_port}",
            # Not this test's subject; left on, they would contend for their default ports under xdist.
            *("--registry-listen", "off", "--rest-listen", "off"),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "sluice console on" in line or len(lines) > 50:
                break
        assert f"sluice console on http://127.0.0.1:{console_port}/" in "".join(lines), "".join(lines)
        create_topic(f"127.0.0.1:{kafka}", partitions=1, name="served-topic")
        status, body, _ = fetch(f"http://127.0.0.1:{console_port}/topics")
        assert status == 200 and "served-topic" in body
        # Served next to the broker, the console reads sizes on disk from its data directory.
        assert re.findall(r'<td class="num">([^<]*B)</td>', body), body

        gateway = f"http://127.0.0.1:{http_port}"
        for i in range(5):
            assert (
                fetch(
                    f"{gateway}/topics/served-topic/messages?sync",
                    method="POST",
                    data=b"m%d" % i,
                    headers={"Content-Type": "text/plain"},
                )[0]
                == 200
            )
        handed = [
            json.loads(fetch(f"{gateway}/topics/served-topic/messages?group=workers&noAck")[1])
            for _ in range(3)
        ]
        first = handed[0]
        ack = f"{gateway}/topics/served-topic/acks?group=workers&partition={first['partition']}&offset={first['offset']}"
        assert fetch(ack, method="POST", data=b"")[0] == 200

        page.goto(f"http://127.0.0.1:{console_port}/gateway")
        rows = page.eval_on_selector_all(
            "#gateway-table tbody tr",
            "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText.trim()))",
        )
        assert [(r[0], r[1], r[3], r[4], r[5], r[7]) for r in rows] == [
            ("workers", "served-topic", "3", "0", "1", "2")
        ]
        page.screenshot(path=shots / "sluice-gateway.png", full_page=True)

        # sluice serve hands the console its broker's admin API: a running group's reset can be live.
        page.goto(f"http://127.0.0.1:{console_port}/groups/workers")
        assert page.locator("#reset-form input[name=live]").count() == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0


def _serve(data: Path, console_listen: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """`sluice serve` on free ports; returns the process and its output up to the console's line."""
    ports = [free_port() for _ in range(4)]
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "sluice", "serve", "--data-dir", str(data)),
            *("--kafka-listen", f"127.0.0.1:{ports[0]}", "--grpc-listen", f"127.0.0.1:{ports[1]}"),
            *("--http-listen", f"127.0.0.1:{ports[2]}", "--metrics-listen", f"127.0.0.1:{ports[3]}"),
            *("--console-listen", console_listen, "--registry-listen", "off", "--rest-listen", "off"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "sluice console" in line or len(lines) > 50:
            break
    return proc, "".join(lines)


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def test_sluice_serve_opens_its_console_beyond_loopback_only_with_a_login(tmp_path: Path) -> None:
    port = free_port()
    proc, output = _serve(tmp_path / "open", f"0.0.0.0:{port}", {})
    try:
        assert "sluice console not started" in output and "configure a login" in output, output
        assert proc.poll() is None  # the broker and gateway serve on without it
    finally:
        _stop(proc)

    proc, output = _serve(tmp_path / "login", f"0.0.0.0:{port}", {"SLUICE_CONSOLE_TOKEN": "serve-t0k3n"})
    try:
        assert f"sluice console on http://0.0.0.0:{port}/" in output, output
        assert fetch(f"http://127.0.0.1:{port}/topics")[0] == 401
        bearer = {"Authorization": "Bearer serve-t0k3n"}
        assert fetch(f"http://127.0.0.1:{port}/topics", headers=bearer)[0] == 200
    finally:
        _stop(proc)
    assert proc.returncode == 0


def test_a_reset_of_a_group_with_live_members_is_refused_with_kafkas_error(
    sluice_console: Any, bootstrap: str, topic_name: str, group_name: str
) -> None:
    from confluent_kafka import Consumer

    topic = create_topic(bootstrap, partitions=1, name=topic_name)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group_name, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        fields = {"kind": "earliest", "topic": topic, "action": "execute"}
        status, body, _ = hx_post(sluice_console.url + f"/groups/{group_name}/reset", fields)
        assert status == 200 and "NON_EMPTY_GROUP" in body and "stop its consumers first" in body
        status, body, _ = hx_post(sluice_console.url + f"/groups/{group_name}/delete", {})
        assert status == 200 and "NON_EMPTY_GROUP" in body
    finally:
        consumer.close()


def test_sluice_console_command_serves_any_bootstrap_and_refuses_an_open_listener_without_login(
    bootstrap: str, tmp_path: Path
) -> None:
    port = free_port()
    settings = tmp_path / "client.yaml"
    settings.write_text("client.id: console-under-test\n")
    cmd = [
        sys.executable,
        "-m",
        "sluice",
        "console",
        "-b",
        bootstrap,
        "--listen",
        f"127.0.0.1:{port}",
        "--config",
        str(settings),
        "-X",
        "socket.keepalive.enable=true",
        "--read-only",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        assert f"sluice console on http://127.0.0.1:{port}/" in proc.stdout.readline()
        status, body, _ = fetch(f"http://127.0.0.1:{port}/topics")
        assert status == 200 and "read-only" in body
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0

    refused = subprocess.run(
        [sys.executable, "-m", "sluice", "console", "-b", bootstrap, "--listen", f"0.0.0.0:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1 and "configure a login" in refused.stderr
    bad_x = subprocess.run(
        [sys.executable, "-m", "sluice", "console", "-b", bootstrap, "-X", "no-equals-sign"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad_x.returncode == 2 and "key=value" in bad_x.stderr
