"""Which new client connections the Kafka listener lets in, and which one it closes to make room.

Checked as a connection is accepted, in this order:

1. `max_connections_per_ip` and `max_connections_per_ip_overrides` (Kafka's max.connections.per.ip and
   its overrides; no limit by default): an address holding its limit has the new connection closed at once.
   An override names an address or a host name; a host name counts for each address it resolves to.
2. `max_connections` (Kafka's max.connections; no number by default): closed at once.
3. The open-file bound. Client connections and cached segment files share the process's descriptors:
   connections may hold the soft RLIMIT_NOFILE less the reserve (`reserved_descriptors`, at most a quarter
   of the limit: index and checkpoint files opened for a moment, the metadata journal, the admin API's
   sockets, pipes) and `MIN_SEGMENT_FILES`; the segment-file cache is sized to what they leave, so it
   closes its least recently used files as connections come (sluice.storage.file_cache). No accept ever
   meets EMFILE, which would make the event loop drop new connections unseen (uvloop) or stop accepting.
   At the bound, the connection quiet the longest that owes nothing and is in no request is closed so the
   new one gets in (Kafka closes the least recently used connection this way on its inter-broker listener,
   KIP-402); when every connection is busy, the new one is refused.

A refusal is logged at most once per `REFUSAL_LOG_INTERVAL_S` for each bound, naming the address and how
many more were refused since the last line; each one counts in sluice_connections_refused{limit}.
"""

from __future__ import annotations

import logging
import socket
from collections import Counter

from sluice.broker.config import BrokerConfig, per_ip_overrides
from sluice.storage.file_cache import MIN_SEGMENT_FILES, FileCache, default_capacity, reserved_for

log = logging.getLogger("sluice.kafka")

REFUSAL_LOG_INTERVAL_S = 10.0
PER_IP = "max_connections_per_ip"
MAX_CONNECTIONS = "max_connections"
DESCRIPTORS = "open_files"


class RateLimitedLog:
    """One warning per key per interval; the lines skipped meanwhile are counted into the next one."""

    def __init__(self, interval_s: float = REFUSAL_LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._skipped: Counter[str] = Counter()

    def warn(self, key: str, now: float, message: str, *args: object) -> None:
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._skipped[key] += 1
            return
        skipped = self._skipped.pop(key, 0)
        self._last[key] = now
        if skipped:
            message += " (%d more like it in the last %.0f s)"
            args = (*args, skipped, now - last if last is not None else 0.0)
        log.warning(message, *args)


class Admission:
    """The counts and bounds behind a new connection's admission; the listener (sluice.server.kafka) asks
    `refusal` before it keeps a connection and reports `opened` / `closed`."""

    def __init__(self, config: BrokerConfig, descriptor_limit: int, files: FileCache | None) -> None:
        self.config = config
        self.descriptor_limit = descriptor_limit
        self.files = files
        self.per_host: Counter[str] = Counter()
        self.log = RateLimitedLog()
        self._overrides_source: object = None
        self._overrides: dict[str, int] = {}

    @property
    def reserved(self) -> int:
        return reserved_for(self.descriptor_limit, self.config.reserved_descriptors)

    @property
    def descriptor_bound(self) -> int:
        """How many client connections the open-file limit leaves room for."""
        return max(1, self.descriptor_limit - self.reserved - MIN_SEGMENT_FILES)

    def limit_for(self, host: str) -> int | None:
        """The per-address limit of `host` (None: none)."""
        source = self.config.max_connections_per_ip_overrides
        if source is not self._overrides_source:
            self._overrides = resolve_overrides(source)
            self._overrides_source = source
        return self._overrides.get(host, self.config.max_connections_per_ip)

    def refusal(self, host: str, open_connections: int) -> tuple[str, str] | None:
        """(bound, why) when a new connection from `host` exceeds a bound, else None."""
        limit = self.limit_for(host)
        if limit is not None and self.per_host[host] >= limit:
            return (
                PER_IP,
                f"{self.per_host[host]} connections from that address (max_connections_per_ip {limit})",
            )
        ceiling = self.config.max_connections
        if ceiling is not None and open_connections >= ceiling:
            return MAX_CONNECTIONS, f"{open_connections} connections open (max_connections {ceiling})"
        if open_connections >= self.descriptor_bound:
            return DESCRIPTORS, (
                f"{open_connections} connections open, the most the open-file limit {self.descriptor_limit} "
                f"leaves after {self.reserved} reserved descriptors and {MIN_SEGMENT_FILES} segment files"
            )
        return None

    def opened(self, host: str, open_connections: int) -> None:
        self.per_host[host] += 1
        self.size_files(open_connections)

    def closed(self, host: str, open_connections: int) -> None:
        left = self.per_host[host] - 1
        if left > 0:
            self.per_host[host] = left
        else:
            del self.per_host[host]
        self.size_files(open_connections)

    def size_files(self, open_connections: int) -> None:
        """Give the segment-file cache what the open connections leave of the descriptors (never more than
        open_segment_files)."""
        if self.files is None:
            return
        left = default_capacity(self.descriptor_limit, self.config.reserved_descriptors, open_connections)
        configured = self.config.open_segment_files
        capacity = left if configured is None else min(configured, left)
        if capacity != self.files.capacity:
            self.files.resize(capacity)


def resolve_overrides(value: dict[str, int] | str) -> dict[str, int]:
    """max_connections_per_ip_overrides as address -> limit: host names resolved (once per value set)."""
    limits: dict[str, int] = {}
    for host, limit in per_ip_overrides(value).items():
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(host.strip("[]"), None)}
        except OSError as error:
            log.warning("max_connections_per_ip_overrides: cannot resolve %r (%s): ignored", host, error)
            continue
        for address in addresses:
            limits[address] = limit
    return limits
