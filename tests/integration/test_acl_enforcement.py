"""Real clients at work under the registry's ACLs: consumer groups, PLAIN, kafka-python-ng.

The full matrix (every principal x resource x operation) is test_acl_matrix.py; failed
logins are test_authentication.py. These are the paths a service walks: a group principal
reads and commits with its own group and is refused any other group or topic.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from hanzo_stream.registry import load_registry

pytestmark = pytest.mark.integration
REG = load_registry(Path(__file__).resolve().parents[2] / "topics.yaml")
GROUPS = sorted((g.principal, g.name, g.topics[0]) for g in REG.groups)


def produce(conn, topic: str, value: bytes = b"{}") -> KafkaError | None:
    p = Producer(conn.confluent() | {"enable.idempotence": True, "acks": "all",
                                     "message.timeout.ms": 15000})
    results: list[KafkaError | None] = []
    p.produce(topic, value, key=b"k", on_delivery=lambda e, m: results.append(e))
    p.flush(30)
    return results[0]


def other_topic(principal: str, allowed: set[str]) -> str:
    return next(t.name for t in REG.topics if t.name not in allowed and t.name != "dead_letter")


def _consumer(conn, group: str) -> Consumer:
    return Consumer(conn.confluent() | {"group.id": group, "enable.auto.commit": False,
                                        "auto.offset.reset": "earliest"})


def _read_one(c: Consumer, topic: str, timeout: float = 30.0):
    c.assign([TopicPartition(topic, p, 0) for p in range(REG.topic(topic).partitions)])
    for _ in range(int(timeout * 2)):
        msg = c.poll(0.5)
        if msg is None:
            continue
        return msg
    return None


@pytest.mark.parametrize(("principal", "group", "topic"), GROUPS)
def test_group_principal_reads_its_topic_with_its_group_only(hip_cluster, principal, group, topic):
    assert produce(hip_cluster.admin, topic) is None
    conn = hip_cluster.as_(principal)
    c = _consumer(conn, group)
    try:
        msg = _read_one(c, topic)
        assert msg is not None and msg.error() is None, msg and msg.error()
        c.commit(message=msg, asynchronous=False)  # needs READ on the group
    finally:
        c.close()
    foreign = _consumer(conn, "not-my-group-" + uuid.uuid4().hex[:6])
    try:
        foreign.subscribe([topic])
        msg = next((m for m in (foreign.poll(0.5) for _ in range(60)) if m is not None), None)
        assert msg is not None and msg.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        foreign.close()
    readable = {t for g in REG.groups if g.principal == principal for t in g.topics}
    c = _consumer(conn, group)
    try:
        c.subscribe([other_topic(principal, readable)])
        msg = next((m for m in (c.poll(0.5) for _ in range(60)) if m is not None), None)
        assert msg is not None and msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()


def test_plain_mechanism_logs_in_and_produces(hip_cluster):
    assert produce(hip_cluster.as_("llm-gateway", "PLAIN"), "llm_usage") is None


def test_kafka_python_ng_produces_and_consumes(hip_cluster):
    from kafka import KafkaConsumer, KafkaProducer

    value = uuid.uuid4().hex.encode()
    prod = KafkaProducer(**hip_cluster.as_("iam-service").kafka_python(), acks="all")
    prod.send("audit_log", value, key=b"org-1").get(timeout=30)
    prod.close()
    cons = KafkaConsumer("audit_log", group_id="audit-archive", auto_offset_reset="earliest",
                         consumer_timeout_ms=30000, **hip_cluster.as_("audit-archiver").kafka_python())
    try:
        assert value in {m.value for m in cons}
    finally:
        cons.close()
