"""Kill brokers under load and account for every event, by id.

Used by the failure tests (tests/integration/test_failover.py) and the benchmark
(bench/failover.py), so both count the same way: each event sent through the client
library gets exactly one outcome from its delivery report (acknowledged, or failed with a
reason), and the topic is then read back to see where every id ended up.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson

from ..client import envelope
from ..client.keying import partition
from ..client.producer import EventProducer
from ..core.connection import Connection

TOPIC = "llm_usage"  # the standard's billing input: the events that must not be lost


@dataclass
class Ledger:
    """Every event sent in one run and what the producer reported for it."""

    run: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    sent: dict[str, float] = field(default_factory=dict)  # id -> when send() returned
    acked: dict[str, float] = field(default_factory=dict)  # id -> when its ack arrived
    failed: dict[str, str] = field(default_factory=dict)  # id -> the error the app saw

    def report(self, event_id: str) -> Callable:
        def done(err, _msg) -> None:
            if err is None:
                self.acked[event_id] = time.monotonic()
            else:
                self.failed[event_id] = err.str()
        return done

    @property
    def unreported(self) -> set[str]:
        """Sent but neither acknowledged nor failed: silently dropped, if flush is over."""
        return set(self.sent) - set(self.acked) - set(self.failed)

    def resume_seconds(self, killed_at: float) -> float | None:
        """From the kill to the first acknowledgement of an event sent after it."""
        after = [self.acked[i] for i, t in self.sent.items() if t > killed_at and i in self.acked]
        return min(after) - killed_at if after else None


def team_keys(partitions: Iterable[int], partition_count: int, prefix: str,
              per_partition: int = 4) -> list[str]:
    """team_id values whose records Kafka's partitioner puts on `partitions` (murmur2)."""
    want = {p: per_partition for p in partitions}
    keys, i = [], 0
    while any(want.values()):
        key = f"{prefix}_{i}"
        p = partition(key.encode(), partition_count)
        if want.get(p):
            want[p] -= 1
            keys.append(key)
        i += 1
    return keys


def usage_event(ledger: Ledger, team: str, i: int) -> dict:
    return envelope.build("llm.usage.completed", "llm-gateway", {
        "request_id": f"{ledger.run}-{i}", "model": "zen-72b", "provider": "together",
        "prompt_tokens": 150, "completion_tokens": 230, "total_tokens": 380,
        "cost_usd": 0.0038}, team_id=team, org_id="org_hanzo")


def send(producer: EventProducer, ledger: Ledger, teams: list[str], count: int,
         rate: float | None = None, between: Callable[[int], None] | None = None) -> None:
    """Send `count` llm_usage events spread over `teams`, at most `rate` per second;
    between(i) runs before event i (where a test kills a broker)."""
    start = time.monotonic()
    for i in range(count):
        if between:
            between(i)
        event = usage_event(ledger, teams[i % len(teams)], i)
        producer.send(event, on_delivery=ledger.report(event["id"]))
        ledger.sent[event["id"]] = time.monotonic()
        producer.poll(0)
        if rate:
            ahead = start + (i + 1) / rate - time.monotonic()
            if ahead > 0:
                producer.poll(ahead)


def leaders(conn: Connection, topic: str = TOPIC) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(conn.confluent())
    parts = admin.list_topics(topic, timeout=30).topics[topic].partitions
    return {p: m.leader for p, m in parts.items()}


def ids_in_topic(conn: Connection, ledger: Ledger, topic: str = TOPIC,
                 timeout: float = 120.0) -> Counter[str]:
    """How often each event id of this run is in the topic, reading every partition to its
    end (as a principal that may read it)."""
    from confluent_kafka import Consumer, TopicPartition

    marker = f'"request_id":"{ledger.run}-'.encode()
    c = Consumer(conn.confluent() | {"group.id": f"failover-reader-{ledger.run}",
                                     "enable.auto.commit": False})
    found: Counter[str] = Counter()
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0])
        todo = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error() is not None:
                    continue
                if m.offset() >= ends[m.partition()] - 1:
                    todo.discard(m.partition())
                if marker in m.value():
                    found[orjson.loads(m.value())["id"]] += 1
        if todo:
            raise TimeoutError(f"{topic}: partitions {sorted(todo)} not read to the end "
                               f"in {timeout:.0f}s")
    finally:
        c.close()
    return found


@dataclass(frozen=True)
class Tally:
    """What a run's ledger and the topic say together."""

    sent: int
    acked: int
    failed: int
    unreported: int  # neither acked nor failed: silent loss
    acked_lost: int  # acknowledged, not in the topic
    duplicated: int  # in the topic more than once
    failed_present: int  # reported failed, yet in the topic (possibly persisted)

    @staticmethod
    def of(ledger: Ledger, in_topic: Counter[str]) -> Tally:
        return Tally(
            sent=len(ledger.sent), acked=len(ledger.acked), failed=len(ledger.failed),
            unreported=len(ledger.unreported),
            acked_lost=sum(1 for i in ledger.acked if not in_topic[i]),
            duplicated=sum(1 for n in in_topic.values() if n > 1),
            failed_present=sum(1 for i in ledger.failed if in_topic[i]))
