"""Client quotas (KIP-55, KIP-124, KIP-546, KIP-599, KIP-612): configured per user and/or client id (or IP),
enforced on produce and fetch bytes, request handler time, topic mutations and new connections, kept
durably beside the logs.

Kafka's semantics, followed here:
- An entity is a set of (entity type, name) with types `user`, `client-id` (or `ip` alone); a name of None
  is the type's default entity.
- The quota that applies to a request is the most specific configured entity, in Kafka's order:
  user+client, user+default client, user, default user+client, default user+default client, default user,
  client, default client.
- A client over its byte rate or its request_percentage gets `throttle_time_ms` = (rate - quota) / quota *
  window, and (KIP-219) the broker answers at once and then stops reading from the connection for that long.
- A connection over its IP's connection_creation_rate is held unread for its throttle time, then closed.

Pure apart from `load`/`save`: time is passed in.

`client-quotas.json` layout: docs/storage.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sluice.errors import ErrorCode, KafkaError
from sluice.storage.files import write_atomically

QUOTAS_FILE = "client-quotas.json"
# The user of an unauthenticated connection, as Kafka names it.
ANONYMOUS = "ANONYMOUS"
USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# Kafka's QuotaConfigs: which keys apply to which entity types, and which must be whole numbers.
CLIENT_KEYS = frozenset(
    {PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE}
)
IP_KEYS = frozenset({CONNECTION_CREATION_RATE})
WHOLE_NUMBER_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, CONNECTION_CREATION_RATE})
# Match types of DescribeClientQuotas components.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
# quota.window.num and quota.window.size.seconds (Kafka's defaults).
WINDOW_SAMPLES = 11
SAMPLE_MS = 1_000
# Kafka caps one throttle at the quota window so a burst cannot mute a client for minutes.
MAX_THROTTLE_MS = WINDOW_SAMPLES * SAMPLE_MS
MAX_ENTITIES = 100_000

Entity = tuple[tuple[str, str | None], ...]


class QuotaSubject(Protocol):
    """Who a request counts against (sluice.broker.api.RequestContext)."""

    @property
    def principal(self) -> str: ...

    api_key: int
    client_id: str | None
    now_ms: int
    quotas: ClientQuotas | None


def make_entity(parts: Iterable[tuple[str, str | None]]) -> Entity:
    """Validate an entity as Kafka's ClientQuotaControlManager does, and give it a canonical order."""
    items = list(parts)
    types = [t for t, _ in items]
    if not items:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    if len(set(types)) != len(types):
        twice = next(t for t in types if types.count(t) > 1)
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Invalid client quota entity, duplicate entity entry {twice}"
        )
    unknown = [t for t in types if t not in (USER, CLIENT_ID, IP)]
    if unknown:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Unhandled client quota entity type: {unknown[0]}")
    if IP in types and len(types) > 1:
        raise KafkaError(
            # Kafka's text, its missing space included.
            ErrorCode.INVALID_REQUEST,
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        )
    for entity_type, name in items:
        if name is not None and not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Empty {entity_type} not supported")
        if name is not None and len(name) > 1024:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid {entity_type} entity name {name!r}")
    return tuple(sorted(items))


def check_value(entity: Entity, key: str, value: float) -> None:
    allowed = IP_KEYS if entity[0][0] == IP else CLIENT_KEYS
    if key not in allowed:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    # Kafka's ClientQuotaControlManager texts.
    if not math.isfinite(value) or value <= 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if key in WHOLE_NUMBER_KEYS and value != int(value):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value.")


@dataclass
class _Rate:
    """Bytes in fixed one-second samples over the last WINDOW_SAMPLES seconds (Kafka's SampledStat)."""

    samples: dict[int, float] = field(default_factory=dict)
    first_ms: int = -1

    def record(self, now_ms: int, amount: float) -> None:
        if self.first_ms < 0:
            self.first_ms = now_ms
        slot = now_ms // SAMPLE_MS
        self.samples[slot] = self.samples.get(slot, 0.0) + amount
        for old in [s for s in self.samples if s <= slot - WINDOW_SAMPLES]:
            del self.samples[old]

    def window_ms(self, now_ms: int) -> int:
        # Kafka measures over the full window once it has filled, and over the elapsed time before that
        # (at least one sample), so a fresh client is not judged on a few milliseconds.
        elapsed = now_ms - self.first_ms
        return max(SAMPLE_MS, min(elapsed, WINDOW_SAMPLES * SAMPLE_MS))

    def per_second(self, now_ms: int) -> float:
        return sum(self.samples.values()) * 1000.0 / self.window_ms(now_ms)

    def throttle_ms(self, now_ms: int, amount: float, bound: float) -> int:
        """Record `amount`; the throttle of a client now over `bound` a second, (rate - bound) / bound * window
        capped at MAX_THROTTLE_MS, or 0 within it."""
        self.record(now_ms, amount)
        observed = self.per_second(now_ms)
        if observed <= bound:
            return 0
        return int(min(MAX_THROTTLE_MS, (observed - bound) / bound * self.window_ms(now_ms)))


@dataclass
class _Bucket:
    """KIP-599's token bucket: `rate` partition mutations a second, holding at most WINDOW_SAMPLES seconds'
    worth; a request may take it below zero, and the next one waits until it is back at zero."""

    rate: float
    tokens: float
    last_ms: int

    def refill(self, now_ms: int, rate: float) -> None:
        self.rate = rate
        elapsed = max(0, now_ms - self.last_ms)
        self.tokens = min(rate * WINDOW_SAMPLES, self.tokens + elapsed * rate / 1000.0)
        self.last_ms = now_ms


class MutationQuota:
    """One request's controller_mutation_rate (KIP-599). Strict (CreateTopics v6+, CreatePartitions v3+,
    DeleteTopics v5+): a topic is refused with THROTTLING_QUOTA_EXCEEDED while the bucket is below zero.
    Permissive (older versions): every topic goes ahead and only the throttle time tells the client."""

    def __init__(self, bucket: _Bucket | None, strict: bool) -> None:
        self.bucket = bucket
        self.strict = strict

    def exceeded(self) -> bool:
        return self.strict and self.bucket is not None and self.bucket.tokens < 0

    def record(self, partitions: int) -> None:
        if self.bucket is not None:
            self.bucket.tokens -= partitions

    def throttle_ms(self) -> int:
        bucket = self.bucket
        if bucket is None or bucket.tokens >= 0:
            return 0
        return int(min(MAX_THROTTLE_MS, -bucket.tokens / bucket.rate * 1000))


UNLIMITED = MutationQuota(None, strict=False)


class ClientQuotas:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.configs: dict[Entity, dict[str, float]] = {}
        self._rates: dict[tuple[str, Entity], _Rate] = {}
        self._buckets: dict[Entity, _Bucket] = {}

    @classmethod
    def open(cls, data_dir: Path | None) -> ClientQuotas:
        quotas = cls(Path(data_dir) / QUOTAS_FILE if data_dir is not None else None)
        if quotas.path is not None and quotas.path.exists():
            for row in json.loads(quotas.path.read_text()):
                entity = tuple((t, n) for t, n in row["entity"])
                quotas.configs[entity] = {k: float(v) for k, v in row["values"].items()}
        return quotas

    def save(self) -> None:
        if self.path is None:
            return
        rows = [
            {"entity": [list(p) for p in e], "values": v} for e, v in sorted(self.configs.items(), key=repr)
        ]
        write_atomically(self.path, json.dumps(rows, indent=1).encode())

    # ----- AlterClientQuotas / DescribeClientQuotas -----

    def alter(self, entity: Entity, ops: Iterable[tuple[str, float, bool]], validate_only: bool) -> None:
        """Apply (key, value, remove) operations to one entity; all or nothing."""
        values = dict(self.configs.get(entity, {}))
        for key, value, remove in ops:
            if remove:
                allowed = IP_KEYS if entity[0][0] == IP else CLIENT_KEYS
                if key not in allowed:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
                values.pop(key, None)
            else:
                check_value(entity, key, value)
                values[key] = value
        if validate_only:
            return
        if entity not in self.configs and len(self.configs) >= MAX_ENTITIES:
            raise KafkaError(ErrorCode.POLICY_VIOLATION, f"at most {MAX_ENTITIES} quota entities")
        if values:
            self.configs[entity] = values
        else:
            self.configs.pop(entity, None)
        self._rates = {k: r for k, r in self._rates.items() if k[1] in self.configs}

    def describe(
        self, components: list[tuple[str, int, str | None]], strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        types = [t for t, _, _ in components]
        if len(set(types)) != len(types):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"entity type named twice in the filter: {types}")
        if IP in types and len(types) > 1:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, "an ip filter cannot be combined with user or client-id"
            )
        for _, match_type, _ in components:
            if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown match type {match_type}")
        found = []
        for entity, values in self.configs.items():
            names = dict(entity)
            if strict and set(names) != set(types):
                continue
            if not strict and IP in names and IP not in types and types:
                continue
            if all(_matches(names, t, m, n) for t, m, n in components):
                found.append((entity, values))
        return sorted(found, key=repr)

    # ----- enforcement -----

    def quota_for(self, user: str, client_id: str, key: str) -> tuple[Entity, float] | None:
        """The most specific configured quota of `key` for this user and client id, Kafka's order."""
        candidates: list[Entity] = [
            ((CLIENT_ID, client_id), (USER, user)),
            ((CLIENT_ID, None), (USER, user)),
            ((USER, user),),
            ((CLIENT_ID, client_id), (USER, None)),
            ((CLIENT_ID, None), (USER, None)),
            ((USER, None),),
            ((CLIENT_ID, client_id),),
            ((CLIENT_ID, None),),
        ]
        for entity in candidates:
            value = self.configs.get(entity, {}).get(key)
            if value is not None:
                return entity, value
        return None

    def connection_throttle(self, ip: str, now_ms: int) -> int:
        """Count a new connection from `ip` against its connection_creation_rate (KIP-612: the quota of that
        IP, else the default IP quota); how long to hold it before closing it, 0 when within the rate."""
        for entity in (((IP, ip),), ((IP, None),)):
            bound = self.configs.get(entity, {}).get(CONNECTION_CREATION_RATE)
            if bound is not None:
                break
        else:
            return 0
        rate = self._rates.setdefault((CONNECTION_CREATION_RATE, ((IP, ip),)), _Rate())
        return rate.throttle_ms(now_ms, 1, bound)

    def mutation_quota(self, user: str, client_id: str, now_ms: int, strict: bool) -> MutationQuota:
        found = self.quota_for(user, client_id, CONTROLLER_MUTATION_RATE)
        if found is None or found[1] <= 0:
            return UNLIMITED
        entity, rate = found
        concrete = tuple((t, n if n is not None else (user if t == USER else client_id)) for t, n in entity)
        bucket = self._buckets.get(concrete)
        if bucket is None:
            bucket = self._buckets[concrete] = _Bucket(rate, rate * WINDOW_SAMPLES, now_ms)
        bucket.refill(now_ms, rate)
        return MutationQuota(bucket, strict)

    def record(self, user: str, client_id: str, key: str, amount: float, now_ms: int) -> int:
        """Count `amount` against the quota that applies; the throttle time in ms (0 when within quota)."""
        if not self.configs:
            return 0
        found = self.quota_for(user, client_id, key)
        if found is None:
            return 0
        entity, bound = found
        # A default entity is shared per concrete user/client, as Kafka's sanitized metric tags are.
        concrete = tuple((t, n if n is not None else (user if t == USER else client_id)) for t, n in entity)
        return self._rates.setdefault((key, concrete), _Rate()).throttle_ms(now_ms, amount, bound)

    def request_time_throttle(self, ctx: QuotaSubject, seconds: float) -> int:
        """Count `seconds` of the broker's thread spent on this request against the request_percentage quota
        (KIP-124: n% is n% of one thread's time, and sluice serves requests on one thread); the throttle time
        in ms, 0 when within quota or when none applies."""
        if not self.configs or ctx.api_key in REQUEST_TIME_EXEMPT:
            return 0
        # Kafka records request time as a percentage of one second; the rate per second is then the percentage.
        return self.record(
            _quota_user(ctx), ctx.client_id or "", REQUEST_PERCENTAGE, seconds * 100, ctx.now_ms
        )


def _quota_user(ctx: QuotaSubject) -> str:
    """The user a quota names: the principal without its type ("User:alice" is user "alice"), as Kafka's
    KafkaPrincipal.getName; unauthenticated clients are ANONYMOUS."""
    principal = getattr(ctx, "principal", None) or ANONYMOUS
    return principal.split(":", 1)[1] if ":" in principal else principal


def mutation_quota(ctx: QuotaSubject, strict: bool) -> MutationQuota:
    """The controller_mutation_rate quota of this request's user and client id, if one is set."""
    quotas = ctx.quotas
    if quotas is None or not quotas.configs:
        return UNLIMITED
    user = _quota_user(ctx)
    return quotas.mutation_quota(user, ctx.client_id or "", ctx.now_ms, strict)


def _matches(names: dict[str, str | None], entity_type: str, match_type: int, match: str | None) -> bool:
    if entity_type not in names:
        return False
    name = names[entity_type]
    if match_type == MATCH_EXACT:
        return name == match
    if match_type == MATCH_DEFAULT:
        return name is None
    return name is not None


# Never throttled for request time: what a client needs to connect and log in (Kafka exempts these too,
# and a muted login would only be retried).
REQUEST_TIME_EXEMPT = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate


def throttled(ctx: QuotaSubject, response: Any, key: str, amount: int, now_ms: int) -> Any:
    """Count a produce/fetch against its byte-rate quota and put the throttle time in the response. The shell
    then stops reading from the connection for that long (KIP-219: answer first, then mute)."""
    quotas = ctx.quotas
    if quotas is None or not quotas.configs:
        return response
    user = _quota_user(ctx)
    throttle = quotas.record(user, ctx.client_id or "", key, amount, now_ms)
    if throttle:
        response.throttle_time_ms = throttle
    return response
