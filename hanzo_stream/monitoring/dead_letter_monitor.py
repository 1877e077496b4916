"""dead-letter-monitor: the dead_letter topic as counters by source topic, stage and error class.

The registry's group `dead-letter-monitor` reads `dead_letter` as its own principal and serves

    hanzo_stream_dead_letters_total{source_topic, stage, error_class}

for Prometheus; the alert rules derived from topics.yaml (hanzo_stream/monitoring/alerts.py)
turn it into pages that name the topic, the stage and the error class.

Why a plain consumer and not a Spark job: the topic has one partition and carries a trickle
(events that failed somewhere); the monitor reads only record headers, keeps a few counters and
must show an arrival within a scrape interval. confluent-kafka in one small process does that
in ~40 MB; a Spark driver would hold 2 GB and a JVM for the same, and add its trigger to the
time to page. What it shares with the jobs: its own registry principal, a real consumer group
with synchronous commits (so its lag and the stall alert are true), and the dead-letter
contract of hanzo_stream/core/dead_letter.py.

Counting: from the group's committed offset; a group without one (a first deploy) starts at the
log end, pinned and committed at assignment, so the retained history does not page at once
(the runbook's `inspect` reads it). A record is counted, then its offset committed: after a
crash the records since the last commit are counted again (at least once: a dead letter may
page twice, never zero times). Counters restart at zero with the process, as counters do.

One failure, one count: writing a dead letter is at least once too (a job's replayed batch
writes its letters again, a resend after a timeout may land beside the first copy), so each
letter's identity (hanzo_stream.core.dead_letter.identity: the refused record's topic, partition,
offset and stage, or a producer letter's bytes) is remembered, the last REMEMBERED of them,
and a copy is counted under ..._duplicates_total instead.

Label values are bounded: a source topic is a registry topic or `unknown` (else `other`), a
stage `producer:<name>` or `job:<name>` and an error class `area.reason`, checked by pattern
(else `invalid`); past MAX_SERIES label sets everything new counts under `other`.

    python -m hanzo_stream.monitoring.dead_letter_monitor --listen 127.0.0.1:9309
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..core import dead_letter
from ..core.connection import Connection
from ..registry import Registry, load_registry

log = logging.getLogger("hanzo_stream.monitoring.dead_letter_monitor")

GROUP = "dead-letter-monitor"  # the registry group (topics.yaml)
METRIC = "hanzo_stream_dead_letters"  # exposed with the counter suffix: _total
# The monitor's own health (dashboards.py reads these names; counters get _total).
RECORDS_METRIC = "hanzo_stream_dead_letter_monitor_records"
OFFSET_METRIC = "hanzo_stream_dead_letter_monitor_offset"
ASSIGNED_METRIC = "hanzo_stream_dead_letter_monitor_assigned_partitions"
COMMIT_FAILURES_METRIC = "hanzo_stream_dead_letter_monitor_commit_failures"
DUPLICATES_METRIC = "hanzo_stream_dead_letter_monitor_duplicates"
LABELS = ("source_topic", "stage", "error_class")
DEFAULT_PORT = 9309
MAX_SERIES = 1000
REMEMBERED = 100_000  # letter identities kept (32 hex each, ~10 MB): days of a trickle
OTHER, INVALID = "other", "invalid"
_STAGE = re.compile(r"^(producer|job):[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ERROR_CLASS = re.compile(r"^[a-z0-9_]{1,32}\.[a-z0-9_]{1,32}$")


class Labels:
    """Bounded label values for one record's provenance headers."""

    def __init__(self, topics: Iterable[str], max_series: int = MAX_SERIES) -> None:
        self.topics = set(topics) | {"unknown"}
        self.max_series = max_series
        self.seen: set[tuple[str, str, str]] = set()

    def of(self, headers: Mapping[str, bytes]) -> tuple[str, str, str]:
        def text(name: str) -> str:
            return (headers.get(name) or b"").decode("utf-8", "replace")

        topic = text(dead_letter.H_SOURCE_TOPIC) or "unknown"
        stage, error = text(dead_letter.H_STAGE), text(dead_letter.H_ERROR_CLASS)
        key = (topic if topic in self.topics else OTHER,
               stage if _STAGE.match(stage) else INVALID,
               error if _ERROR_CLASS.match(error) else INVALID)
        if key not in self.seen:
            if len(self.seen) >= self.max_series:
                return (OTHER, OTHER, OTHER)
            self.seen.add(key)
        return key


class Seen:
    """The identities of the last `limit` letters counted: a copy of one is not a new failure."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self.limit = limit
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first(self, identity: str) -> bool:
        """True the first time an identity is offered (within the last `limit`)."""
        if identity in self._ids:
            self._ids.move_to_end(identity)
            return False
        self._ids[identity] = None
        if len(self._ids) > self.limit:
            self._ids.popitem(last=False)
        return True


class Monitor:
    """Consumes dead_letter as the group and keeps the counters (served by serve())."""

    def __init__(self, conn: Connection, registry: Registry, group: str = GROUP) -> None:
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            PlatformCollector,
            ProcessCollector,
            disable_created_metrics,
        )

        disable_created_metrics()  # no *_created series next to each counter
        self.conn, self.group = conn, group
        self.labels = Labels(t.name for t in registry.topics)
        self.metrics = CollectorRegistry()
        ProcessCollector(registry=self.metrics)
        PlatformCollector(registry=self.metrics)
        self.dead_letters = Counter(METRIC, "Dead letters read from dead_letter, by provenance.",
                                    LABELS, registry=self.metrics)
        self.records = Counter(RECORDS_METRIC, "Records read from dead_letter.", registry=self.metrics)
        self.offset = Gauge(OFFSET_METRIC, "Next offset to read (everything before it is counted).",
                            ["topic", "partition"], registry=self.metrics)
        self.assigned = Gauge(ASSIGNED_METRIC, "dead_letter partitions assigned to this monitor.",
                              registry=self.metrics)
        self.seen = Seen()
        self.duplicates = Counter(DUPLICATES_METRIC, "Copies of a dead letter already counted "
                                  "(a replayed batch, a resend): read, not counted again.",
                                  registry=self.metrics)
        self.commit_failures = Counter(COMMIT_FAILURES_METRIC,
                                       "Offset commits that failed (retried with the next batch).",
                                       registry=self.metrics)

    def _on_assign(self, consumer, partitions) -> None:
        """A partition the group never committed starts at the log end, pinned at once."""
        from confluent_kafka import TopicPartition

        committed = consumer.committed(partitions, timeout=30)
        fresh = []
        for tp in committed:
            if tp.offset < 0:
                tp.offset = consumer.get_watermark_offsets(tp, timeout=30)[1]
                fresh.append(TopicPartition(tp.topic, tp.partition, tp.offset))
            self.offset.labels(tp.topic, str(tp.partition)).set(tp.offset)
        if fresh:
            consumer.commit(offsets=fresh, asynchronous=False)
            log.warning("group %s had no committed offset: counting from the log end %s", self.group,
                        ", ".join(f"{t.topic}[{t.partition}]={t.offset}" for t in fresh))
        consumer.assign(committed)
        self.assigned.set(len(committed))

    def _on_revoke(self, consumer, partitions) -> None:
        self.assigned.set(0)

    def count(self, headers: Mapping[str, bytes], value: bytes | None) -> None:
        self.records.inc()
        if self.seen.first(dead_letter.identity(headers, value)):
            self.dead_letters.labels(*self.labels.of(headers)).inc()
        else:
            self.duplicates.inc()

    def run(self, stop: threading.Event) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self.conn.confluent() | {
            "group.id": self.group, "enable.auto.commit": False, "auto.offset.reset": "latest",
            "client.id": f"hanzo-stream-{self.group}", "log_level": 4})
        consumer.subscribe([dead_letter.TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
        try:
            while not stop.is_set():
                batch = consumer.consume(500, timeout=1.0)
                done: dict[tuple[str, int], int] = {}
                for m in batch:
                    if m.error():
                        log.warning("reading %s: %s", dead_letter.TOPIC, m.error())
                        continue
                    self.count(dict(m.headers() or []), m.value())
                    done[(m.topic(), m.partition())] = m.offset() + 1
                for (topic, partition), nxt in done.items():
                    self.offset.labels(topic, str(partition)).set(nxt)
                if done:
                    try:
                        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in done.items()],
                                        asynchronous=False)
                    except Exception as e:  # the next batch's commit covers these offsets too
                        self.commit_failures.inc()
                        log.warning("could not commit offsets for group %s: %s", self.group, e)
        finally:
            consumer.close()


def serve(monitor: Monitor, host: str, port: int):
    """The /metrics endpoint in a background thread; returns the HTTP server."""
    from prometheus_client import start_http_server

    server, _ = start_http_server(port, addr=host, registry=monitor.metrics)
    return server


def main(argv: Iterable[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default=f"127.0.0.1:{DEFAULT_PORT}", help="host:port of /metrics")
    ap.add_argument("--registry", type=Path, default=Path("topics.yaml"))
    ap.add_argument("--group", default=GROUP)
    ap.add_argument("--tag", default="", help="ignored; lets a supervisor recognise its process")
    args = ap.parse_args(list(argv) if argv is not None else None)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host, _, port = args.listen.rpartition(":")
    monitor = Monitor(Connection.from_env(), load_registry(args.registry), args.group)
    server = serve(monitor, host or "127.0.0.1", int(port))
    print(f"dead-letter-monitor: group {args.group}, metrics on "
          f"http://{host}:{server.server_address[1]}/metrics", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        monitor.run(stop)
    finally:
        server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
