"""Which broker configs Kafka lets AlterConfigs change while the broker runs, with their types and bounds.

Facts from Kafka 4.x's DynamicBrokerConfig (AllDynamicConfigs: SSL/SASL/listener reconfigurables, the log
cleaner, the log defaults, thread pools, connection limits, producer state, remote log, broker quotas);
the descriptions are ours. A name Kafka knows but does not list here is static: AlterConfigs refuses it.
A name Kafka does not know at all is a custom config, which Kafka stores as it is.
"""

from __future__ import annotations

import re

from sluice.broker.config_defs import (
    BOOLEAN,
    CLASS,
    DOUBLE,
    INT,
    LIST,
    LONG,
    LONG_MAX,
    PASSWORD,
    SHORT,
    STRING,
    TOPIC_CONFIGS,
    ConfigDef,
)

INT_MAX = str(2**31 - 1)
DOUBLE_MAX = "1.7976931348623157E308"


def _c(name: str, type_: int, default: str | None, doc: str, **kw: object) -> ConfigDef:
    return ConfigDef(name, type_, default, doc, None, **kw)  # type: ignore[arg-type]


# SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only under a listener prefix (listener.name.<l>.ssl...).
SSL_RECONFIGURABLE = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.certificates",
    }
)

# Listener-wide settings that Kafka applies to the whole cluster (the rest of the listener set is per broker).
CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)
THREAD_POOL_CONFIGS = frozenset(
    {"num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir", "background.threads"}
)

_SECURITY_AND_LISTENER: list[ConfigDef] = [
    _c("listeners", STRING, "PLAINTEXT://:9092", "Addresses the broker listens on."),
    _c("listener.security.protocol.map", STRING, "", "Security protocol of each listener name."),
    _c("principal.builder.class", CLASS, "", "Builds the principal of an authenticated connection."),
    _c("ssl.protocol", STRING, "TLSv1.3", "TLS protocol of the SSLContext."),
    _c("ssl.provider", STRING, None, "Security provider of SSL connections."),
    _c("ssl.cipher.suites", LIST, "", "Cipher suites SSL connections may use."),
    _c("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", "TLS versions SSL connections may use."),
    _c("ssl.keystore.type", STRING, "JKS", "Format of the key store."),
    _c("ssl.keystore.location", STRING, None, "Where the key store is."),
    _c("ssl.keystore.password", PASSWORD, None, "Password of the key store."),
    _c("ssl.key.password", PASSWORD, None, "Password of the private key."),
    _c("ssl.keystore.certificate.chain", PASSWORD, None, "Certificate chain in PEM."),
    _c("ssl.keystore.key", PASSWORD, None, "Private key in PEM."),
    _c("ssl.truststore.type", STRING, "JKS", "Format of the trust store."),
    _c("ssl.truststore.location", STRING, None, "Where the trust store is."),
    _c("ssl.truststore.password", PASSWORD, None, "Password of the trust store."),
    _c("ssl.truststore.certificates", PASSWORD, None, "Trusted certificates in PEM."),
    _c("ssl.keymanager.algorithm", STRING, "SunX509", "Key manager factory algorithm."),
    _c("ssl.trustmanager.algorithm", STRING, "PKIX", "Trust manager factory algorithm."),
    _c("ssl.endpoint.identification.algorithm", STRING, "https", "How peer host names are checked."),
    _c("ssl.secure.random.implementation", STRING, None, "SecureRandom implementation."),
    _c(
        "ssl.client.auth",
        STRING,
        "none",
        "Whether clients must present certificates.",
        choices=("required", "requested", "none"),
    ),
    _c("ssl.engine.factory.class", CLASS, None, "Custom SSLEngine factory."),
    _c("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI", "SASL mechanism between brokers."),
    _c("sasl.jaas.config", PASSWORD, None, "JAAS login context of SASL connections."),
    _c("sasl.enabled.mechanisms", LIST, "GSSAPI", "SASL mechanisms the broker offers."),
    _c("sasl.kerberos.service.name", STRING, None, "Kerberos principal name Kafka runs as."),
    _c("sasl.kerberos.kinit.cmd", STRING, "/usr/bin/kinit", "Kerberos kinit command."),
    _c("sasl.kerberos.ticket.renew.window.factor", DOUBLE, "0.8", "Share of a ticket's life before renewal."),
    _c("sasl.kerberos.ticket.renew.jitter", DOUBLE, "0.05", "Random jitter added to the renewal time."),
    _c("sasl.kerberos.min.time.before.relogin", LONG, "60000", "Sleep between refresh attempts (ms)."),
    _c("sasl.kerberos.principal.to.local.rules", LIST, "DEFAULT", "Principal to short name rules."),
    _c(
        "sasl.login.refresh.window.factor",
        DOUBLE,
        "0.8",
        "Share of a credential's life before refresh.",
        minimum=0.5,
        maximum=1.0,
    ),
    _c(
        "sasl.login.refresh.window.jitter",
        DOUBLE,
        "0.05",
        "Random jitter added to the refresh time.",
        minimum=0.0,
        maximum=0.25,
    ),
    _c(
        "sasl.login.refresh.min.period.seconds",
        SHORT,
        "60",
        "Least time between refreshes (s).",
        minimum=0,
        maximum=900,
    ),
    _c(
        "sasl.login.refresh.buffer.seconds",
        SHORT,
        "300",
        "Time to keep before expiry when refreshing (s).",
        minimum=0,
        maximum=3600,
    ),
    _c("max.connections", INT, INT_MAX, "Connections the broker accepts at once.", minimum=0),
    _c(
        "max.connection.creation.rate",
        INT,
        INT_MAX,
        "New connections per second the broker accepts.",
        minimum=0,
    ),
    _c("num.network.threads", INT, "3", "Threads reading requests from the network.", minimum=1),
]

_OTHERS: list[ConfigDef] = [
    # LogCleaner.ReconfigurableConfigs
    _c("log.cleaner.threads", INT, "1", "Threads compacting logs.", minimum=0),
    _c("log.cleaner.dedupe.buffer.size", LONG, str(128 * 1024 * 1024), "Memory for the cleaner's key map."),
    _c("log.cleaner.io.buffer.load.factor", DOUBLE, "0.9", "How full the cleaner's key map may get."),
    _c(
        "log.cleaner.io.buffer.size", INT, str(512 * 1024), "Memory for the cleaner's I/O buffers.", minimum=0
    ),
    _c("log.cleaner.io.max.bytes.per.second", DOUBLE, DOUBLE_MAX, "Cleaner I/O ceiling."),
    _c("log.cleaner.backoff.ms", LONG, "15000", "Cleaner sleep when nothing is due.", minimum=0),
    # DynamicThreadPool
    _c("num.io.threads", INT, "8", "Threads processing requests.", minimum=1),
    _c("num.replica.fetchers", INT, "1", "Threads fetching from leaders."),
    _c("num.recovery.threads.per.data.dir", INT, "2", "Threads recovering logs at start.", minimum=1),
    _c("background.threads", INT, "10", "Threads for background tasks.", minimum=1),
    _c("metric.reporters", LIST, "", "Classes reporting metrics."),
    # SocketServer.ReconfigurableConfigs (max.connections and max.connection.creation.rate are above)
    _c("max.connections.per.ip", INT, INT_MAX, "Connections one address may hold.", minimum=0),
    _c("max.connections.per.ip.overrides", STRING, "", "Per-address connection limits (host:count,...)."),
    # DynamicProducerStateManagerConfig
    _c(
        "producer.id.expiration.ms",
        INT,
        "86400000",
        "How long an idle producer id's state is kept.",
        minimum=1,
    ),
    _c(
        "transaction.partition.verification.enable",
        BOOLEAN,
        "true",
        "Verify transactional produce (KIP-890).",
    ),
    # DynamicRemoteLogConfig
    _c(
        "remote.log.index.file.cache.total.size.bytes",
        LONG,
        str(1024**3),
        "Remote index cache size.",
        minimum=1,
    ),
    _c("remote.fetch.max.wait.ms", INT, "500", "Longest wait of a remote fetch.", minimum=1),
    _c("remote.log.manager.copy.max.bytes.per.second", LONG, LONG_MAX, "Remote copy ceiling.", minimum=1),
    _c("remote.log.manager.fetch.max.bytes.per.second", LONG, LONG_MAX, "Remote fetch ceiling.", minimum=1),
    _c("remote.list.offsets.request.timeout.ms", LONG, "30000", "Timeout of remote ListOffsets.", minimum=1),
    _c(
        "remote.log.manager.copier.thread.pool.size",
        INT,
        "10",
        "Threads copying to remote storage.",
        minimum=1,
    ),
    _c(
        "remote.log.manager.expiration.thread.pool.size",
        INT,
        "10",
        "Threads expiring remote segments.",
        minimum=1,
    ),
    _c("remote.log.reader.threads", INT, "10", "Threads reading remote segments.", minimum=1),
    # QuotaConfig.brokerQuotaConfigs
    _c(
        "leader.replication.throttled.rate",
        LONG,
        LONG_MAX,
        "Leader-side replication throttle (B/s).",
        minimum=0,
    ),
    _c(
        "follower.replication.throttled.rate",
        LONG,
        LONG_MAX,
        "Follower-side replication throttle (B/s).",
        minimum=0,
    ),
    _c(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        LONG,
        LONG_MAX,
        "Log dir move throttle (B/s).",
        minimum=0,
    ),
]

# DynamicLogConfig: the broker names of topic configs (their types and bounds are the topic config's).
# Kafka keeps no broker synonym for the replica throttle lists; remote.storage.enable has none either.
_NO_BROKER_SYNONYM = frozenset(
    {"follower.replication.throttled.replicas", "leader.replication.throttled.replicas"}
)
_LOG_DEFAULTS: list[ConfigDef] = [
    ConfigDef(d.broker_synonym, d.type, d.default, d.doc, None, d.choices, d.minimum, d.maximum)
    for name, d in TOPIC_CONFIGS.items()
    if d.broker_synonym is not None
    and name not in _NO_BROKER_SYNONYM
    and name != "message.timestamp.difference.max.ms"  # gone in Kafka 4.0
]

DYNAMIC_BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d for d in _SECURITY_AND_LISTENER + _OTHERS + _LOG_DEFAULTS
}

# Set only for a node id, never as the cluster-wide default ("").
PER_BROKER_CONFIGS = (
    frozenset(d.name for d in _SECURITY_AND_LISTENER if d.name not in CLUSTER_LEVEL_LISTENER_CONFIGS)
    | SSL_RECONFIGURABLE
)

# Kafka broker configs that exist but are read at start only (KafkaConfig names minus the dynamic ones).
# Not every one of Kafka's hundreds: those sluice reports or has an equivalent of, and the usual suspects.
STATIC_BROKER_CONFIGS = frozenset(
    {
        "node.id",
        "broker.id",
        "log.dirs",
        "log.dir",
        "metadata.log.dir",
        "process.roles",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "controller.listener.names",
        "inter.broker.listener.name",
        "security.inter.broker.protocol",
        "broker.rack",
        "auto.create.topics.enable",
        "num.partitions",
        "default.replication.factor",
        "delete.topic.enable",
        "socket.request.max.bytes",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "socket.listen.backlog.size",
        "queued.max.requests",
        "queued.max.request.bytes",
        "fetch.max.bytes",
        "connections.max.idle.ms",
        "connections.max.reauth.ms",
        "connection.failed.authentication.delay.ms",
        "log.retention.check.interval.ms",
        "log.retention.hours",
        "log.retention.minutes",
        "log.roll.hours",
        "log.roll.jitter.hours",
        "log.flush.scheduler.interval.ms",
        "log.flush.offset.checkpoint.interval.ms",
        "log.flush.start.offset.checkpoint.interval.ms",
        "log.cleaner.enable",
        "log.message.format.version",
        "offsets.topic.num.partitions",
        "offsets.topic.replication.factor",
        "offsets.topic.segment.bytes",
        "offsets.topic.compression.codec",
        "offsets.retention.minutes",
        "offsets.retention.check.interval.ms",
        "offsets.commit.timeout.ms",
        "offsets.load.buffer.size",
        "offset.metadata.max.bytes",
        "transaction.state.log.replication.factor",
        "transaction.state.log.num.partitions",
        "transaction.state.log.min.isr",
        "transaction.state.log.segment.bytes",
        "transaction.max.timeout.ms",
        "transactional.id.expiration.ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "group.initial.rebalance.delay.ms",
        "group.min.session.timeout.ms",
        "group.max.session.timeout.ms",
        "group.max.size",
        "group.coordinator.rebalance.protocols",
        "group.consumer.session.timeout.ms",
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.max.size",
        "quota.window.num",
        "quota.window.size.seconds",
        "replica.lag.time.max.ms",
        "replica.fetch.max.bytes",
        "replica.fetch.wait.max.ms",
        "replica.socket.timeout.ms",
        "num.replica.alter.log.dirs.threads",
        "authorizer.class.name",
        "super.users",
        "sasl.mechanism.controller.protocol",
        "request.timeout.ms",
        "metadata.max.retention.bytes",
        "metadata.max.retention.ms",
        "unstable.api.versions.enable",
        "compression.type.producer",
        "message.max.bytes.producer",
        "delegation.token.secret.key",
        "delegation.token.max.lifetime.ms",
        "delegation.token.expiry.time.ms",
    }
)

LISTENER_PREFIX = re.compile(r"^listener\.name\.([^.]*)\.(.*)$")
