"""The client library against the real broker (SASL_SSL, TLS 1.3, ACLs, topics.yaml applied).

- keyed events land on the partition Kafka's murmur2 picks (librdkafka murmur2_random ==
  Java's partitioner, which tests/unit/test_client_murmur2.py ties to the Kafka jars);
- every kind of bad input lands in dead_letter with its exact original bytes and headers;
- a fuzzed batch round-trips: records on the topics == records sent, nothing lost;
- ACL refusals surface as delivery failures, never as silent loss;
- the consumer factory reads with a registry group, as that group's principal.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from hypothesis import HealthCheck, given, settings

from hanzo_stream.client import envelope
from hanzo_stream.client.consumer import UnknownGroup, make_consumer
from hanzo_stream.client.dead_letters import headers_dict
from hanzo_stream.client.keying import partition
from hanzo_stream.client.producer import DeliveryFailed, EventProducer, make_producer
from hanzo_stream.client.router import Router
from hanzo_stream.core import dead_letter as dl
from hanzo_stream.schemas.store import load
from hanzo_stream.schemas.validator import Validator
from tests.unit.test_client_fuzz import raw_inputs

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def schemas():
    return load(ROOT / "schemas")


def producer_as(cluster, registry, schemas, principal: str, **kw) -> EventProducer:
    return EventProducer.connect(cluster.as_(principal), stage=principal, registry=registry,
                                 schemas=schemas, **kw)


def ends(cluster, topic: str, timeout: float = 30.0) -> dict[int, int]:
    """High watermarks; retried while freshly created partitions still elect leaders."""
    import time

    from confluent_kafka import KafkaException

    c = Consumer(cluster.admin.confluent() | {"group.id": f"hs-test-{uuid.uuid4()}"})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                md = c.list_topics(topic, timeout=10).topics[topic]
                return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                        for p in md.partitions}
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def read_since(cluster, topic: str, start: dict[int, int], timeout: float = 30.0) -> list:
    """Every record appended to `topic` after the offsets in `start` (read as admin)."""
    end = ends(cluster, topic)
    want = sum(end[p] - start.get(p, 0) for p in end)
    c = Consumer(cluster.admin.confluent() | {"group.id": f"hs-test-{uuid.uuid4()}",
                                              "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, start.get(p, 0)) for p in end])
    out: list = []
    try:
        import time

        deadline = time.monotonic() + timeout
        while len(out) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m)
    finally:
        c.close()
    assert len(out) == want, f"read {len(out)} of {want} records from {topic}"
    return out


def llm_event(team: str, run: str, **data):
    return envelope.build("llm.usage.completed", "llm-gateway", {
        "request_id": f"{run}-{team}", "model": "zen-72b", "provider": "together", "prompt_tokens": 10,
        "completion_tokens": 5, "total_tokens": 15, "cost_usd": 0.000042, **data},
        team_id=team, org_id="org_1")


def test_keyed_events_land_on_the_murmur2_partition(hip_cluster, registry, schemas):
    run = uuid.uuid4().hex[:8]
    start = ends(hip_cluster, "llm_usage")
    p = producer_as(hip_cluster, registry, schemas, "llm-gateway")
    teams = [f"team_{run}_{i}" for i in range(60)]
    for t in teams:
        p.send(llm_event(t, run))
    p.flush_or_raise()
    got = [m for m in read_since(hip_cluster, "llm_usage", start) if run in m.value().decode()]
    assert len(got) == len(teams)
    n = registry.topic("llm_usage").partitions
    for m in got:
        assert m.partition() == partition(m.key(), n), m.key()
        assert json.loads(m.value())["team_id"] == m.key().decode()
    assert len({m.partition() for m in got}) > 4  # the keys really spread


BAD = [
    ("malformed", b'{"schema": "hanzo.stream.v1", "type": ', "json.malformed"),
    ("invalid utf-8", b'{"type": "llm.usage.completed", "x": "\xc3\x28"}', "utf8.invalid"),
    ("oversized", b'{"pad": "' + b"x" * 300_000 + b'"}', "size.too_large"),
    ("no ms", None, "schema.value"),
    ("wrong type", None, "schema.type"),
    ("missing field", None, "schema.required"),
    ("null key", None, "key.missing"),
    ("tombstone", "TOMBSTONE", "json.malformed"),
]


def _bad_value(name: str, run: str) -> bytes | None:
    e = llm_event(f"team_{run}", run)
    if name == "no ms":
        e["timestamp"] = "2026-11-22T10:00:00Z"
    elif name == "wrong type":
        e["data"]["cost_usd"] = "0.42"
    elif name == "missing field":
        e["data"].pop("model")
    elif name == "null key":
        e["team_id"] = None
    return json.dumps(e).encode()


def test_bad_input_lands_in_dead_letter_with_original_bytes(hip_cluster, registry, schemas):
    run = uuid.uuid4().hex[:8]
    start_dl, start_topic = ends(hip_cluster, dl.TOPIC), ends(hip_cluster, "llm_usage")
    p = producer_as(hip_cluster, registry, schemas, "llm-gateway")
    sent = {}
    for name, value, _ in BAD:
        value = None if value == "TOMBSTONE" else value if value is not None else _bad_value(name, run)
        out = p.send_bytes(value, topic="llm_usage", key=f"k-{run}-{name}".encode())
        sent[name] = value
        assert out.__class__.__name__ == "Refused", name
    p.send(llm_event(f"team_{run}", run))  # and one valid event
    p.flush_or_raise()
    assert (p.counts.received, p.counts.accepted, p.counts.dead_lettered) == (len(BAD) + 1, 1, len(BAD))
    dead = {headers_dict(m.headers())[dl.H_ORIGINAL_KEY]: m
            for m in read_since(hip_cluster, dl.TOPIC, start_dl)
            if headers_dict(m.headers()).get(dl.H_ORIGINAL_KEY, "").startswith(f"k-{run}-")}
    assert len(dead) == len(BAD)
    for name, _, error_class in BAD:
        m = dead[f"k-{run}-{name}"]
        h = headers_dict(m.headers())
        assert m.value() == sent[name], name  # the original bytes, untouched
        assert m.key() == b"llm_usage"
        assert h[dl.H_SOURCE_TOPIC] == "llm_usage" and h[dl.H_STAGE] == "producer:llm-gateway"
        assert h[dl.H_ERROR_CLASS] == error_class, (name, h[dl.H_ERROR_MESSAGE])
        assert h[dl.H_SOURCE_PARTITION] == h[dl.H_SOURCE_OFFSET] == "-1"
        assert h[dl.H_FAILED_AT].endswith("Z") and len(h[dl.H_FAILED_AT]) == 24
    assert "milliseconds" in headers_dict(dead[f"k-{run}-no ms"].headers())[dl.H_ERROR_MESSAGE]
    assert len(read_since(hip_cluster, "llm_usage", start_topic)) >= 1


def test_fuzzed_batch_round_trips_nothing_lost(hip_cluster, registry, schemas):
    batch: list[bytes | None] = []

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(value=raw_inputs)
    def collect(value):
        batch.append(value)

    collect()
    starts = {t.name: ends(hip_cluster, t.name) for t in registry.topics}
    admin = EventProducer(make_producer(hip_cluster.admin), registry, schemas, "fuzz",
                          max_event_bytes=4096)
    outcomes = [admin.send_bytes(v) for v in batch]
    admin.flush_or_raise()
    c = admin.counts
    assert c.received == len(batch) == c.accepted + c.dead_lettered == c.delivered
    landed = Counter()
    dead_values = Counter()
    for t in registry.topics:
        for m in read_since(hip_cluster, t.name, starts[t.name]):
            if t.name == dl.TOPIC and headers_dict(m.headers()).get(dl.H_STAGE) == "producer:fuzz":
                dead_values[m.value()] += 1
            landed[t.name] += 1
    assert sum(landed[t] for t in landed if t != dl.TOPIC) >= c.accepted
    assert sum(dead_values.values()) == c.dead_lettered
    refused = Counter(o.value for o in outcomes if o.__class__.__name__ == "Refused")
    assert dead_values == refused  # byte-identical originals, each exactly once


def test_acl_refusals_are_delivery_failures_not_silence(hip_cluster, registry, schemas):
    p = producer_as(hip_cluster, registry, schemas, "insights-capture",
                    **{"message.timeout.ms": 10000})
    p.send(llm_event("team_x", "acl"))  # insights-capture may not write llm_usage
    with pytest.raises(DeliveryFailed, match="llm_usage"):
        p.flush_or_raise(timeout=20)
    assert p.counts.failed == 1


def test_consumer_factory_reads_with_the_registry_group(hip_cluster, registry, schemas):
    run = uuid.uuid4().hex[:8]
    p = producer_as(hip_cluster, registry, schemas, "llm-gateway")
    p.send(llm_event(f"team_{run}", run))
    p.flush_or_raise()
    c = make_consumer("llm-metrics", hip_cluster.as_("llm-metrics"), registry=registry)
    try:
        import time

        deadline, found = time.monotonic() + 60, None
        while found is None and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None and run.encode() in m.value():
                found = m
                c.store_offsets(m)
        assert found is not None
        assert Validator(schemas).check(json.loads(found.value())) is None
    finally:
        c.close()
    with pytest.raises(UnknownGroup):
        make_consumer("llm-metrics-adhoc", hip_cluster.as_("llm-metrics"), registry=registry)


def test_router_is_reusable_without_a_producer(registry, schemas):
    # Services that batch on their own (HTTP capture) route first and produce later.
    r = Router(registry, Validator(schemas))
    assert r.route_event(llm_event("t", "r")).topic == "llm_usage"
