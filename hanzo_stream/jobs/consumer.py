"""The `runtime: consumer` jobs: a plain Kafka consumer group member instead of Spark.

Why not Spark for llm-metrics: its output is a handful of counters per model, served over
HTTP for Prometheus to scrape. A Spark driver (a JVM with 1-2 GB, a checkpoint, a
micro-batch floor) would hold them in its state store and still need an HTTP server in
the driver; a consumer in the group does the same in ~60 MB, joins the group for real (so
the registry's `consumers: 2` are two replicas sharing the partitions) and commits its
offsets, so lag shows like every other group. See docs/jobs.md.

Counters that survive restarts exactly ("exactly-once-ish"): every `trigger` seconds (and
when partitions are revoked, and on stop) the job checkpoints:

1. every dead letter of the records read so far is acknowledged (KafkaOut.flush_or_raise);
2. the counters and the next offset of every partition they cover are written to
   `<checkpoint>/state.json` atomically (write, fsync, rename);
3. /metrics switches to exactly those counters (never to anything newer);
4. the offsets are committed to the registry group.

On start the counters are read back and each assigned partition resumes at the larger of
the checkpoint's offset and the group's committed one (another replica may have gone
further), after re-reading the `dedupe_window` records before it without counting them (so
the retry of an event counted before the restart is still recognized). So what Prometheus
saw is always a prefix of the topic counted once: a crash re-reads only records no scrape
has seen counted. What it does not cover: a crash between
steps 2 and 4 while another replica takes the partition (it re-counts one interval), a
retried event more than `dedupe_window` records behind its original, and a lost state file (a
new pod without its volume): counters then restart from zero, which Prometheus' rate()
and increase() treat as a counter reset, and counting resumes at the committed offsets.

Invalid records are dead-lettered with the client library's verdict (the same as the
Spark jobs', tests/integration/test_contract_parity.py), stage `job:<group>`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from ..client.envelope import iso_ms
from ..client.router import Accepted, Router
from ..client.validator import Validator
from ..connection import Connection
from ..registry import Registry
from ..schemas.store import SchemaSet
from .kafka_out import KafkaOut, Rejected
from .llm_metrics import LlmUsage, Settings
from .offsets import commit_retrying
from .spec import JobSpec

log = logging.getLogger("hanzo_stream.jobs")

LISTEN_ENV = "HANZO_STREAM_METRICS_LISTEN"  # host:port of /metrics (e.g. 127.0.0.1:0 = any free port)
TARGETS_ENV = "HANZO_STREAM_SCRAPE_TARGETS"  # a directory of Prometheus file_sd target files
STATE_FILE = "state.json"
TP = tuple[str, int]


class StateFile:
    """The checkpoint: counters plus the offsets they cover, replaced atomically."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> tuple[dict[str, Any], dict[TP, int]]:
        if not self.path.exists():
            return {}, {}
        doc = json.loads(self.path.read_text())
        offsets = {(t, int(p)): int(o) for t, parts in doc.get("offsets", {}).items()
                   for p, o in parts.items()}
        return doc.get("metrics", {}), offsets

    def save(self, metrics: dict[str, Any], offsets: Mapping[TP, int]) -> None:
        by_topic: dict[str, dict[str, int]] = {}
        for (t, p), o in sorted(offsets.items()):
            by_topic.setdefault(t, {})[str(p)] = o
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"version": 1, "at": time.time(), "offsets": by_topic, "metrics": metrics}, f)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(self.path)


class Published:
    """The prometheus_client collector: the last checkpointed counters, swapped atomically."""

    def __init__(self, usage: LlmUsage):
        self.current = usage.snapshot()

    def collect(self):
        return self.current.collect()


def start_from(saved: int | None, committed: int | None) -> int | None:
    """Where a newly assigned partition resumes: the further of checkpoint and group commit."""
    known = [o for o in (saved, committed) if o is not None and o >= 0]
    return max(known) if known else None


class MetricsConsumer:
    """One member of the group: read, validate, count, checkpoint, serve /metrics."""

    def __init__(self, spec: JobSpec, registry: Registry, schemas: SchemaSet, conn: Connection | None,
                 consumer: Any = None, kafka_out: KafkaOut | None = None):
        self.spec = spec
        self.settings = Settings.of(spec)
        self.router = Router(registry, Validator(schemas))
        (self.topic,) = spec.topics
        types = registry.topic(self.topic).event_types
        self.schema_id = types[0] if len(types) == 1 else ""
        self.usage = LlmUsage(self.settings)
        self.state = StateFile(Path(spec.checkpoint) / STATE_FILE)
        metrics, self.saved = self.state.load()
        self.usage.restore(metrics)
        self.positions: dict[TP, int] = dict(self.saved)  # next offset to read, per partition
        self.published = Published(self.usage)
        self.kafka_out = kafka_out or KafkaOut(conn, client_id=f"hanzo-stream-{spec.name}")
        self.consumer = consumer or self._consumer(conn)
        self.assigned: set[TP] = set()
        self.replay_until: dict[TP, int] = {}  # below this offset a record was counted before
        self.ends: dict[TP, int] = {}  # --once: the end offsets to reach
        self.last_checkpoint = time.monotonic()

    def _consumer(self, conn: Connection | None):
        from confluent_kafka import Consumer

        assert conn is not None
        return Consumer(conn.confluent() | {
            "group.id": self.spec.name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "client.id": f"hanzo-stream-{self.spec.name}", "log_level": 4,
            # A replica that died hands its partitions over after 10 s, not the default 45 s.
            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 3_000})

    # -- group membership

    def on_assign(self, consumer, partitions) -> None:
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in consumer.committed(partitions, timeout=30)}
        for tp in partitions:
            key = (tp.topic, tp.partition)
            earliest = consumer.get_watermark_offsets(tp, timeout=30)[0]
            at = start_from(self.saved.get(key), committed.get(key))
            if at is None:  # new to the group: the earliest retained record (and commit it, as
                at = earliest  # the Spark jobs do)
            # Re-read up to dedupe_window records before `at` without counting them, so a retry
            # of an event counted before a restart or a rebalance is still known as one.
            tp.offset = max(earliest, at - self.settings.dedupe_window)
            self.replay_until[key] = at
            self.usage.forget(tp.partition)
            self.positions[key] = at
            self.assigned.add(key)
        consumer.assign(partitions)
        log.warning("%s: assigned %s", self.spec.name, sorted(self.assigned))

    def on_revoke(self, consumer, partitions) -> None:
        self.checkpoint()  # the next owner starts exactly where these counters stop
        self.assigned -= {(tp.topic, tp.partition) for tp in partitions}

    # -- records

    def handle(self, msg) -> None:
        tp = (msg.topic(), msg.partition())
        verdict = self.router.route_bytes(msg.value(), topic=msg.topic())
        if msg.offset() < self.replay_until.get(tp, 0):  # counted before: only its id matters
            if isinstance(verdict, Accepted):
                self.usage.seen(msg.partition(), orjson.loads(msg.value())["id"])
            return
        if isinstance(verdict, Accepted):
            event = json.loads(msg.value(), parse_float=Decimal)  # cost_usd's decimal text, exactly
            self.usage.observe(event, msg.partition())
        else:
            err = verdict.error
            self.kafka_out.dead_letter(
                [Rejected(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                          err.error_class, err.message, self.schema_id)],
                f"job:{self.spec.name}", iso_ms())
            self.usage.dead_lettered()
        self.positions[tp] = msg.offset() + 1

    def checkpoint(self) -> dict[TP, int]:
        """Dead letters acknowledged -> state written -> /metrics switched -> offsets committed."""
        self.kafka_out.flush_or_raise()
        self.state.save(self.usage.to_json(), self.positions)
        self.saved = dict(self.positions)
        self.published.current = self.usage.snapshot()
        mine = {tp: o for tp, o in self.positions.items() if tp in self.assigned}
        if mine:
            from confluent_kafka import TopicPartition

            commit_retrying(self.consumer, [TopicPartition(t, p, o) for (t, p), o in sorted(mine.items())])
        self.last_checkpoint = time.monotonic()
        return mine

    def caught_up(self) -> bool:
        """--once: every assigned partition has reached the end it had when assigned."""
        if not self.assigned:
            return False
        for tp in self.assigned:
            if tp not in self.ends:
                from confluent_kafka import TopicPartition

                self.ends[tp] = self.consumer.get_watermark_offsets(TopicPartition(*tp), timeout=30)[1]
        return all(self.positions.get(tp, 0) >= self.ends[tp] for tp in self.assigned)

    def run(self, stop: threading.Event, once: bool = False, report=None) -> None:
        self.consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
        started = time.monotonic()
        try:
            while not stop.is_set():
                for msg in self.consumer.consume(1000, timeout=0.5):
                    if msg.error():
                        if msg.error().fatal():
                            raise RuntimeError(f"{self.spec.name}: {msg.error()}")
                        log.warning("%s: %s", self.spec.name, msg.error())
                        continue
                    self.handle(msg)
                if time.monotonic() - self.last_checkpoint >= self.spec.trigger_seconds:
                    self.checkpoint()
                    if report:
                        report(self)
                if once and (self.caught_up() or (not self.assigned and time.monotonic() - started > 60)):
                    break
            self.checkpoint()
            if report:
                report(self)
        finally:
            self.consumer.close()  # leaves the group (a revoke checkpoints first)




def serve(collector: Any, listen: str):
    """/metrics on `listen` (host:port; port 0 picks a free one); returns (server, url)."""
    from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

    host, _, port = listen.rpartition(":")
    reg = CollectorRegistry(auto_describe=True)
    reg.register(collector)
    ProcessCollector(registry=reg)  # process_resident_memory_bytes, _cpu_seconds_total, ...
    server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=reg)
    bound = server.server_address[1]
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    return server, f"http://{shown}:{bound}"


def write_target(directory: str, name: str, url: str) -> Path:
    """A Prometheus file_sd target file for this job (the local platform scrapes the directory)."""
    import urllib.parse

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"{name}.json"
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [urllib.parse.urlparse(url).netloc],
                                "labels": {"consumergroup": name}}]))
    tmp.replace(f)
    return f


def run(spec: JobSpec, registry: Registry, schemas: SchemaSet, conn: Connection, *, once: bool = False,
        env: Mapping[str, str] | None = None, report=None) -> int:
    """Run a `runtime: consumer` job until stopped (SIGTERM/SIGINT) or, with once, caught up."""
    env = os.environ if env is None else env
    job = MetricsConsumer(spec, registry, schemas, conn)
    server, url = serve(job.published, env.get(LISTEN_ENV) or job.settings.listen)
    if env.get(TARGETS_ENV):
        write_target(env[TARGETS_ENV], spec.name, url)
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    log.warning("job %s: consumer in group %s as %s, /metrics at %s", spec.name, spec.name,
                spec.principal, url)
    if report:
        report(job, metrics_url=url)
    try:
        job.run(stop, once, report)
        return 0
    finally:
        with contextlib.suppress(Exception):
            server.shutdown()
