"""DescribeClientQuotas and AlterClientQuotas (KIP-546): quotas per user and/or client id, kept durably."""

from __future__ import annotations

from typing import Any

from sluice.broker.api import RequestContext, Respond, handles, response_class
from sluice.broker.broker import Broker
from sluice.broker.quotas import ClientQuotas, make_entity
from sluice.errors import ErrorCode, KafkaError

DescribeClientQuotasResponse = response_class("DescribeClientQuotas")
AlterClientQuotasResponse = response_class("AlterClientQuotas")


def _quotas(ctx: RequestContext) -> ClientQuotas:
    """The quotas the dispatcher keeps (sluice.broker.dispatch); a request made without one has none."""
    if ctx.quotas is None:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "this broker keeps no client quotas")
    return ctx.quotas


@handles("DescribeClientQuotas")
def describe_client_quotas(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DescribeClientQuotasResponse
    components = [(c.entity_type, c.match_type, c.match) for c in request.components]
    try:
        found = _quotas(ctx).describe(components, request.strict)
    except KafkaError as exc:
        return Respond(R(error_code=exc.code, error_message=exc.message, entries=None))
    entries = [
        R.EntryData(
            entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            values=[R.ValueData(key=k, value=v) for k, v in sorted(values.items())],
        )
        for entity, values in found
    ]
    return Respond(R(error_code=0, error_message=None, entries=entries))


@handles("AlterClientQuotas")
def alter_client_quotas(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = AlterClientQuotasResponse
    results = []
    changed = False
    for entry in request.entries:
        echo = [R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]
        result = R.EntryData(error_code=0, error_message=None, entity=echo)
        try:
            entity = make_entity((e.entity_type, e.entity_name) for e in entry.entity)
            _quotas(ctx).alter(
                entity, [(op.key, op.value, op.remove) for op in entry.ops], request.validate_only
            )
            changed = changed or not request.validate_only
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, exc.message
        results.append(result)
    if changed:
        _quotas(ctx).save()
    return Respond(R(entries=results))
