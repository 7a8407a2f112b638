"""One module per API family. Importing this package registers every handler with `broker.api.HANDLERS`."""

from sluice.broker.handlers import admin, configs, fetch, groups, metadata, produce, security, transactions

__all__ = ["admin", "configs", "fetch", "groups", "metadata", "produce", "security", "transactions"]
