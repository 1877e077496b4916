"""Kafka writes made from the Spark driver: dead letters and billing events.

Side outputs are few (invalid or late records, one billing event per team and hour), so
they are collected to the driver and produced with confluent-kafka as the job's principal.
A batch only counts as done when every record is acknowledged: `flush_or_raise` fails the
micro-batch otherwise and Spark replays it. Replays re-send identical records (same key,
value, headers and, for billing, the same deterministic id), so consumers deduplicate by
id, and dead-letter readers by the provenance headers (source topic, partition, offset).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..connection import Connection
from ..dead_letter import (
    H_ERROR_CLASS,
    H_ERROR_MESSAGE,
    H_FAILED_AT,
    H_ORIGINAL_KEY,
    H_SCHEMA,
    H_SOURCE_OFFSET,
    H_SOURCE_PARTITION,
    H_SOURCE_TOPIC,
    H_STAGE,
    TOPIC,
)

# The standard's producer defaults.
PRODUCER_DEFAULTS = {
    "acks": "all", "enable.idempotence": True, "retries": 3, "retry.backoff.ms": 100,
    "max.in.flight.requests.per.connection": 5, "compression.type": "lz4",
    "batch.size": 16384, "linger.ms": 5,
}


class DeliveryFailed(RuntimeError):
    """Some records were not acknowledged; the micro-batch must fail and be replayed."""


@dataclass(frozen=True)
class Rejected:
    """One record a job could not process, with where it came from and why."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    error_class: str
    error_message: str
    schema: str = ""


def dead_letter_headers(r: Rejected, stage: str, failed_at: str) -> list[tuple[str, bytes]]:
    headers = [
        (H_SOURCE_TOPIC, r.topic.encode()),
        (H_SOURCE_PARTITION, str(r.partition).encode()),
        (H_SOURCE_OFFSET, str(r.offset).encode()),
        (H_ERROR_CLASS, r.error_class.encode()),
        (H_ERROR_MESSAGE, r.error_message.encode()),
        (H_SCHEMA, r.schema.encode()),
        (H_FAILED_AT, failed_at.encode()),
        (H_STAGE, stage.encode()),
    ]
    if r.key is not None:
        headers.append((H_ORIGINAL_KEY, r.key))
    return headers


class KafkaOut:
    """One idempotent producer per job, logged in as the job's principal."""

    def __init__(self, conn: Connection, client_id: str, producer=None):
        if producer is None:
            from confluent_kafka import Producer

            producer = Producer(conn.confluent() | PRODUCER_DEFAULTS | {"client.id": client_id})
        self._producer = producer
        self._errors: list[str] = []

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def send(self, topic: str, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]] | None = None) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, headers=headers,
                                       on_delivery=self._on_delivery)
                return
            except BufferError:  # local queue full: let deliveries drain, then retry
                self._producer.poll(0.1)

    def dead_letter(self, rejected: list[Rejected], stage: str, failed_at: str) -> None:
        for r in rejected:
            self.send(TOPIC, r.topic.encode(), r.value, dead_letter_headers(r, stage, failed_at))

    def flush_or_raise(self, timeout: float = 60.0) -> None:
        left = self._producer.flush(timeout)
        errors, self._errors = self._errors, []
        if left or errors:
            raise DeliveryFailed(f"{left} record(s) unacknowledged after {timeout:.0f}s; "
                                 f"errors: {errors[:5]}")
