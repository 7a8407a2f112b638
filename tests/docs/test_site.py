"""The documentation site builds with strict link checking, and its generated reference pages say what the code
and a running broker do."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.client.wire import WireClient
from sluice.testing import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from reference import kafka_apis  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as `make docs` builds it but into a scratch directory."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr
    return out


def test_every_page_is_built_with_its_links_and_anchors_checked(site: Path) -> None:
    pages = {path.relative_to(site).parent.as_posix() for path in site.rglob("index.html")}
    for page in (
        "quickstart/application",
        "quickstart/spark",
        "quickstart/operator",
        "quickstart/gateways",
        "reference/cli",
        "reference/settings",
        "reference/kafka-apis",
        "reference/metrics",
        "architecture",
        "storage",
        "guide/spark-reference",
    ):
        assert page in pages, sorted(pages)


def test_the_reference_pages_are_written_from_the_code(site: Path) -> None:
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in (
        "sluice serve",
        "sluice storage repair",
        "sluice groups reset-offsets",
        "sluice acls add",
    ):
        assert f">{command}<" in cli
    assert "--rest-instance-timeout-ms" in cli
    settings = (site / "reference" / "settings" / "index.html").read_text()
    for setting in ("fsync_before_ack", "min_free_bytes", "log.retention.ms", "consumer.session.timeout.ms"):
        assert setting in settings
    metrics = (site / "reference" / "metrics" / "index.html").read_text()
    for series in (
        "sluice_request_duration_seconds_bucket",
        "sluice_consumer_group_lag",
        "sluice_gateway_requests_total",
    ):
        assert series in metrics
    # The pipeline's README, next to its code, is shown whole.
    assert "Exactly-once writes" in (site / "guide" / "spark-reference" / "index.html").read_text()


def test_the_kafka_api_page_is_what_apiversions_answers(site: Path, broker: BrokerProcess) -> None:
    """Every API a real broker lists in ApiVersions is on the page with the same range; none else is served."""
    with WireClient.connect(broker.bootstrap) as client:
        answer = client.call("ApiVersions", 0, client.request_class("ApiVersions")())
    served = {key.api_key: (key.min_version, key.max_version) for key in answer.api_keys}
    assert len(served) > 30
    page = {key: versions for key, _, versions, reason in kafka_apis.rows() if not reason}
    assert page == {key: f"{low}-{high}" if low != high else f"{low}" for key, (low, high) in served.items()}
    html = (site / "reference" / "kafka-apis" / "index.html").read_text()
    assert f"sluice serves {len(served)} Kafka APIs." in html


def test_the_readmes_links_lead_to_pages() -> None:
    """The README is outside the site (mkdocs checks only docs/): its links are checked here."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert len(targets) > 10
    missing = [target for target in targets if "://" not in target and not (ROOT / target).exists()]
    assert not missing
