"""A producer whose clock runs ahead (issue 24, item 8: clock skew).

Kafka 4 accepts record times up to an hour ahead of the broker (log.message.timestamp.after.
max.ms), and billing-agg's watermark follows the newest event time it has seen. Before
`future` (consumers/billing-agg.yaml), one llm.usage.completed event stamped 30 minutes ahead
moved the watermark 30 minutes forward, and every other producer's events of the next 30
minutes were dead-lettered as late: their hours went unbilled. Now the job refuses the event
that is ahead of its own clock (`event.future`), and the others are billed.

The broker is this module's own: a fresh llm_usage holds only this test's events, so the
spec runs as it ships (the shared session broker holds 2030s events from the other tests,
which the shipped spec refuses).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from hanzo_stream.core import dead_letter as dl
from hanzo_stream.local import kafka

from .conftest import Cluster, apply_registry, start_local, wait_until_logged_in
from .spark_harness import (
    ROOT,
    assert_caught_up,
    billing_events,
    dead_letters,
    expected_billing,
    headers,
    produce,
    run_once,
    usage,
)

pytestmark = pytest.mark.integration
SHIPPED = ROOT / "consumers"  # the spec as it ships: future 1m
SOURCE = "hanzo-stream/billing-agg"


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory, registry) -> Iterator[Cluster]:
    home = tmp_path_factory.mktemp("clock-skew")
    cluster = start_local(home, registry, brokers=1)
    try:
        apply_registry(cluster, registry)
        wait_until_logged_in([cluster.as_(p) for p in ("llm-gateway", "billing-aggregator")])
        yield cluster
    finally:
        kafka.stop(home / "kafka")


def test_a_producer_clock_ahead_cannot_make_other_producers_events_late(own_broker, tmp_path):
    run = uuid.uuid4().hex[:8]
    now = datetime.now(UTC)
    hour = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)  # a closed hour
    first = [usage(run, "a", "x", hour + timedelta(minutes=5), 1),
             usage(run, "a", "x", hour + timedelta(minutes=30), 2)]
    ahead = usage(run, "b", "x", now + timedelta(minutes=30), 3)  # a clock 30 minutes fast
    where1 = produce(own_broker, "llm-gateway", "llm_usage", [(e["team_id"], e) for e in first + [ahead]])
    run_once(own_broker, "billing-agg", "billing-aggregator", tmp_path, SHIPPED)

    # The next batch: the rest of the hour from an honest producer, and an event of a minute ago
    # that moves the watermark past the hour's end. With the fast clock's event counted, the
    # watermark would be 20 minutes ahead of now and all of these late.
    then = [usage(run, "a", "x", hour + timedelta(minutes=50), 4),
            usage(run, "c", "y", datetime.now(UTC) - timedelta(minutes=1), 5)]
    where2 = produce(own_broker, "llm-gateway", "llm_usage", [(e["team_id"], e) for e in then])
    run_once(own_broker, "billing-agg", "billing-aggregator", tmp_path, SHIPPED)

    letters = dead_letters(own_broker, "billing-agg", "llm_usage", set(where1 + where2))
    assert [(json.loads(m.value())["id"], headers(m)[dl.H_ERROR_CLASS]) for m in letters] == [
        (ahead["id"], b"event.future")], [headers(m).get(dl.H_ERROR_MESSAGE) for m in letters]
    message = headers(letters[0])[dl.H_ERROR_MESSAGE].decode()
    assert "ahead of the job's clock" in message and "the producer's clock is wrong" in message
    assert letters[0].value() == json.dumps(ahead).encode()  # the original bytes

    # The honest hour is billed whole: all three of team a's events, exact.
    got = billing_events(own_broker, run)
    want = expected_billing(first + then, hour + timedelta(hours=1), SOURCE)
    assert len(want) == 1 and next(iter(want.values()))["data"]["request_count"] == 3
    assert {e["data"]["billing_id"]: e for e in got} == want
    assert_caught_up(own_broker, "billing-agg", "llm_usage")
