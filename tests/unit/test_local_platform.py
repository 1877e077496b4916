"""The local platform without processes: the demo's events, the component list, the watch's
judgement of "working". The real thing runs in tests/integration/test_local_platform.py."""

from __future__ import annotations

import base64
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from hanzo_stream.client.router import Accepted, Refused, Router
from hanzo_stream.client.validator import Validator
from hanzo_stream.local import demo, kafka, platform
from hanzo_stream.schemas.store import load

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def router(registry) -> Router:
    return Router(registry, Validator(load(ROOT / "schemas")))


@pytest.mark.parametrize("service", sorted(demo.SERVICES))
def test_demo_events_are_valid_and_land_on_the_registry_topic(router, registry, service):
    rng = random.Random(7)
    for _ in range(300):
        event = demo.MAKERS[service](rng, datetime.now(UTC))
        out = router.route_event(event)
        assert isinstance(out, Accepted), out
        assert service in registry.topic(out.topic).producers


@pytest.mark.parametrize("service", sorted(demo.SERVICES))
def test_demo_breaks_events_both_ways(router, service):
    rng = random.Random(11)
    event = demo.MAKERS[service](rng, datetime.now(UTC))
    refused = router.route_event(demo.broken_for_client(event))
    assert isinstance(refused, Refused), refused
    raw = router.route_bytes(demo.broken_raw(event), None, b"legacy")
    assert isinstance(raw, Refused)
    assert raw.error.error_class in ("json.malformed", "key.missing"), raw.error


def test_demo_weights_cover_every_producing_service(registry):
    producers = {p for t in registry.topics for p in t.producers} - {"*", "billing-aggregator"}
    assert set(demo.SERVICES) == producers  # a new producing service gets demo traffic too
    assert sum(demo.SERVICES.values()) == pytest.approx(1.0)


def test_components_start_in_dependency_order_with_one_per_job(registry):
    names = [c.name for c in platform.components(registry)]
    jobs = sorted(p.stem for p in (ROOT / "consumers").glob("*.yaml"))
    assert names == ["kafka", "reconcile", "schema-registry", "schemas", "kafka-exporter", "prometheus",
                     *jobs, "demo"]


def _ctx(registry, tmp_path: Path) -> platform.Context:
    return platform.Context(tmp_path, registry, Console(quiet=True))


def test_working_needs_growth_since_the_watch_began(registry, tmp_path):
    ctx = _ctx(registry, tmp_path)
    before = {"lag": {}, "clickhouse_rows": 100, "audit_files": 3, "dead_letters": 5, "billing_events": 0}
    now = {"lag": {"analytics-ingest": 0, "billing-agg": 4}, "clickhouse_rows": 100, "audit_files": 4,
           "dead_letters": 9, "billing_events": 0}
    assert platform.working(ctx, now, before) == [
        "lag of audit-archive", "new rows in ClickHouse", "billing windows"]
    now |= {"lag": {"analytics-ingest": 0, "billing-agg": 4, "audit-archive": 0},
            "clickhouse_rows": 101, "billing_events": 2}
    assert platform.working(ctx, now, before) == []


def test_nothing_counts_as_working_from_an_empty_snapshot(registry, tmp_path):
    missing = platform.working(_ctx(registry, tmp_path), {})
    assert len(missing) == 3 + 4


def test_up_refuses_unknown_components(registry, tmp_path):
    with pytest.raises(ValueError, match="unknown component.*known: kafka, reconcile"):
        platform.up(_ctx(registry, tmp_path), {"kafak"})


def test_cluster_ids_are_kraft_uuids_that_kafka_storage_can_parse():
    """1 in 64 raw base64 uuids starts with "-", which kafka-storage reads as an option."""
    ids = [kafka.random_cluster_id() for _ in range(5000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)


def test_every_service_breaks_events_both_ways_early_and_one_in_forty():
    """Counted, not drawn: each dead-letter stage gets records within a service's first 80 events."""
    first = [demo.breakage(n) for n in range(1, 2 * demo.INVALID_EVERY + 1)]
    assert first.count("client") == first.count("raw") == 1
    ways = [demo.breakage(n) for n in range(1, 4001)]
    assert ways.count(None) == 4000 - 100 and ways.count("client") == ways.count("raw") == 50
