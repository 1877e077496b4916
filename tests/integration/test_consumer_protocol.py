"""KIP-848 on the real broker: the platform's consumers use `group.protocol=consumer`, and a
member joining or leaving a live group does not stop the other members.

Two consumers of the registry group llm-metrics (as the llm-metrics principal) read
llm_usage while llm-gateway produces a steady, bounded stream tagged with this run's id.
Under the classic eager protocol every member gives up all its partitions at each join or
leave; here the broker moves partitions one member at a time, so the first consumer keeps
its other partitions and keeps consuming from them while the second joins and leaves.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupType

from hanzo_stream.client import envelope
from hanzo_stream.client.consumer import make_consumer
from hanzo_stream.client.producer import EventProducer
from hanzo_stream.monitoring.lag_exporter import Collector
from hanzo_stream.schemas.store import load

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
GROUP, TOPIC = "llm-metrics", "llm_usage"


class Member:
    """One consumer polling in its own thread; records what it holds and receives, when."""

    def __init__(self, cluster, registry, run: str):
        self.run = run.encode()
        self.assigned: set[int] = set()
        self.revoked_ever: set[int] = set()
        self.got: list[tuple[float, int, bytes]] = []  # (monotonic time, partition, value)
        self.first_assigned_at: float | None = None
        self._stop = threading.Event()
        self.consumer = make_consumer(GROUP, cluster.as_(GROUP), registry=registry,
                                      subscribe=False)
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _on_assign(self, _c, parts):
        self.assigned |= {p.partition for p in parts}
        if parts and self.first_assigned_at is None:
            self.first_assigned_at = time.monotonic()

    def _on_revoke(self, _c, parts):
        self.assigned -= {p.partition for p in parts}
        self.revoked_ever |= {p.partition for p in parts}

    def _loop(self):
        while not self._stop.is_set():
            m = self.consumer.poll(0.2)
            if m is None or m.error() is not None:
                continue
            if self.run in m.value():
                self.got.append((time.monotonic(), m.partition(), m.value()))
            self.consumer.store_offsets(m)

    def received_between(self, t0: float, t1: float, partitions: set[int]) -> int:
        return sum(1 for t, p, _ in self.got if t0 <= t <= t1 and p in partitions)

    def leave(self):
        self._stop.set()
        self.thread.join(30)
        self.consumer.close()  # KIP-848: a leave heartbeat, no group-wide rebalance


def wait_until(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


def test_a_member_joining_or_leaving_does_not_stop_the_others(hip_cluster, registry):
    run = uuid.uuid4().hex[:10]
    schemas = load(ROOT / "schemas")
    stop = threading.Event()
    sent: list[bytes] = []

    def produce():  # ~100 events/s over 8 partitions, at most 60 s
        producer = EventProducer.connect(hip_cluster.as_("llm-gateway"), stage="llm-gateway",
                                         registry=registry, schemas=schemas)
        for i in range(6000):
            if stop.is_set():
                break
            event = envelope.build("llm.usage.completed", "llm-gateway", {
                "request_id": f"{run}-{i}", "model": "zen-72b", "provider": "together",
                "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2,
                "cost_usd": 0.0001}, team_id=f"team_{run}_{i % 64}", org_id="org_hanzo")
            producer.send(event)
            sent.append(f"{run}-{i}".encode())
            producer.poll(0)
            time.sleep(0.01)
        producer.flush_or_raise(60)

    a = Member(hip_cluster, registry, run)
    wait_until(lambda: len(a.assigned) == 8, 60, "the first member to hold all 8 partitions")
    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    try:
        wait_until(lambda: len(a.got) >= 50, 60, "the first member to consume")
        admin = hip_cluster.admin_client()  # held: a collected client never answers
        desc = admin.describe_consumer_groups([GROUP], request_timeout=60)[GROUP].result(90)
        assert desc.type == ConsumerGroupType.CONSUMER  # the KIP-848 protocol, not classic

        # Join: from B's subscribe until B consumes, A keeps the partitions it is not
        # handing over and keeps consuming them.
        joined = time.monotonic()
        b = Member(hip_cluster, registry, run)
        wait_until(lambda: b.got, 60, "the joining member to consume")
        join_done = time.monotonic()
        moved = set(b.assigned)
        kept = a.assigned - moved
        assert moved and kept, (a.assigned, b.assigned)
        assert a.revoked_ever == moved  # only what B took, never all of A's partitions
        assert a.received_between(joined, join_done, kept) > 0, (
            f"A received nothing from its kept partitions {kept} during B's join "
            f"({join_done - joined:.1f}s)")
        # On-call sees the group as usual: the lag exporter lists it with both members.
        snap = Collector(hip_cluster.admin).collect()
        assert next(g for g in snap.groups if g.group == GROUP).members == 2

        # Leave: A goes on consuming its partitions and gets B's back.
        left = time.monotonic()
        b.leave()
        wait_until(lambda: a.assigned == set(range(8)), 60, "A to take back B's partitions")
        wait_until(lambda: any(p in moved for t, p, _ in a.got if t > left), 60,
                   "A to consume from the partitions B held")
        leave_done = time.monotonic()
        assert a.received_between(left, leave_done, kept) > 0, (
            f"A received nothing from {kept} while B left ({leave_done - left:.1f}s)")
        assert a.revoked_ever == moved
    finally:
        stop.set()
        writer.join(90)
    # Nothing the producer sent is missing from what the two members received.
    def request_ids() -> set[bytes]:
        return {v.split(b'"request_id":"', 1)[1].split(b'"', 1)[0] for *_, v in a.got + b.got}

    try:
        wait_until(lambda: set(sent) <= request_ids(), 60, "every event to be consumed")
    finally:
        a.leave()
