"""A cluster as a client that writes its own requests sees it: one `BrokerLink` per broker, and each topic's
partition leaders from Metadata (v4, which every Kafka from 1.0 to 4.x answers).

Leaders are kept for `METADATA_MAX_AGE_SECONDS`, and forgotten at once when an answer says they moved.
Metadata is asked of a connected broker, else of the bootstrap servers in turn (node -1 - i is bootstrap
server i); the request lets the broker auto-create the topic, as librdkafka's producer does. A connection,
and a topic's leaders, are asked for once however many callers want them at the same time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from sluice.client.broker_link import BrokerLink, LinkLost
from sluice.client.secure import SecureConnectError
from sluice.errors import ErrorCode
from sluice.protocol.messages import APIS_BY_NAME, request_codecs, response_codecs

METADATA_VERSION = 4
METADATA_MAX_AGE_SECONDS = 30.0
# Answers that say the broker did nothing (appended nothing): trying again cannot do anything twice.
RETRIABLE = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)
_METADATA_KEY = APIS_BY_NAME["Metadata"].key
_METADATA_REQUEST = request_codecs(_METADATA_KEY)
_METADATA_ANSWER = response_codecs(_METADATA_KEY)[METADATA_VERSION]

Key = TypeVar("Key")
Made = TypeVar("Made")


class RequestFailed(Exception):
    """Why a request to the cluster did not happen or did not succeed (the message says which)."""

    def __init__(self, code: int, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        # Nothing was done and trying again may succeed.
        self.code, self.message, self.retriable = code, message, retriable


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _once(
    underway: dict[Key, asyncio.Task[Made]], key: Key, make: Callable[[], Awaitable[Made]]
) -> Awaitable[Made]:
    """What `make` gives, made once for all who ask for `key` while it is under way (one caller's
    cancellation does not cancel it for the others)."""
    task = underway.get(key)
    if task is None:
        task = asyncio.get_running_loop().create_task(make())  # type: ignore[arg-type]
        underway[key] = task
        task.add_done_callback(lambda _: underway.pop(key, None))
    return asyncio.shield(task)


class ClusterLinks:
    def __init__(
        self, bootstrap: tuple[str, ...], security: Mapping[str, str], client_id: str, request_timeout: float
    ) -> None:
        self.bootstrap, self.security = bootstrap, security
        self.client_id, self.request_timeout = client_id, request_timeout
        self._links: dict[int, BrokerLink] = {}
        self._linking: dict[int, asyncio.Task[BrokerLink]] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        # topic -> (partition -> leader node, or -1 while it has none; when to ask again)
        self._leaders: dict[str, tuple[dict[int, int], float]] = {}
        self._asking: dict[str, asyncio.Task[dict[int, int]]] = {}

    def known_leaders(self, topic: str) -> dict[int, int] | None:
        """The topic's leaders if they are known and fresh (no suspension: the common case)."""
        known = self._leaders.get(topic)
        return known[0] if known is not None and known[1] > time.monotonic() else None

    def forget_leaders(self, topic: str) -> None:
        self._leaders.pop(topic, None)

    async def leaders(self, topic: str, deadline: float) -> dict[int, int]:
        """partition -> leader node (-1: none now); `RequestFailed` when no broker answered."""
        return self.known_leaders(topic) or await _once(
            self._asking, topic, lambda: self._ask_leaders(topic, deadline)
        )

    async def _ask_leaders(self, topic: str, deadline: float) -> dict[int, int]:
        """Ask the connected brokers, or the bootstrap servers, in turn until one answers."""
        request = _METADATA_REQUEST.cls(
            topics=[_METADATA_REQUEST.cls.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True
        )
        body = _METADATA_REQUEST[METADATA_VERSION].encode(request)
        nodes = [node for node, link in self._links.items() if not link.closed]
        nodes += [-1 - i for i in range(len(self.bootstrap))]
        failure = RequestFailed(ErrorCode.NETWORK_EXCEPTION, "no bootstrap server", retriable=True)
        for node in nodes:
            try:
                link = await self.link(node, deadline)
                answer, _ = _METADATA_ANSWER.decode(await link.send(_METADATA_KEY, METADATA_VERSION, body), 0)
            except RequestFailed as exc:
                failure = exc
                continue
            except LinkLost as exc:
                reason = f"metadata of {topic}: {exc}"
                failure = RequestFailed(ErrorCode.NETWORK_EXCEPTION, reason, retriable=True)
                continue
            self._brokers.update({b.node_id: (b.host, b.port) for b in answer.brokers})
            found = next((t for t in answer.topics if t.name == topic), None)
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if found is None else found.error_code
            if code:
                # A topic being created is briefly unknown or leaderless; until the deadline, ask again.
                reason = f"metadata of {topic}: {error_name(code)}"
                raise RequestFailed(code, reason, retriable=code in RETRIABLE)
            assert found is not None
            leaders = {p.partition_index: -1 if p.error_code else p.leader_id for p in found.partitions}
            self._leaders[topic] = (leaders, time.monotonic() + METADATA_MAX_AGE_SECONDS)
            return leaders
        raise failure

    def known_link(self, node: int) -> BrokerLink | None:
        """The open connection to `node`, if there is one (no suspension: the common case)."""
        link = self._links.get(node)
        return link if link is not None and not link.closed else None

    async def link(self, node: int, deadline: float) -> BrokerLink:
        """The connection to `node` (a negative node is the bootstrap server -1 - node), made once."""
        return self.known_link(node) or await _once(
            self._linking, node, lambda: self._connect(node, deadline)
        )

    async def _connect(self, node: int, deadline: float) -> BrokerLink:
        if node < 0:
            host, _, port = self.bootstrap[-1 - node].rpartition(":")
            address = (host.strip("[]"), int(port))
        elif node in self._brokers:
            address = self._brokers[node]
        else:
            unknown = f"broker {node} is not in the cluster's metadata"
            raise RequestFailed(ErrorCode.BROKER_NOT_AVAILABLE, unknown, retriable=True)
        timeout = max(min(self.request_timeout, deadline - asyncio.get_running_loop().time()), 0.1)
        try:
            link = await BrokerLink.open(
                *address, self.security, timeout, self.client_id, self.request_timeout
            )
        except SecureConnectError as exc:  # the broker refused the login: trying again changes nothing
            reason = f"cannot log in to {address[0]}:{address[1]}: {exc}"
            raise RequestFailed(ErrorCode.SASL_AUTHENTICATION_FAILED, reason, retriable=False) from exc
        except Exception as exc:  # refused, unreachable: nothing was sent
            reason = f"cannot reach {address[0]}:{address[1]}: {exc or type(exc).__name__}"
            raise RequestFailed(ErrorCode.NETWORK_EXCEPTION, reason, retriable=True) from exc
        self._links[node] = link
        return link

    async def close(self) -> None:
        links, self._links = list(self._links.values()), {}
        for link in links:
            with contextlib.suppress(Exception):
                await link.close()
