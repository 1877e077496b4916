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
2. the counters, the next offset of every partition they cover and the newest record time
   (ms) before it are written to `<checkpoint>/state.json` atomically (write, fsync, rename);
3. /metrics switches to exactly those counters (never to anything newer);
4. the offsets are committed to the registry group, each with that time as its metadata.

On start the counters are read back and each assigned partition resumes at the larger of
the checkpoint's offset and the group's committed one (another replica may have gone
further). Retries are recognized by id within `dedupe_window` of record time
(LlmUsage.seen), so before resuming the job re-reads, without counting them, the records
written within that window before the resume point: from the offset offsets_for_times gives
for (its time - window), the time coming with whichever offset won (state file or commit
metadata); unknown (a commit of an older version), it re-reads from the earliest offset. So
the retry of an event counted before a restart or a rebalance is still recognized, and what
Prometheus saw is always a prefix of the topic counted once: a crash re-reads only records
no scrape has seen counted. What it does not cover: a crash between steps 2 and 4 while
another replica takes the partition (it re-counts one interval), a retry written more than
`dedupe_window` after its original (or after `metrics.dedupe_max_ids` newer ids on its
partition), and a lost state file (a new pod without its volume): counters then restart from
zero, which Prometheus' rate() and increase() treat as a counter reset, and counting resumes
at the committed offsets.

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
from ..core.connection import Connection
from ..registry import Registry
from ..schemas.store import SchemaSet
from ..schemas.validator import Validator
from .kafka_out import KafkaOut, Rejected
from .llm_metrics import LlmUsage, Settings
from .offsets import commit_retrying
from .spec import JobSpec

log = logging.getLogger("hanzo_stream.jobs")

LISTEN_ENV = "HANZO_STREAM_METRICS_LISTEN"  # host:port of /metrics (e.g. 127.0.0.1:0 = any free port)
TARGETS_ENV = "HANZO_STREAM_SCRAPE_TARGETS"  # a directory of Prometheus file_sd target files
STATE_FILE = "state.json"
TP = tuple[str, int]
NO_TIMESTAMP = 0  # confluent_kafka.TIMESTAMP_NOT_AVAILABLE
METADATA_KEY = "newest_ms"  # commit metadata: the newest record time before the offset


def by_topic(values: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (t, p), v in sorted(values.items()):
        out.setdefault(t, {})[str(p)] = v
    return out


def from_topics(doc: Mapping[str, Mapping[str, int]]) -> dict[TP, int]:
    return {(t, int(p)): int(v) for t, parts in doc.items() for p, v in parts.items()}


class StateFile:
    """The checkpoint: counters plus the offsets they cover and the newest record time (ms)
    before each (where its dedupe window ends), replaced atomically."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> tuple[dict[str, Any], dict[TP, int], dict[TP, int]]:
        if not self.path.exists():
            return {}, {}, {}
        doc = json.loads(self.path.read_text())
        return (doc.get("metrics", {}), from_topics(doc.get("offsets", {})),
                from_topics(doc.get(METADATA_KEY, {})))

    def save(self, metrics: dict[str, Any], offsets: Mapping[TP, int],
             newest_ms: Mapping[TP, int] | None = None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"version": 1, "at": time.time(), "offsets": by_topic(offsets),
                       METADATA_KEY: by_topic(newest_ms or {}), "metrics": metrics}, f)
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


def record_ms(msg) -> int | None:
    """A record's Kafka timestamp (CreateTime or LogAppendTime), None when it has none."""
    kind, ms = msg.timestamp()
    return ms if kind != NO_TIMESTAMP and ms >= 0 else None


def commit_metadata(newest_ms: int | None) -> str:
    """What a commit carries besides its offset: the time its dedupe window ends, so the
    replica that takes the partition over re-reads the right records too."""
    return f"{METADATA_KEY}={newest_ms}" if newest_ms is not None else ""


def metadata_ms(metadata: str | None) -> int | None:
    key, _, value = (metadata or "").partition("=")
    return int(value) if key == METADATA_KEY and value.isdigit() else None


def resume_ms(at: int, saved: tuple[int | None, int | None],
              committed: tuple[int | None, int | None]) -> int | None:
    """The newest record time before `at`, from the (offset, time) of checkpoint or commit
    that `at` came from; None when neither knows it."""
    known = [ms for o, ms in (saved, committed) if o == at and ms is not None]
    return max(known) if known else None


def relearn_from(consumer, tp, at: int, earliest: int, newest_ms: int | None, window_ms: int) -> int:
    """Where re-reading ids before `at` starts: the first record written at or after
    `newest_ms - window_ms` (nothing before it is in the window); the earliest offset when
    that time is unknown or the lookup fails (re-reading more is safe, less is not)."""
    from confluent_kafka import KafkaException, TopicPartition

    if at <= earliest:
        return at
    if newest_ms is None:
        return earliest
    # A negative time would ask Kafka for the latest (-1) or earliest (-2) offset instead.
    want = TopicPartition(tp.topic, tp.partition, max(0, newest_ms - window_ms))
    try:
        (found,) = consumer.offsets_for_times([want], timeout=30)
    except KafkaException as e:
        log.warning("offsets_for_times %s[%d]: %s; re-reading from the earliest offset",
                    tp.topic, tp.partition, e)
        return earliest
    if found.error is not None:
        return earliest
    if found.offset < 0:  # no record that new: nothing before `at` is within the window
        return at
    return min(max(found.offset, earliest), at)


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
        metrics, self.saved, self.newest_ms = self.state.load()
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
        committed = {(tp.topic, tp.partition): (tp.offset, metadata_ms(tp.metadata))
                     for tp in consumer.committed(partitions, timeout=30)}
        window_ms = self.settings.dedupe_window_seconds * 1000
        for tp in partitions:
            key = (tp.topic, tp.partition)
            earliest = consumer.get_watermark_offsets(tp, timeout=30)[0]
            commit = committed.get(key, (None, None))
            at = start_from(self.saved.get(key), commit[0])
            if at is None:  # new to the group: the earliest retained record (and commit it, as
                at = earliest  # the Spark jobs do)
            newest = resume_ms(at, (self.saved.get(key), self.newest_ms.get(key)), commit)
            # Re-read the records written within dedupe_window before `at` without counting
            # them, so a retry of an event counted before a restart or a rebalance is still
            # known as one.
            tp.offset = relearn_from(consumer, tp, at, earliest, newest, window_ms)
            self.replay_until[key] = at
            self.usage.forget(tp.partition, newest)
            if newest is not None:
                self.newest_ms[key] = newest
            self.positions[key] = at
            self.assigned.add(key)
        consumer.assign(partitions)
        log.warning("%s: assigned %s", self.spec.name, sorted(self.assigned))

    def on_revoke(self, consumer, partitions) -> None:
        self.checkpoint()  # the next owner starts exactly where these counters stop
        self.assigned -= {(tp.topic, tp.partition) for tp in partitions}
        for tp in partitions:
            self.usage.forget(tp.partition)  # its ids are the next owner's to remember

    # -- records

    def handle(self, msg) -> None:
        tp = (msg.topic(), msg.partition())
        verdict = self.router.route_bytes(msg.value(), topic=msg.topic())
        at_ms = record_ms(msg)
        if msg.offset() < self.replay_until.get(tp, 0):  # counted before: only its id matters
            if isinstance(verdict, Accepted):
                self.usage.seen(msg.partition(), orjson.loads(msg.value())["id"], at_ms, relearn=True)
            return
        if isinstance(verdict, Accepted):
            event = json.loads(msg.value(), parse_float=Decimal)  # cost_usd's decimal text, exactly
            self.usage.observe(event, msg.partition(), at_ms)
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
        for tp in self.assigned:
            newest = self.usage.newest(tp[1])
            if newest is not None:
                self.newest_ms[tp] = newest
        self.state.save(self.usage.to_json(), self.positions, self.newest_ms)
        self.saved = dict(self.positions)
        self.published.current = self.usage.snapshot()
        mine = {tp: o for tp, o in self.positions.items() if tp in self.assigned}
        if mine:
            from confluent_kafka import TopicPartition

            commit_retrying(self.consumer, [
                TopicPartition(t, p, o, commit_metadata(self.newest_ms.get((t, p))))
                for (t, p), o in sorted(mine.items())])
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
