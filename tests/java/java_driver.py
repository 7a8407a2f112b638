"""The Python side of SluiceJavaClient.java: build it, run one JVM per client version, and call its commands.

One JVM serves every test of a session for its kafka-clients version, because starting a JVM costs about a
second here. Commands go down stdin one per line and each gets one JSON reply line; group members in the
JVM report events (records processed, partitions assigned/revoked/lost, errors) on the same stdout, which a
reader thread hands to the matching :class:`JavaMember`.
"""

from __future__ import annotations

import hashlib
import json
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from group_members import Ledger, Member

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).with_name("SluiceJavaClient.java")
FETCH = ROOT / "tools" / "fetch_kafka_clients.py"
JARS = ROOT / "build" / "kafka-clients"
CLASSES = ROOT / "build" / "java-driver"
VERSIONS = ["3.9.0", "4.3.0"]
# A quick JVM start matters more than peak speed for these short runs.
JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k"]
# Short sessions so a member that is gone is noticed in seconds; the broker allows them (see conftest).
FAST_SESSION: dict[str, str | int] = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def build(versions: list[str]) -> dict[str, str]:
    """Fetch the jars (tools/fetch_kafka_clients.py skips that when they are there) and compile the driver
    for each version, in parallel, unless build/ already has it for this exact source: the classpaths."""
    subprocess.run([sys.executable, str(FETCH), *versions], check=True, stdout=subprocess.DEVNULL)
    stamp_text = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    compiling: list[tuple[str, subprocess.Popen[str]]] = []
    for version in versions:
        out, stamp = CLASSES / version, CLASSES / version / ".source-sha256"
        if stamp.is_file() and stamp.read_text() == stamp_text:
            continue
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        javac = ["javac", "-nowarn", "-cp", f"{JARS / version}/*", "-d", str(out), str(SOURCE)]
        compiling.append((version, subprocess.Popen(javac, stderr=subprocess.PIPE, text=True)))
    for version, proc in compiling:
        _, err = proc.communicate(120)
        if proc.returncode != 0:
            raise RuntimeError(f"javac against kafka-clients {version} failed:\n{err}")
        (CLASSES / version / ".source-sha256").write_text(stamp_text)
    return {v: f"{CLASSES / v}:{JARS / v}/*" for v in versions}


class JavaError(Exception):
    """A command failed in the JVM: `error` is the Java exception's simple class name."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(f"{error}: {message}")
        self.error = error
        self.message = message


class JavaClient:
    """One SluiceJavaClient JVM for one kafka-clients version, talking to one broker."""

    def __init__(self, version: str, classpath: str, bootstrap: str, stderr_log: Path,
                 security: dict[str, str] | None = None) -> None:
        """`security`: client settings every client of this JVM gets (SCRAM mode: security.protocol, sasl.*)."""
        self.version = version
        self.major = int(version.split(".")[0])
        self.stderr_log = stderr_log
        args = [bootstrap]
        if security:
            properties = stderr_log.with_name("client-security.properties")
            properties.write_text("".join(f"{key}={value}\n" for key, value in security.items()))
            args.append(str(properties))
        with stderr_log.open("w") as stderr:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(["java", *JVM_FLAGS, "-cp", classpath, "SluiceJavaClient", *args],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.listeners: dict[str, Callable[[dict[str, Any]], None]] = {}
        self.lock = threading.Lock()  # one command at a time: replies come back in order
        threading.Thread(target=self._read, name=f"java-{version}", daemon=True).start()

    def call(self, *words: object, timeout: float = 60) -> Any:
        """Run one command; its result, or JavaError with the exception the client raised."""
        line = " ".join(str(w) for w in words)
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            try:
                reply = self.replies.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no reply to {line!r} in {timeout}s") from None
        if reply is None:
            raise RuntimeError(f"the JVM exited (code {self.proc.poll()}) before answering {line!r}; "
                               f"its stderr: {self.stderr_log}")
        if "error" in reply:
            raise JavaError(reply["error"], reply["message"])
        return reply["reply"]

    def listen(self, member: str, handler: Callable[[dict[str, Any]], None]) -> None:
        self.listeners[member] = handler

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # end of commands: the JVM stops its members and exits
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if "event" in message:
                handler = self.listeners.get(message["member"])
                if handler is not None:
                    handler(message)
            else:
                self.replies.put(message)
        self.replies.put(None)


class JavaMember(Member):
    """A KafkaConsumer group member in the JVM, with the same bookkeeping as the Python members in
    tests/groups/group_members.py, so Java and Python members can share a group and a Ledger."""

    kind = "java"

    def __init__(self, name: str, ledger: Ledger, client: JavaClient, group: str, topic: str,
                 config: dict[str, str | int]) -> None:
        super().__init__(name, ledger)
        self.client, self.group, self.topic = client, group, topic
        self.java_name = f"{group}/{name}"  # unique in the JVM, which outlives the test
        # Under KIP-848 (group.protocol=consumer) the broker sets session and heartbeat times; 4.x clients
        # refuse the settings then.
        kip848 = str(config.get("group.protocol", "classic")).lower() == "consumer"
        self.config = {**({} if kip848 else FAST_SESSION), **config}
        self.generations: list[int] = []  # the generation of every assignment, in order
        self.assignments: list[list[int]] = []
        self.member_ids: list[str] = []

    def _run(self) -> None:
        self.client.listen(self.java_name, self._on_event)
        settings = [f"{key}={value}" for key, value in self.config.items()]
        self.client.call("member-start", self.java_name, self.group, self.topic, *settings)
        self.stop_event.wait()
        self.client.call("member-stop", self.java_name)

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "records":
            for partition, offset in event["records"]:
                self.ledger.record(self.name, partition, offset)
        elif kind == "assigned":
            with self.lock:
                self.held = set(event["assignment"])
                self.assign_events += 1
                self.generations.append(event["generation"])
                self.assignments.append(event["assignment"])
                self.member_ids.append(event["member_id"])
        elif kind in ("revoked", "lost"):
            self._revoked(event["partitions"])
        elif kind == "error":
            self.errors.append(JavaError(event["error"], event["message"]))
