"""Property-based tests of the HTTP APIs from their OpenAPI documents (Schemathesis): REST v3 from
docs/openapi/rest-v3.yaml (Confluent's REST v3 document, as sluice serves it: docs/openapi/README.md), and
kafka-pixy's HTTP API from the gateway's own openapi.yaml.

Every operation gets schema-valid and schema-violating requests; whatever they hold, the answer is no 5xx, a
status the document lists, its content type, and a body of its schema. A few examples per operation, a fixed
seed (derandomized), a real `sluice gateway` process and the real broker: a bounded, repeatable run. The long
run by hand is in docs/openapi/README.md.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis
from gateway_helpers import wait_for_ping
from hypothesis import HealthCheck, Phase, settings
from rest_helpers import RestGateway, cluster_id
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sluice.testing import BrokerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
REST_V3 = ROOT / "docs" / "openapi" / "rest-v3.yaml"
PIXY = ROOT / "src" / "sluice" / "gateway" / "openapi.yaml"
# Schema-valid input a server may still refuse (a topic that does not exist, a config name Kafka does not have)
# and schema-violating input Confluent's server takes (a query flag that is no boolean) are not failures: the
# checks are the answers' conformance and that nothing is a 5xx.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = settings(
    max_examples=3,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
pytestmark = pytest.mark.xdist_group(
    "rest-v3"
)  # with test_rest_v3_conformance: one worker, no gateway per worker


@pytest.fixture(scope="module")
def rest_v3(rest_proxy: RestGateway) -> schemathesis.schemas.BaseSchema:
    schema = schemathesis.openapi.from_path(REST_V3)
    schema.config.update(base_url=f"{rest_proxy.url}/v3")
    return schema


@pytest.fixture(scope="module")
def the_cluster(rest_proxy: RestGateway) -> str:
    return cluster_id(rest_proxy.url)


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as shared:
        yield shared


rest_v3_schema = schemathesis.pytest.from_fixture("rest_v3")


@rest_v3_schema.parametrize()
@EXAMPLES
def test_rest_v3(case: schemathesis.Case, the_cluster: str, session: requests.Session) -> None:
    # Generated cluster ids would all be 404: the cluster's own reaches every operation's handler.
    case.path_parameters = {**(case.path_parameters or {}), "cluster_id": the_cluster}
    case.call_and_validate(session=session, checks=CHECKS, timeout=30)


@pytest.fixture(scope="module")
def pixy_http(broker: BrokerProcess) -> Iterator[str]:
    """A `sluice gateway` process serving only kafka-pixy's HTTP API: its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "gateway",
            "--bootstrap",
            broker.bootstrap,
            "--grpc-listen",
            "",
            "--rest-listen",
            "off",
            "--http-listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_ping(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def pixy(pixy_http: str) -> schemathesis.schemas.BaseSchema:
    schema = schemathesis.openapi.from_path(PIXY)
    schema.config.update(base_url=pixy_http)
    return schema


pixy_schema = schemathesis.pytest.from_fixture("pixy")


@pixy_schema.parametrize()
@EXAMPLES
def test_kafka_pixy_http(case: schemathesis.Case, session: requests.Session) -> None:
    case.call_and_validate(session=session, checks=CHECKS, timeout=30)
