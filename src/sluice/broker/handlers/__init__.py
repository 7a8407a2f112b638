"""One module per API family. Importing this package registers every handler with `broker.api.HANDLERS`."""

from sluice.broker.handlers import (
    admin,
    cluster,
    configs,
    fetch,
    groups,
    metadata,
    produce,
    quotas,
    security,
    share,
    share_groups,
    topic_partitions,
    transactions,
)

__all__ = [
    "admin",
    "cluster",
    "configs",
    "fetch",
    "groups",
    "metadata",
    "produce",
    "quotas",
    "security",
    "share",
    "share_groups",
    "topic_partitions",
    "transactions",
]
