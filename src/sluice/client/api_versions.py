"""What a broker serves, from its ApiVersions answer: the API keys with their version ranges, and the feature
levels its cluster has finalized (ApiVersions v3+, e.g. Kafka's `share.version`).

Asked with the wire client over a connection made elsewhere (`secure.connect_secure`), for the facts
confluent-kafka does not expose.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.client.wire import WireClient

API_VERSIONS_KEY = 18
# The first ApiVersions version whose answer lists the finalized features.
FEATURES_VERSION = 3


@dataclass(frozen=True)
class BrokerApis:
    # api key -> (min version, max version)
    versions: dict[int, tuple[int, int]]
    # feature name -> finalized max version level; empty when the broker lists none (or predates v3)
    finalized: dict[str, int] = field(default_factory=dict)


def api_versions(client: WireClient, *, features: bool = False) -> BrokerApis:
    """Version 0 first: every broker answers it, whatever it speaks (a newer request needs a version the
    broker knows). With `features`, then v3 where the broker serves it, for the finalized features."""
    answer = client.call("ApiVersions", 0, client.request_class("ApiVersions")())
    if answer.error_code != 0:
        raise ValueError(f"ApiVersions error {answer.error_code}")
    versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    if not features or versions.get(API_VERSIONS_KEY, (0, 0))[1] < FEATURES_VERSION:
        return BrokerApis(versions)
    request = client.request_class("ApiVersions")(client_software_name="sluice", client_software_version="1")
    answer = client.call("ApiVersions", FEATURES_VERSION, request)
    if answer.error_code != 0:
        return BrokerApis(versions)
    return BrokerApis(versions, {f.name: f.max_version_level for f in answer.finalized_features or ()})
