"""Consumer-lag exporter speaking danielqsj/kafka_exporter's metric names.

Why it exists: production runs danielqsj/kafka_exporter, but this machine cannot build
it (the Go module proxy refuses that module here). Dashboards and alert rules are
written against kafka_exporter's names (`kafka_consumergroup_lag`,
`kafka_topic_partition_current_offset`, ...), so this small exporter emits exactly those
names and labels from the same admin calls, over the same SASL_SSL connection every
other client uses (HANZO_STREAM_* variables). Swapping in the real exporter changes
nothing downstream.

Collection happens on scrape (like kafka_exporter), at most once per `min_interval`.
When the cluster cannot be read at all, /metrics answers 503 so Prometheus' `up` is 0
and the exporter-down alert fires: lag alerts are blind without this exporter.

    python -m hanzo_stream.monitoring.lag_exporter --listen 127.0.0.1:9308
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ..core.connection import Connection

DEFAULT_PORT = 9308  # kafka_exporter's registered default port


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isrs: tuple[int, ...]
    oldest: int | None  # None when the broker did not answer for this partition
    newest: int | None


@dataclass(frozen=True)
class GroupState:
    group: str
    members: int
    committed: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    brokers: dict[int, str]
    partitions: tuple[PartitionState, ...]
    groups: tuple[GroupState, ...]
    errors: int = 0  # per-partition / per-group failures tolerated in this collection
    # When each broker's served certificate and the trusted CA expire (epoch seconds); only
    # with TLS. The platform's addition to kafka_exporter's names: the expiry alerts read it.
    certificates: dict[str, float] = field(default_factory=dict)
    ca_expiry: float | None = None


# ---------------------------------------------------------------- exposition (pure)

def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Family:
    """One metric family in Prometheus text format 0.0.4."""

    def __init__(self, name: str, help_: str, kind: str = "gauge") -> None:
        self.name, self.help, self.kind = name, help_, kind
        self.samples: list[tuple[dict[str, str], float]] = []

    def add(self, value: float, **labels: object) -> None:
        self.samples.append(({k: str(v) for k, v in labels.items()}, value))

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for labels, value in self.samples:
            lbl = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            lines.append(f"{self.name}{{{lbl}}} {_number(value)}" if lbl
                         else f"{self.name} {_number(value)}")
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    """Every digit: an offset of 12,345,678 or an expiry timestamp must not round (`%g` keeps six)."""
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def lag(newest: int | None, committed: int) -> int | None:
    """Messages between a group's committed offset and the log end; never negative.

    The log end is read a moment before the group's offsets, so a fast consumer can be
    ahead of it: that is zero lag, not negative lag. No commit yet (< 0): unknown.
    """
    if newest is None or committed < 0:
        return None
    return max(newest - committed, 0)


def render(snap: Snapshot) -> str:
    """The Snapshot as kafka_exporter-compatible metrics text."""
    brokers = _Family("kafka_brokers", "Number of Brokers in the Kafka Cluster.")
    brokers.add(len(snap.brokers))
    info = _Family("kafka_broker_info", "Information about the Kafka Broker.")
    for bid, address in sorted(snap.brokers.items()):
        info.add(1, id=bid, address=address)

    fams = {n: _Family(n, h) for n, h in [
        ("kafka_topic_partitions", "Number of partitions for this Topic"),
        ("kafka_topic_partition_current_offset", "Current Offset of a Broker at Topic/Partition"),
        ("kafka_topic_partition_oldest_offset", "Oldest Offset of a Broker at Topic/Partition"),
        ("kafka_topic_partition_leader", "Leader Broker ID of this Topic/Partition"),
        ("kafka_topic_partition_replicas", "Number of Replicas for this Topic/Partition"),
        ("kafka_topic_partition_in_sync_replica", "Number of In-Sync Replicas for this Topic/Partition"),
        ("kafka_topic_partition_leader_is_preferred", "1 if Topic/Partition is using the Preferred Broker"),
        ("kafka_topic_partition_under_replicated_partition",
         "1 if Topic/Partition is under Replicated"),
        ("kafka_consumergroup_current_offset",
         "Current Offset of a ConsumerGroup at Topic/Partition"),
        ("kafka_consumergroup_current_offset_sum",
         "Current Offset of a ConsumerGroup at Topic for all partitions"),
        ("kafka_consumergroup_lag", "Current Approximate Lag of a ConsumerGroup at Topic/Partition"),
        ("kafka_consumergroup_lag_sum",
         "Current Approximate Lag of a ConsumerGroup at Topic for all partitions"),
        ("kafka_consumergroup_members", "Amount of members in a consumer group"),
    ]}
    per_topic: dict[str, int] = {}
    newest: dict[tuple[str, int], int | None] = {}
    for p in snap.partitions:
        per_topic[p.topic] = per_topic.get(p.topic, 0) + 1
        newest[(p.topic, p.partition)] = p.newest
        where = {"topic": p.topic, "partition": p.partition}
        if p.newest is not None:
            fams["kafka_topic_partition_current_offset"].add(p.newest, **where)
        if p.oldest is not None:
            fams["kafka_topic_partition_oldest_offset"].add(p.oldest, **where)
        fams["kafka_topic_partition_leader"].add(p.leader, **where)
        fams["kafka_topic_partition_replicas"].add(len(p.replicas), **where)
        fams["kafka_topic_partition_in_sync_replica"].add(len(p.isrs), **where)
        preferred = bool(p.replicas) and p.replicas[0] == p.leader
        fams["kafka_topic_partition_leader_is_preferred"].add(int(preferred), **where)
        fams["kafka_topic_partition_under_replicated_partition"].add(
            int(len(p.isrs) < len(p.replicas)), **where)
    for topic, count in sorted(per_topic.items()):
        fams["kafka_topic_partitions"].add(count, topic=topic)

    for g in snap.groups:
        fams["kafka_consumergroup_members"].add(g.members, consumergroup=g.group)
        offset_sum: dict[str, int] = {}
        lag_sum: dict[str, int] = {}
        for (topic, partition), committed in sorted(g.committed.items()):
            if (topic, partition) not in newest:
                continue  # a topic filtered out, or deleted since the commit
            where = {"consumergroup": g.group, "topic": topic, "partition": partition}
            fams["kafka_consumergroup_current_offset"].add(committed, **where)
            offset_sum[topic] = offset_sum.get(topic, 0) + max(committed, 0)
            behind = lag(newest[(topic, partition)], committed)
            if behind is not None:
                fams["kafka_consumergroup_lag"].add(behind, **where)
                lag_sum[topic] = lag_sum.get(topic, 0) + behind
        for topic, total in sorted(offset_sum.items()):
            fams["kafka_consumergroup_current_offset_sum"].add(total, consumergroup=g.group, topic=topic)
        for topic, total in sorted(lag_sum.items()):
            fams["kafka_consumergroup_lag_sum"].add(total, consumergroup=g.group, topic=topic)

    certs = _Family("hanzo_stream_broker_certificate_expiry_timestamp_seconds",
                    "When the certificate a broker serves expires (earliest in its chain).")
    for address, not_after in sorted(snap.certificates.items()):
        certs.add(not_after, address=address)
    ca = _Family("hanzo_stream_ca_certificate_expiry_timestamp_seconds",
                 "When the earliest CA certificate clients trust (HANZO_STREAM_CA_FILE) expires.")
    if snap.ca_expiry is not None:
        ca.add(snap.ca_expiry)
    errors = _Family("hanzo_lag_exporter_collect_errors",
                     "Partitions or groups that could not be read in the last collection.")
    errors.add(snap.errors)
    return "".join(f.render() for f in [brokers, info, *fams.values(), certs, ca, errors])


# ---------------------------------------------------------------- certificates

CERT_REFRESH_S = 300.0


def served_expiry(address: str, ca_file: str | None, timeout: float) -> float:
    """notAfter (epoch seconds) of the certificate a TLS listener serves, verified against
    `ca_file` and the host name, as clients verify it."""
    import socket
    import ssl

    host, _, port = address.rpartition(":")
    ctx = ssl.create_default_context(cafile=ca_file)
    with socket.create_connection((host, int(port)), timeout=timeout) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        cert = tls.getpeercert()
    return float(ssl.cert_time_to_seconds(cert["notAfter"]))


def ca_expiry(ca_file: str | None) -> float | None:
    """The earliest notAfter of the CA bundle (a rollover's two CAs: the older one)."""
    if not ca_file:
        return None
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(Path(ca_file).read_bytes())
    except (OSError, ValueError):
        return None
    return min(c.not_valid_after_utc.timestamp() for c in certs) if certs else None


# ---------------------------------------------------------------- collection (Kafka)

class Collector:
    """Reads offsets and group commits with one AdminClient, batching per call type."""

    def __init__(self, conn: Connection, topic_exclude: str = r"^__", timeout: float = 10.0) -> None:
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient(conn.confluent() | {"socket.timeout.ms": int(timeout * 1000),
                                                     "log_level": 3})
        self.conn = conn
        self.exclude = re.compile(topic_exclude)
        self.timeout = timeout
        self._certs: dict[str, tuple[float, float]] = {}  # address -> (expiry, read at)

    def collect(self) -> Snapshot:
        md = self.admin.list_topics(timeout=self.timeout)  # raises when the cluster is unreachable
        brokers = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
        layout = [(t.topic, p) for t in md.topics.values() if not self.exclude.search(t.topic)
                  for p in t.partitions.values()]
        errors = 0
        oldest, e1 = self._offsets([(t, p.id) for t, p in layout], earliest=True)
        newest, e2 = self._offsets([(t, p.id) for t, p in layout], earliest=False)
        errors += e1 + e2
        partitions = tuple(
            PartitionState(t, p.id, p.leader, tuple(p.replicas), tuple(p.isrs),
                           oldest.get((t, p.id)), newest.get((t, p.id)))
            for t, p in sorted(layout, key=lambda x: (x[0], x[1].id)))
        groups, e3 = self._groups()
        certs, e4 = self._certificates(sorted(brokers.values()))
        return Snapshot(brokers, partitions, groups, errors + e3 + e4, certs,
                        ca_expiry(self.conn.ca_file) if self.conn.uses_tls else None)

    def _certificates(self, addresses: list[str]) -> tuple[dict[str, float], int]:
        """Each broker's served certificate expiry, read by a TLS handshake verified as a
        client's is, at most every CERT_REFRESH_S per broker (a renewal shows within that)."""
        if not self.conn.uses_tls:
            return {}, 0
        out, errors, now = {}, 0, time.monotonic()
        for address in addresses:
            cached = self._certs.get(address)
            if cached is None or now - cached[1] >= CERT_REFRESH_S:
                try:
                    self._certs[address] = (served_expiry(address, self.conn.ca_file,
                                                          self.timeout), now)
                except (OSError, ValueError):
                    errors += 1
                    continue
            out[address] = self._certs[address][0]
        return out, errors

    def _offsets(self, tps: list[tuple[str, int]], earliest: bool) -> tuple[dict, int]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not tps:
            return {}, 0
        spec = OffsetSpec.earliest() if earliest else OffsetSpec.latest()
        futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in tps},
                                          request_timeout=self.timeout)
        out, errors = {}, 0
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result().offset
            except Exception:  # one partition without a leader must not hide the others
                errors += 1
        return out, errors

    def _groups(self) -> tuple[tuple[GroupState, ...], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        listing = self.admin.list_consumer_groups(request_timeout=self.timeout).result()
        ids = sorted(g.group_id for g in listing.valid)
        if not ids:
            return (), len(listing.errors)
        errors = len(listing.errors)
        members: dict[str, int] = {}
        for gid, fut in self.admin.describe_consumer_groups(ids, request_timeout=self.timeout).items():
            try:
                members[gid] = len(fut.result().members)
            except Exception:
                errors += 1
        # librdkafka accepts one group per offsets request: issue them all, then wait.
        pending = {gid: self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(gid)], request_timeout=self.timeout) for gid in ids}
        groups = []
        for gid, futs in pending.items():
            try:
                res = next(iter(futs.values())).result()
            except Exception:
                errors += 1
                continue
            committed = {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions
                         if not self.exclude.search(tp.topic)}
            groups.append(GroupState(gid, members.get(gid, 0), committed))
        return tuple(groups), errors


# ---------------------------------------------------------------- HTTP

class Exporter:
    """Caches one collection for `min_interval` so several scrapers cost one set of calls."""

    def __init__(self, collector: Collector, min_interval: float = 1.0) -> None:
        self.collector, self.min_interval = collector, min_interval
        self._lock = threading.Lock()
        self._at = 0.0
        self._text = ""

    def metrics(self) -> str:
        with self._lock:
            if time.monotonic() - self._at >= self.min_interval:
                self._text = render(self.collector.collect())
                self._at = time.monotonic()
            return self._text


def _handler(exporter: Exporter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.startswith("/metrics"):
                try:
                    body, status = exporter.metrics().encode(), 200
                except Exception as e:  # cluster unreachable: make `up` 0
                    body, status = f"collection failed: {e}\n".encode(), 503
                ctype = "text/plain; version=0.0.4; charset=utf-8"
            elif self.path.startswith("/healthz"):
                body, status, ctype = b"ok\n", 200, "text/plain"
            else:
                body, status, ctype = b'<a href="/metrics">metrics</a>\n', 200, "text/html"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # scrapes are not news
            pass

    return Handler


def serve(conn: Connection, host: str, port: int, topic_exclude: str = r"^__",
          min_interval: float = 1.0) -> ThreadingHTTPServer:
    """Bind and return the server (call serve_forever); port 0 picks a free one."""
    exporter = Exporter(Collector(conn, topic_exclude), min_interval)
    return ThreadingHTTPServer((host, port), _handler(exporter))


def main(argv: Iterable[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default=f"127.0.0.1:{DEFAULT_PORT}", help="host:port")
    ap.add_argument("--topic-exclude", default=r"^__", help="regex of topics to leave out")
    ap.add_argument("--min-interval", type=float, default=1.0,
                    help="seconds a collection is reused for")
    ap.add_argument("--tag", default="", help="ignored; lets a supervisor recognise its process")
    args = ap.parse_args(list(argv) if argv is not None else None)
    host, _, port = args.listen.rpartition(":")
    server = serve(Connection.from_env(), host or "127.0.0.1", int(port), args.topic_exclude,
                   args.min_interval)
    print(f"lag exporter listening on http://{host}:{server.server_address[1]}/metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
