"""The producer every service uses: the standard's settings, validation, keying, dead letters.

    producer = EventProducer.from_env(stage="llm-gateway")
    producer.send(envelope.build("llm.usage.completed", "llm-gateway", data, team_id=..., org_id=...))
    producer.flush_or_raise()

Every event handed to send()/send_bytes() ends in exactly one place: its topic (valid) or
dead_letter (refused, with its original bytes and provenance headers). `counts` proves it:
received == accepted + dead_lettered, always.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..connection import Connection
from ..registry import Registry, load_registry
from ..schemas.store import SchemaSet, load_schemas
from .dead_letters import record
from .router import MAX_EVENT_BYTES, Accepted, Refused, Router
from .validator import Validator

# How long a record may take from send() to its acknowledgement before the application is
# told it failed: long enough to ride out a leader election or a broker restart.
DELIVERY_TIMEOUT_S = 120

# The standard's producer settings (docs/client.md says why each one).
STANDARD_SETTINGS: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    # Retries are bounded by time, not by count: the standard's `retries: 3` would turn a
    # 10-second leader election into failures the application must resend, and a resend is
    # a new record (a possible duplicate); an idempotent retry never is (docs/client.md).
    "retries": 2147483647,
    "delivery.timeout.ms": DELIVERY_TIMEOUT_S * 1000,
    "retry.backoff.ms": 100,
    "max.in.flight.requests.per.connection": 5,
    "compression.type": "lz4",
    "batch.size": 16384,
    "linger.ms": 5,
    # Java's default partitioner for keyed records: same key, same partition, any language.
    "partitioner": "murmur2_random",
}


def producer_config(conn: Connection, client_id: str | None = None, **overrides: Any) -> dict[str, Any]:
    cfg = conn.confluent() | STANDARD_SETTINGS
    if client_id:
        cfg["client.id"] = client_id
    return cfg | {k.replace("_", "."): v for k, v in overrides.items()}


def make_producer(conn: Connection | None = None, client_id: str | None = None, **overrides: Any):
    """A bare confluent_kafka.Producer with the standard's settings (no validation)."""
    from confluent_kafka import Producer

    return Producer(producer_config(conn or Connection.from_env(), client_id, **overrides))


OnDelivery = Callable[[Any, Any], None]  # (KafkaError | None, confluent_kafka.Message)


class DeliveryFailed(RuntimeError):
    """Records the broker did not acknowledge; the message lists the first errors."""


# librdkafka's per-batch produce error, as its "msg" debug context logs it, e.g.
# "llm_usage [3]: MessageSet with 5 message(s) (MsgId 1, BaseSeq 0) encountered error:
#  Broker: Not enough in-sync replicas (actions Retry,MsgNotPersisted)"
_BATCH_ERROR = re.compile(r"(?P<topic>\S+) \[(?P<partition>\d+)\]: MessageSet with \d+ message\(s\) "
                          r"\(.*?\) encountered error: (?P<reason>.*) \(actions (?P<actions>[^)]*)\)")


class BrokerErrors(logging.Handler):
    """The last error a broker returned for each partition, while librdkafka retried.

    A record that times out is reported as "Message timed out"; this keeps why (e.g.
    NOT_ENOUGH_REPLICAS) so the failure can name it. librdkafka logs one "msg" debug line
    per produced batch; warnings and errors go on to the `hanzo_stream.client.librdkafka`
    logger, the debug lines stop here.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.last: dict[tuple[str, int], str] = {}
        self.forward = logging.getLogger("hanzo_stream.client.librdkafka")

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        m = _BATCH_ERROR.search(text) if "encountered error" in text else None
        if m:
            self.last[(m["topic"], int(m["partition"]))] = f"{m['reason']} ({m['actions']})"
        if record.levelno >= logging.WARNING:
            self.forward.handle(record)

    def logger(self) -> logging.Logger:
        """A logger for librdkafka's `logger` option, feeding only this handler (unregistered,
        so it goes away with its producer)."""
        log = logging.Logger("hanzo_stream.client.librdkafka", logging.DEBUG)
        log.addHandler(self)
        return log


@dataclass
class Counts:
    received: int = 0
    accepted: int = 0
    dead_lettered: int = 0
    delivered: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def balanced(self) -> bool:
        return self.received == self.accepted + self.dead_lettered


def registry_file() -> Path:
    return Path(os.environ.get("HANZO_STREAM_REGISTRY", "topics.yaml"))


class EventProducer:
    """Validate, key and produce events; refused ones go to dead_letter, never dropped."""

    def __init__(self, producer, registry: Registry, schemas: SchemaSet, stage: str,
                 max_event_bytes: int = MAX_EVENT_BYTES, broker_errors: BrokerErrors | None = None):
        self.producer = producer
        self.router = Router(registry, Validator(schemas), max_event_bytes)
        self.stage = f"producer:{stage}"
        self.counts = Counts()
        self.broker_errors = broker_errors or BrokerErrors()

    @classmethod
    def connect(cls, conn: Connection | None = None, *, stage: str | None = None,
                registry: Registry | None = None, schemas: SchemaSet | None = None,
                client_id: str | None = None, **overrides: Any) -> EventProducer:
        """From HANZO_STREAM_* (or `conn`), topics.yaml and schemas/ in the working directory."""
        conn = conn or Connection.from_env()
        stage = stage or conn.username or "unknown"
        errors = BrokerErrors()
        producer = make_producer(conn, client_id or stage,
                                 **{"debug": "msg", "logger": errors.logger()} | overrides)
        return cls(producer, registry or load_registry(registry_file()),
                   schemas or load_schemas(Path("schemas")), stage, broker_errors=errors)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.counts.delivered += 1
        else:
            self.counts.failed += 1
            if len(self.counts.errors) < 20:
                why = self.broker_errors.last.get((msg.topic(), msg.partition()))
                self.counts.errors.append(f"{msg.topic()} [{msg.partition()}]: {err.str()}"
                                          + (f"; the broker said: {why}" if why else ""))

    def _callback(self, on_delivery: OnDelivery | None) -> OnDelivery:
        if on_delivery is None:
            return self._on_delivery

        def both(err, msg) -> None:
            self._on_delivery(err, msg)
            on_delivery(err, msg)
        return both

    def _produce(self, topic: str, value: bytes | None, key: bytes | None,
                 headers: list[tuple[str, bytes]] | None = None,
                 on_delivery: OnDelivery | None = None) -> None:
        callback = self._callback(on_delivery)
        while True:
            try:
                self.producer.produce(topic, value, key, headers=headers, on_delivery=callback)
                return
            except BufferError:  # local queue full: serve deliveries, then retry
                self.producer.poll(0.05)

    def _dispatch(self, outcome: Accepted | Refused,
                  on_delivery: OnDelivery | None) -> Accepted | Refused:
        self.counts.received += 1
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
        return self.producer.poll(timeout)

    def flush(self, timeout: float = DELIVERY_TIMEOUT_S + 10) -> int:
        """Wait for outstanding deliveries; by default until each record has an outcome."""
        return self.producer.flush(timeout)

    def flush_or_raise(self, timeout: float = DELIVERY_TIMEOUT_S + 10) -> None:
        left = self.flush(timeout)
        if left or self.counts.failed:
            raise DeliveryFailed(f"{left} record(s) unacknowledged after {timeout:.0f}s, "
                                 f"{self.counts.failed} failed; first errors: {self.counts.errors[:5]}")
