"""The record key: the registry's key field for the topic, from the envelope, else from data.

team_id and org_id live on the envelope, agent_id inside data (agent RPC metering). A key
that is missing, empty or not a string is an error: a null key would scatter one team's
events over partitions (librdkafka picks a random partition) and break their order.

partition() says where a key lands without a broker, as the Java client would put it.
"""

from __future__ import annotations

from typing import Any

from ..schemas import refusals as R
from ..schemas.refusals import Invalid


def key_value(event: dict[str, Any], field: str) -> Any:
    if field in event:
        return event[field]
    data = event.get("data")
    return data.get(field) if isinstance(data, dict) else None


def key_for(event: dict[str, Any], field: str, topic: str, schema: str = "") -> bytes | Invalid:
    """The key bytes, or why there are none."""
    v = key_value(event, field)
    if v is None or v == "":
        return R.KEY_MISSING.invalid(field, schema, field=field, topic=topic)
    if not isinstance(v, str):
        return R.KEY_NOT_STRING.invalid(field, schema, field=field, topic=topic, got=type(v).__name__)
    try:
        return v.encode("utf-8")
    except UnicodeEncodeError:
        return R.KEY_SURROGATE.invalid(field, schema, field=field)


def partition(key: bytes, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for a non-null key:
    `Utils.toPositive(Utils.murmur2(key)) % numPartitions`, proven against Kafka's jars in
    tests/unit/test_client_murmur2.py. A key must land on the same partition whichever client
    produced it, or per-team order breaks the day a second language writes to the topic.

    The hash is kafka-python's murmur2 (unsigned, where Java's is signed: the same bits). The
    producer partitions in librdkafka (`murmur2_random`, the same function for non-null keys),
    so this is for tools and tests, off the per-record path; imported here, not at the top,
    so that services and Spark jobs that import keying do not load kafka-python."""
    from kafka.partitioner.default import murmur2

    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
