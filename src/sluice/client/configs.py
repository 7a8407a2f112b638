"""DescribeConfigs of one topic through the wire client, naming the keys wanted.

confluent-kafka's describe_configs always asks for every config. A sluice broker lists its read-only
`sluice.cleaner.*` entries (each compacted partition's dirty ratio and last cleaning) only to a request
that names them, so that a describe of all configs lists exactly what Kafka would; tools that want them ask
here. Other brokers leave unknown names out of the answer, as Kafka does.
"""

from __future__ import annotations

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode, KafkaError

TOPIC_RESOURCE = 2
DESCRIBE_CONFIGS_VERSION = 4


def describe_topic_configs(
    client: WireClient, topic: str, keys: list[str] | None = None
) -> dict[str, str | None]:
    """{name: value} of `topic`'s configs named in `keys` (None: every config). Raises KafkaError."""
    R = client.request_class("DescribeConfigs")
    resource = R.DescribeConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=keys
    )
    (result,) = client.call("DescribeConfigs", DESCRIBE_CONFIGS_VERSION, R(resources=[resource])).results
    if result.error_code:
        try:
            code = ErrorCode(result.error_code)
        except ValueError:  # a code newer than this client's table
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        raise KafkaError(code, result.error_message or "")
    return {c.name: c.value for c in result.configs}
