"""The two facts a console needs that confluent-kafka does not expose: which API versions a broker serves
(the protocol it speaks, shown as its version on the overview) and DescribeLogDirs (partition sizes on
disk). Both are asked with sluice's own wire client, of each broker, through the same client settings as
librdkafka's: TLS (`ssl.ca.location`, client certificates) and SASL PLAIN or SCRAM. When a cluster wants
something else (OAUTHBEARER, GSSAPI), or a broker does not serve an API, the answer is None and the pages
say "not reported" rather than guess.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from sluice.client.api_versions import api_versions
from sluice.client.secure import connect_secure, supported
from sluice.client.wire import WireClient
from sluice.protocol.messages import APIS_BY_KEY, APIS_BY_NAME

log = logging.getLogger("sluice.console")
DESCRIBE_LOG_DIRS = 35
# A broker that does not serve DescribeLogDirs (or cannot be reached) is asked again only after this.
NEGATIVE_CACHE_S = 60.0
# The APIs whose top versions say most about a broker's protocol generation, in the overview's order.
HEADLINE_APIS = ("Produce", "Fetch", "Metadata", "ListOffsets")


@dataclass(frozen=True)
class Protocol:
    """ApiVersions of one broker: api key -> (min, max)."""

    versions: dict[int, tuple[int, int]]

    def summary(self) -> str:
        heads = []
        for name in HEADLINE_APIS:
            api = APIS_BY_NAME.get(name)
            if api is not None and api.key in self.versions:
                heads.append(f"{name} v{self.versions[api.key][1]}")
        return f"Kafka protocol, {len(self.versions)} APIs ({', '.join(heads)})"


@dataclass
class LogDirs:
    """Bytes on disk per partition (summed over the brokers that hold a replica), and per log directory."""

    sizes: dict[tuple[str, int], int]
    dirs: list[tuple[int, str, int, int]]  # (broker id, path, total bytes or -1, usable bytes or -1)


class WireFacts:
    """Asks brokers over the wire; remembers which ones do not answer so a page never waits on them twice."""

    def __init__(self, settings: dict[str, str], timeout_s: float) -> None:
        self.settings = settings
        self.enabled = supported(settings)
        self.timeout_s = timeout_s
        self._unserved: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()

    def _skip(self, address: tuple[str, int]) -> bool:
        with self._lock:
            since = self._unserved.get(address)
            return since is not None and time.monotonic() - since < NEGATIVE_CACHE_S

    def _remember_unserved(self, address: tuple[str, int]) -> None:
        with self._lock:
            self._unserved[address] = time.monotonic()

    def connect(self, host: str, port: int) -> WireClient:
        """A connection as librdkafka would make it with these settings: TLS, then SASL, when asked for."""
        return connect_secure(host, port, self.settings, self.timeout_s, client_id="sluice-console")

    def protocol(self, host: str, port: int) -> Protocol | None:
        if not self.enabled:
            return None
        try:
            with self.connect(host, port) as client:
                return _api_versions(client)
        except Exception as exc:  # best effort: a page shows "not reported" instead
            log.debug("ApiVersions of %s:%d failed: %s", host, port, exc)
            return None

    def log_dirs(self, brokers: list[tuple[int, str, int]]) -> LogDirs | None:
        """DescribeLogDirs of every broker, or None when none of them serves it."""
        if not self.enabled or not brokers:
            return None
        sizes: dict[tuple[str, int], int] = {}
        dirs: list[tuple[int, str, int, int]] = []
        answered = False
        for node, host, port in brokers:
            if self._skip((host, port)):
                continue
            try:
                with self.connect(host, port) as client:
                    served = _api_versions(client).versions.get(DESCRIBE_LOG_DIRS)
                    ours = APIS_BY_KEY.get(DESCRIBE_LOG_DIRS)
                    if served is None or ours is None:
                        self._remember_unserved((host, port))
                        continue
                    version = min(served[1], ours.versions.high)
                    request = client.request_class("DescribeLogDirs")(topics=None)
                    response = client.call("DescribeLogDirs", version, request)
            except Exception as exc:  # best effort, as above
                log.debug("DescribeLogDirs of %s:%d failed: %s", host, port, exc)
                self._remember_unserved((host, port))
                continue
            answered = True
            for result in response.results:
                if result.error_code != 0:
                    continue
                dirs.append(
                    (
                        node,
                        result.log_dir,
                        getattr(result, "total_bytes", -1),
                        getattr(result, "usable_bytes", -1),
                    )
                )
                for topic in result.topics:
                    for part in topic.partitions:
                        key = (topic.name, part.partition_index)
                        sizes[key] = sizes.get(key, 0) + part.partition_size
        return LogDirs(sizes, dirs) if answered else None


def _api_versions(client: WireClient) -> Protocol:
    return Protocol(api_versions(client).versions)
