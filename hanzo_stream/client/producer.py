"""The producer every service uses: the standard's settings, validation, keying, dead letters.

    producer = EventProducer.connect(stage="llm-gateway")
    producer.send(envelope.build("llm.usage.completed", "llm-gateway", data, team_id=..., org_id=...))
    producer.flush_or_raise()

Every event handed to send()/send_bytes() ends in exactly one place: its topic (valid) or
dead_letter (refused, with its original bytes and provenance headers). `counts` proves it:
received == accepted + dead_lettered, always.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError

from ..core.connection import Connection
from ..registry import Registry, load_registry
from ..schemas.store import SchemaSet, load_schemas
from ..schemas.validator import Validator
from .dead_letters import record
from .router import MAX_EVENT_BYTES, Accepted, Refused, Router

# How long a record may take from send() to its outcome: long enough to ride out a leader
# election or a broker restart; then the application is told it failed.
DELIVERY_TIMEOUT_S = 120

# The standard's producer settings (docs/client.md, "Delivery", says why each one).
STANDARD_SETTINGS: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    # Retries are a time budget, not the standard's `retries: 3`: three retries last ~0.7 s,
    # so a leader election would become failures the application must resend, and a resend
    # is a new record (a possible duplicate), where an idempotent retry never is. A broker
    # that answers with an error (NOT_ENOUGH_REPLICAS, NOT_LEADER...) is retried with backoff
    # 100 ms doubling to 1 s: 30 retries are ~28 s of refusals, after which the application
    # gets the broker's own error. A broker that does not answer uses up no retries; the
    # delivery timeout bounds that case.
    "retries": 30,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "delivery.timeout.ms": DELIVERY_TIMEOUT_S * 1000,
    "max.in.flight.requests.per.connection": 5,
    "compression.type": "lz4",
    "batch.size": 16384,
    "linger.ms": 5,
    # Java's default partitioner for keyed records: same key, same partition, any language.
    "partitioner": "murmur2_random",
}


# Broker errors that mean "this broker could not write it", not "this record is wrong": an
# append that meets a full log disk is answered UNKNOWN (the JVM's fault on the index's
# memory map) or KAFKA_STORAGE_ERROR, and the broker then stops, so the partition's next
# leader takes the same record (tests/integration/test_full_disk.py). librdkafka gives up on
# them at once; the library sends the record again, same bytes and id, at most RESENDS times
# (a copy, if the first attempt was written after all, is absorbed by id: docs/client.md).
RESENT_ERRORS = frozenset({KafkaError.UNKNOWN, KafkaError.KAFKA_STORAGE_ERROR})
RESENDS = 2

# confluent-kafka's Python callbacks keep their names (every other override is a librdkafka
# property, written with underscores for dots: linger_ms=5).
CALLBACKS = frozenset({"error_cb", "stats_cb", "throttle_cb", "oauth_cb", "logger", "on_delivery"})


def producer_config(conn: Connection | dict[str, Any], client_id: str | None = None,
                    **overrides: Any) -> dict[str, Any]:
    """The one librdkafka producer configuration: a connection (or its librdkafka options, as
    a subprocess receives them), the standard's settings, then overrides (linger_ms=20)."""
    cfg = (conn if isinstance(conn, dict) else conn.confluent()) | STANDARD_SETTINGS
    if client_id:
        cfg["client.id"] = client_id
    return cfg | {k if k in CALLBACKS else k.replace("_", "."): v for k, v in overrides.items()}


def make_producer(conn: Connection | None = None, client_id: str | None = None, **overrides: Any):
    """A bare confluent_kafka.Producer with the standard's settings (no validation)."""
    from confluent_kafka import Producer

    return Producer(producer_config(conn or Connection.from_env(), client_id, **overrides))


OnDelivery = Callable[[Any, Any], None]  # (KafkaError | None, confluent_kafka.Message)


class DeliveryFailed(RuntimeError):
    """Records the broker did not acknowledge; the message lists the first errors."""


@dataclass
class Counts:
    received: int = 0
    accepted: int = 0
    dead_lettered: int = 0
    delivered: int = 0
    failed: int = 0
    resent: int = 0  # sent again by the library after a broker's write error (RESENT_ERRORS)
    errors: list[str] = field(default_factory=list)

    @property
    def balanced(self) -> bool:
        return self.received == self.accepted + self.dead_lettered


def registry_file() -> Path:
    return Path(os.environ.get("HANZO_STREAM_REGISTRY", "topics.yaml"))


class EventProducer:
    """Validate, key and produce events; refused ones go to dead_letter, never dropped."""

    def __init__(self, producer, registry: Registry, schemas: SchemaSet, stage: str,
                 max_event_bytes: int = MAX_EVENT_BYTES):
        self.producer = producer
        self.router = Router(registry, Validator(schemas), max_event_bytes)
        self.stage = f"producer:{stage}"
        self.counts = Counts()
        self._resends: deque[tuple] = deque()

    @classmethod
    def connect(cls, conn: Connection | None = None, *, stage: str | None = None,
                registry: Registry | None = None, schemas: SchemaSet | None = None,
                client_id: str | None = None, **overrides: Any) -> EventProducer:
        """From HANZO_STREAM_* (or `conn`), topics.yaml and schemas/ in the working directory."""
        conn = conn or Connection.from_env()
        stage = stage or conn.username or "unknown"
        producer = make_producer(conn, client_id or stage, **overrides)
        return cls(producer, registry or load_registry(registry_file()),
                   schemas or load_schemas(Path("schemas")), stage)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.counts.delivered += 1
        else:
            self.counts.failed += 1
            if len(self.counts.errors) < 20:
                self.counts.errors.append(f"{msg.topic()} [{msg.partition()}]: {err.name()} "
                                          f"({err.str()})")

    def _produce(self, topic: str, value: bytes | None, key: bytes | None,
                 headers: list[tuple[str, bytes]] | None = None,
                 on_delivery: OnDelivery | None = None, attempt: int = 0) -> None:
        def report(err, msg) -> None:
            if err is not None and err.code() in RESENT_ERRORS and attempt < RESENDS:
                # Sent again from poll()/flush(), never from inside librdkafka's callback.
                self.counts.resent += 1
                self._resends.append((topic, value, key, headers, on_delivery, attempt + 1))
                return
            self._on_delivery(err, msg)
            if on_delivery is not None:
                on_delivery(err, msg)

        while True:
            try:
                self.producer.produce(topic, value, key, headers=headers, on_delivery=report)
                return
            except BufferError:  # local queue full: serve deliveries, then retry
                self.producer.poll(0.05)

    def _send_again(self) -> int:
        sent = 0
        while self._resends:
            topic, value, key, headers, on_delivery, attempt = self._resends.popleft()
            self._produce(topic, value, key, headers, on_delivery, attempt)
            sent += 1
        return sent

    def _dispatch(self, outcome: Accepted | Refused,
                  on_delivery: OnDelivery | None) -> Accepted | Refused:
        self.counts.received += 1
        self._send_again()
        if isinstance(outcome, Accepted):
            self._produce(outcome.topic, outcome.value, outcome.key, on_delivery=on_delivery)
            self.counts.accepted += 1
        else:
            r = record(outcome, self.stage)
            self._produce(r.topic, r.value, r.key, r.headers, on_delivery=on_delivery)
            self.counts.dead_lettered += 1
        return outcome

    def send(self, event: Any, on_delivery: OnDelivery | None = None) -> Accepted | Refused:
        """Produce an event dict (see envelope.build); returns where it went and why.

        on_delivery(err, msg), if given, is called once for this event from poll()/flush():
        err None means acknowledged; anything else means it was not (docs/client.md)."""
        return self._dispatch(self.router.route_event(event), on_delivery)

    def send_bytes(self, value: bytes | None, topic: str | None = None,
                   key: bytes | None = None,
                   on_delivery: OnDelivery | None = None) -> Accepted | Refused:
        """Produce serialized event bytes as received from elsewhere (checked byte by byte)."""
        return self._dispatch(self.router.route_bytes(value, topic, key), on_delivery)

    def poll(self, timeout: float = 0) -> int:
        served = self.producer.poll(timeout)
        self._send_again()
        return served

    def flush(self, timeout: float = DELIVERY_TIMEOUT_S + 10) -> int:
        """Wait for outstanding deliveries; by default until each record has an outcome."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.producer.flush(max(0.0, deadline - time.monotonic()))
            if not self._resends:
                return left
            self._send_again()
            if time.monotonic() >= deadline:
                return len(self.producer)

    def flush_or_raise(self, timeout: float = DELIVERY_TIMEOUT_S + 10) -> None:
        left = self.flush(timeout)
        if left or self.counts.failed:
            waiting = f"{left} record(s) still unacknowledged after {timeout:.0f}s; " if left else ""
            raise DeliveryFailed(f"{waiting}{self.counts.failed} record(s) failed; first errors: "
                                 f"{self.counts.errors[:5]}")
