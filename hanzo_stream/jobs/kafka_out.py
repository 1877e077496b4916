"""Kafka writes made from the Spark driver: dead letters and billing events.

Side outputs are few (invalid or late records, one billing event per team and hour), so
they are collected to the driver and produced with confluent-kafka as the job's principal.
A batch only counts as done when every record is acknowledged: `flush_or_raise` fails the
micro-batch otherwise and Spark replays it. Replays re-send identical records (same key,
value, headers and, for billing, the same deterministic id), so consumers deduplicate by
id, and dead-letter readers by the provenance headers (source topic, partition, offset).

No input can stop a job: a value too large for dead_letter is truncated visibly
(hanzo_stream/core/dead_letter.py). Transient broker trouble is retried a bounded number of
times; what still fails raises DeliveryFailed naming the record's provenance, so the batch
fails loudly and Spark never commits past the record.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException

from ..client.producer import DELIVERY_TIMEOUT_S, producer_config
from ..core.connection import Connection
from ..core.dead_letter import DeadLetterRecord, dead_letter_record

# The client library's settings: idempotent, retried by librdkafka until the delivery
# timeout, so a broker failover costs a pause, not a failed batch.
# Errors a later attempt can cure: the broker or the network, not the record. librdkafka's
# delivery reports never set KafkaError.retriable(), so the codes are listed here.
RETRIABLE = frozenset({
    KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN, KafkaError._QUEUE_FULL, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.NETWORK_EXCEPTION, KafkaError.BROKER_NOT_AVAILABLE, KafkaError.KAFKA_STORAGE_ERROR,
})


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

    def dead_letter(self, stage: str, failed_at: str) -> DeadLetterRecord:
        return dead_letter_record(self.topic, self.value, self.key, partition=self.partition,
                                  offset=self.offset, error_class=self.error_class,
                                  error_message=self.error_message, schema=self.schema,
                                  stage=stage, failed_at=failed_at)

    @property
    def origin(self) -> str:
        return f"{self.topic} partition {self.partition} offset {self.offset}"


@dataclass
class _Pending:
    """A record in flight, kept until acknowledged so it can be produced again."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    origin: str
    attempts: int = 0

    def describe(self) -> str:
        return f"{self.topic} record for {self.origin}"


def retriable(err: object) -> bool:
    """True when producing the same record again may succeed (never for a fatal error)."""
    if not isinstance(err, KafkaError) or err.fatal():
        return False
    return err.retriable() or err.code() in RETRIABLE


class KafkaOut:
    """One idempotent producer per job, logged in as the job's principal.

    attempts: how often a record is produced before its failure fails the batch;
    backoff_s: the wait before the first retry (doubled each time); queue_wait_s: how long
    send() waits for a full local queue to drain before giving up.
    """

    def __init__(self, conn: Connection | None, client_id: str, producer=None, *,
                 attempts: int = 3, backoff_s: float = 0.5, queue_wait_s: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep):
        if producer is None:
            from confluent_kafka import Producer

            assert conn is not None
            producer = Producer(producer_config(conn, client_id))
        self._producer = producer
        self.attempts, self.backoff_s, self.queue_wait_s = max(1, attempts), backoff_s, queue_wait_s
        self._sleep = sleep
        self._retry: list[_Pending] = []
        self._errors: list[str] = []

    def _on_delivery(self, p: _Pending) -> Callable:
        def done(err, msg) -> None:
            self._failed(p, err)
        return done

    def _failed(self, p: _Pending, err: object) -> None:
        if err is None:
            return
        if retriable(err) and p.attempts < self.attempts:
            self._retry.append(p)
        else:
            self._errors.append(f"{p.describe()} failed after {p.attempts} attempt(s): {err}")

    def _produce(self, p: _Pending) -> None:
        """produce(), waiting a bounded time for a full local queue to drain."""
        p.attempts += 1
        deadline = time.monotonic() + self.queue_wait_s
        while True:
            try:
                self._producer.produce(p.topic, value=p.value, key=p.key, headers=p.headers,
                                       on_delivery=self._on_delivery(p))
                return
            except BufferError:  # local queue full: let deliveries drain, then retry
                if time.monotonic() >= deadline:
                    self._errors.clear()
                    self._retry.clear()
                    raise DeliveryFailed(
                        f"{p.describe()}: the local producer queue stayed full for "
                        f"{self.queue_wait_s:g}s (is the broker reachable?)") from None
                self._producer.poll(0.1)
            except KafkaException as e:  # refused before it left (e.g. an unknown topic)
                self._failed(p, e.args[0] if e.args else e)
                return

    def send(self, topic: str, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]] | None = None, origin: str | None = None) -> None:
        """Queue one record; `origin` names it in errors (default: its key)."""
        self._produce(_Pending(topic, key, value, headers, origin or f"key {key!r}"))

    def dead_letter(self, rejected: list[Rejected], stage: str, failed_at: str) -> None:
        for r in rejected:
            rec = r.dead_letter(stage, failed_at)
            self.send(rec.topic, rec.key, rec.value, rec.headers, origin=r.origin)

    def flush_or_raise(self, timeout: float = DELIVERY_TIMEOUT_S + 10) -> None:
        """Wait for every acknowledgement, re-producing retriable failures with backoff;
        raise DeliveryFailed if a record is still not acknowledged."""
        rounds = 0
        while True:  # ends: every record's attempts are bounded by self.attempts
            left = self._producer.flush(timeout)
            retry, errors = self._retry, self._errors
            self._retry, self._errors = [], []
            if left or errors:
                raise DeliveryFailed(_failure(left, timeout, errors))
            if not retry:
                return
            self._sleep(self.backoff_s * 2 ** rounds)
            rounds += 1
            for p in retry:
                self._produce(p)


def _failure(left: int, timeout: float, errors: list[str]) -> str:
    parts = [f"{len(errors)} record(s) failed: " + "; ".join(errors[:5])] if errors else []
    if left:
        parts.append(f"{left} record(s) unacknowledged after {timeout:.0f}s")
    return "; ".join(parts)
