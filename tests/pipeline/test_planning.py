"""Pure option parsing and offset planning: no broker, no Spark."""

from __future__ import annotations

import itertools
import json

import pytest

from sluice.pipeline.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    PipelineOptionError,
    parse_offset_spec,
    parse_sink_options,
    parse_source_options,
)
from sluice.pipeline.planning import (
    DataLossError,
    OffsetRange,
    check_range_start,
    deserialize_offsets,
    plan_ranges,
    rate_limit,
    resolve_spec,
    serialize_offsets,
)

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def _never_called(_partitions: object, _timestamp: int) -> dict:
    raise AssertionError("offsets for a timestamp were not needed")


@pytest.mark.parametrize(
    ("options", "mode", "message"),
    [
        ({"subscribe": "t", "bogus": "1"}, "batch", "unknown read option(s) for format 'sluice': bogus"),
        ({}, "batch", "one of the options subscribe, subscribePattern or assign is required"),
        ({"subscribe": "t", "assign": '{"t":[0]}'}, "batch", "contradict each other"),
        ({"subscribePattern": "("}, "batch", "not a valid regex"),
        ({"assign": "[0,1]"}, "batch", "must be a JSON object"),
        ({"assign": '{"t":["x"]}'}, "batch", "needs a list of partition numbers"),
        ({"subscribe": "t", "startingOffsets": "{bad"}, "batch", "startingOffsets is not valid JSON"),
        ({"subscribe": "t", "startingOffsets": '{"t":{"0":-7}}'}, "batch", "must be >= 0, -2 or -1"),
        ({"subscribe": "t", "startingOffsets": '{"t":{"zero":1}}'}, "batch", "is not a number"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "batch", "it would read nothing"),
        ({"subscribe": "t", "endingOffsets": "earliest"}, "batch", "not valid as an end"),
        ({"subscribe": "t", "endingOffsets": "latest"}, "stream", "not valid for a streaming read"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "10"}, "batch", "only applies to streaming reads"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "0"}, "stream", "must be a positive integer"),
        ({"subscribe": "t", "failOnDataLoss": "maybe"}, "stream", "must be true or false"),
        ({"subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "1"}, "batch", "contradict"),
        ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "batch", "use startingOffsets instead"),
        ({"assign": '{"t":[0]}', "startingOffsets": '{"t":{"1":3}}'}, "batch", "not assigned"),
    ],
)
def test_bad_source_options_are_explained(options: dict[str, str], mode: str, message: str) -> None:
    with pytest.raises(PipelineOptionError) as caught:
        parse_source_options({**BOOTSTRAP, **options}, mode)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_bootstrap_is_required() -> None:
    with pytest.raises(PipelineOptionError, match=r"kafka\.bootstrap\.servers is required"):
        parse_source_options({"subscribe": "t"}, "batch")


def test_options_are_case_insensitive_and_kafka_settings_pass_through() -> None:
    options = parse_source_options(
        {**BOOTSTRAP, "SUBSCRIBE": "b,a", "includeheaders": "TRUE", "kafka.fetch.max.bytes": "1000"}, "stream"
    )
    assert options.subscription.topics == ("a", "b")
    assert options.include_headers is True
    assert options.kafka_config == {"bootstrap.servers": "127.0.0.1:9092", "fetch.max.bytes": "1000"}
    assert options.starting.kind == "latest"


def test_sink_options() -> None:
    assert parse_sink_options({**BOOTSTRAP, "topic": "t"}).topic == "t"
    with pytest.raises(PipelineOptionError, match="unknown write option"):
        parse_sink_options({**BOOTSTRAP, "subscribe": "t"})


def test_offset_json_keeps_earliest_and_latest_markers() -> None:
    spec = parse_offset_spec('{"t":{"0":23,"1":-2,"2":-1}}', "startingOffsets")
    assert spec.per_partition == {("t", 0): 23, ("t", 1): EARLIEST, ("t", 2): LATEST}
    watermarks = {("t", 0): (0, 50), ("t", 1): (5, 50), ("t", 2): (0, 40)}
    resolved = resolve_spec(spec, list(watermarks), watermarks, _never_called, "startingOffsets")
    assert resolved == {("t", 0): 23, ("t", 1): 5, ("t", 2): 40}


def test_specific_offsets_must_cover_exactly_the_subscribed_partitions() -> None:
    watermarks = {("t", 0): (0, 5), ("t", 1): (0, 5)}
    with pytest.raises(PipelineOptionError, match="leaves out partitions"):
        resolve_spec(parse_offset_spec('{"t":{"0":1}}', "o"), list(watermarks), watermarks, _never_called, "o")
    with pytest.raises(PipelineOptionError, match="do not exist"):
        resolve_spec(
            parse_offset_spec('{"t":{"0":1,"1":1,"7":1}}', "o"), list(watermarks), watermarks, _never_called, "o"
        )


def test_timestamp_without_a_later_record_means_the_end() -> None:
    watermarks = {("t", 0): (0, 9), ("t", 1): (0, 4)}

    def lookup(partitions: list, timestamp: int) -> dict:
        assert timestamp == 1234
        return {("t", 0): 3, ("t", 1): -1}

    spec = OffsetSpec("timestamp", timestamp_ms=1234)
    assert resolve_spec(spec, list(watermarks), watermarks, lookup, "s") == {("t", 0): 3, ("t", 1): 4}


def test_serialized_offsets_have_a_stable_order() -> None:
    offsets = {("b", 10): 1, ("a", 2): 2, ("b", 2): 3}
    text = json.dumps(serialize_offsets(offsets))
    assert text == '{"a": {"2": 2}, "b": {"2": 3, "10": 1}}'
    assert text == json.dumps(serialize_offsets(dict(reversed(list(offsets.items())))))
    assert deserialize_offsets(json.loads(text)) == offsets


def test_min_partitions_splits_big_ranges_in_proportion() -> None:
    ranges = plan_ranges({("t", 0): 0, ("t", 1): 0}, {("t", 0): 90, ("t", 1): 10}, min_partitions=5)
    assert len(ranges) >= 5
    for tp in (("t", 0), ("t", 1)):
        pieces = sorted((r.start, r.end) for r in ranges if (r.topic, r.partition) == tp)
        assert pieces[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    assert sum(r.size for r in ranges) == 100
    assert plan_ranges({("t", 0): 4}, {("t", 0): 4}, None) == []
    assert plan_ranges({("t", 0): 4}, {("t", 0): 9}, 1) == [OffsetRange("t", 0, 4, 9)]


def test_rate_limit_shares_the_budget_by_backlog_and_never_exceeds_it() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    latest = {("t", 0): 900, ("t", 1): 200, ("t", 2): 7}
    end = rate_limit(start, latest, 100)
    advanced = {tp: end[tp] - start[tp] for tp in start}
    assert sum(advanced.values()) == 100
    assert advanced[("t", 0)] == 90 and advanced[("t", 1)] == 10 and advanced[("t", 2)] == 0
    tiny = rate_limit(start, latest, 1)
    assert sum(tiny[tp] - start[tp] for tp in start) == 1
    assert rate_limit(start, latest, 10_000) == latest


def test_lost_offsets_fail_or_skip() -> None:
    watermarks = {("t", 0): (50, 80)}
    with pytest.raises(DataLossError, match=r"offsets 10\.\.49 are no longer on the broker"):
        check_range_start(("t", 0), 10, watermarks, fail_on_data_loss=True)
    assert check_range_start(("t", 0), 10, watermarks, fail_on_data_loss=False) == 50
    with pytest.raises(DataLossError, match="deleted and recreated"):
        check_range_start(("t", 0), 95, watermarks, fail_on_data_loss=True)
    assert check_range_start(("t", 0), 60, watermarks, fail_on_data_loss=True) == 60
