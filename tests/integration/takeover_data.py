"""What both takeover tests do to the standard's cluster and check after it, in one place:
the local one (test_takeover.py, processes) and the Kubernetes one (test_kube_5_takeover.py,
which runs the same steps on the node's network: `python -m tests.integration.takeover_data`).

seed: events of every type in every codec, each group committed halfway through each
partition; snapshot: every record (key, value, headers, timestamp) at its offset and every
group's offsets; live: an acks=all idempotent producer writing through a switch, its every
acknowledgement recorded.
"""

from __future__ import annotations

import argparse
import base64
import json
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from hanzo_stream.jobs.offsets import commit_retrying
from hanzo_stream.registry import Registry, load_registry

from .legacy_kafka import TOPICS

ROOT = Path(__file__).resolve().parents[2]
CODECS = ("gzip", "snappy", "lz4", "zstd")
GROUPS = {"analytics-ingest": "events_plugin_ingestion", "billing-agg": "llm_usage",
          "audit-archive": "audit_log", "llm-metrics": "llm_usage", "rpc-billing": "agent_rpc_metering",
          "dead-letter-monitor": "dead_letter"}
LIVE_TOPIC = "llm_usage"
LIVE_MAX = 20_000  # bounds the live producer


def examples(registry: Registry) -> list[tuple[str, bytes, bytes]]:
    """(topic, key, value) of every valid example of every event type, on its registry topic."""
    out = []
    for t in registry.topics:
        for event_type in t.event_types:
            for f in sorted((ROOT / "schemas" / "examples" / event_type / "valid").glob("*.json")):
                doc = json.loads(f.read_text())
                key = doc.get(t.key) or doc.get("data", {}).get(t.key) or f.stem
                out.append((t.name, str(key).encode(), f.read_bytes()))
    return out


def read_everything(conf: dict, topics: list[str]) -> dict[tuple[str, int, int], tuple]:
    """Every record of `topics` up to their end now: (topic, partition, offset) -> content."""
    c = Consumer(conf | {"group.id": "takeover-reader", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    out: dict[tuple[str, int, int], tuple] = {}
    try:
        meta = c.list_topics(timeout=30).topics
        parts = [TopicPartition(t, p, 0) for t in topics for p in meta[t].partitions]
        ends = {(tp.topic, tp.partition): c.get_watermark_offsets(tp, timeout=30)[1] for tp in parts}
        c.assign([tp for tp in parts if ends[(tp.topic, tp.partition)] > 0])
        left = {k for k, end in ends.items() if end > 0}
        deadline = time.monotonic() + 120
        while left and time.monotonic() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            k = (m.topic(), m.partition())
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    left.discard(k)
                continue
            if m.offset() < ends[k]:
                out[(m.topic(), m.partition(), m.offset())] = (
                    m.key(), m.value(), tuple(m.headers() or ()), m.timestamp())
            if m.offset() + 1 >= ends[k]:
                left.discard(k)
        assert not left, f"could not read {sorted(left)} to their end"
    finally:
        c.close()
    return out


def committed(conf: dict, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer(conf | {"group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


class LiveProducer:
    """A standard producer writing through the switch; every acknowledged (partition, offset,
    value) is recorded, every error counted."""

    def __init__(self, bootstrap: str, most: int = LIVE_MAX):
        self.most = most
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                           "compression.type": "lz4", "linger.ms": 5, "batch.size": 16384,
                           "retry.backoff.ms": 100, "message.timeout.ms": 180_000,
                           "reconnect.backoff.max.ms": 500, "log_level": 0})
        self.acked: list[tuple[int, int, bytes]] = []
        self.ack_times: list[float] = []
        self.errors: list[str] = []
        self.last_ack = 0.0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
            self.last_ack = time.monotonic()
            self.ack_times.append(self.last_ack)

    def _run(self) -> None:
        for i in range(self.most):
            if self._stop.is_set():
                break
            value = json.dumps({"live": i}).encode()
            while True:
                try:
                    self.p.produce(LIVE_TOPIC, value, key=f"team-{i % 7}".encode(), on_delivery=self._done)
                    break
                except BufferError:
                    self.p.poll(0.1)
            self.p.poll(0)
            time.sleep(0.005)

    def stop(self) -> int:
        self._stop.set()
        self.thread.join(60)
        return self.p.flush(120)


def with_legacy_window(registry: Registry, tmp_path: Path, stands_in_for: list[str]) -> Registry:
    """topics.yaml plus a `legacy_plaintext:` window of a week for these principals."""
    import datetime

    until = (datetime.datetime.now(datetime.UTC).date() + datetime.timedelta(days=7)).isoformat()
    f = tmp_path / "topics.yaml"
    f.write_text(Path(registry.path).read_text()
                 + f"legacy_plaintext:\n  stands_in_for: [{', '.join(stands_in_for)}]\n  until: {until}\n")
    return load_registry(f)


def anonymous_write(bootstrap: str, topic: str) -> int | None:
    """An anonymous PLAINTEXT write: None if acknowledged, else the error code."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 15_000,
                  "log_level": 0})
    got: list = []
    p.produce(topic, b"{}", on_delivery=lambda err, msg: got.append(err))
    p.flush(30)
    assert got, f"no answer for {topic}"
    return None if got[0] is None else got[0].code()


def seed(conf: dict, registry: Registry, copies: int = 25) -> dict[str, dict[int, int]]:
    """Every example event `copies` times in each codec, then each group committed halfway
    through each partition of its topic; returns the groups' committed offsets."""
    events = examples(registry)
    assert {t for t, _, _ in events} >= {"events_plugin_ingestion", "llm_usage", "audit_log",
                                         "agent_rpc_metering", "billing_events"}
    for i, codec in enumerate(CODECS):
        p = Producer(conf | {"compression.type": codec, "acks": "all"})
        for n in range(copies):
            for topic, key, value in events:
                p.produce(topic, value, key=key, headers=[("n", f"{i}-{n}".encode())])
            p.poll(0)
        assert p.flush(60) == 0
    meta = AdminClient(conf).list_topics(timeout=30).topics
    groups = {}
    for g, topic in GROUPS.items():
        c = Consumer(conf | {"group.id": g})
        marks = []
        for p in meta[topic].partitions:
            end = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            marks.append(TopicPartition(topic, p, end // 2))
        commit_retrying(c, marks)
        c.close()
        groups[g] = committed(conf, g, topic, len(meta[topic].partitions))
    assert sum(len(v) for v in groups.values()) > 0
    return groups


def all_committed(conf: dict) -> dict[str, dict[int, int]]:
    meta = AdminClient(conf).list_topics(timeout=30).topics
    return {g: committed(conf, g, t, len(meta[t].partitions)) for g, t in GROUPS.items()}


# The command line the Kubernetes test runs on the node's network. Records travel as JSON:
# bytes in base64, keys of the snapshot as "topic/partition/offset".

def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def _record(r: tuple) -> list:
    key, value, headers, ts = r
    return [_b64(key), _b64(value), [[k, _b64(v)] for k, v in headers], list(ts)]


def _conf(args: argparse.Namespace) -> dict:
    if args.bootstrap:  # the old PLAINTEXT address: no login
        return {"bootstrap.servers": args.bootstrap, "log_level": 0}
    from hanzo_stream.core.connection import Connection

    return Connection.from_env().confluent() | {"log_level": 0}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.integration.takeover_data")
    ap.add_argument("--bootstrap", help="PLAINTEXT address; default: HANZO_STREAM_* (SASL_SSL)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("seed")
    snap = sub.add_parser("snapshot")
    snap.add_argument("--out", type=Path, required=True)
    live = sub.add_parser("live")
    live.add_argument("--ledger", type=Path, required=True)
    live.add_argument("--stop-file", type=Path, required=True)
    live.add_argument("--most", type=int, default=LIVE_MAX, help="records at most (a bound)")
    anon = sub.add_parser("write")
    anon.add_argument("--topic", required=True)
    args = ap.parse_args(argv)
    conf = _conf(args)
    if args.cmd == "seed":
        print(json.dumps(seed(conf, load_registry(ROOT / "topics.yaml"))))
    elif args.cmd == "snapshot":
        records = read_everything(conf, list(TOPICS))
        args.out.write_text(json.dumps({
            "records": {f"{t}/{p}/{o}": _record(r) for (t, p, o), r in records.items()},
            "groups": all_committed(conf)}))
    elif args.cmd == "live":
        producer = LiveProducer(args.bootstrap, args.most)
        producer.thread.start()
        while not args.stop_file.exists() and producer.thread.is_alive():
            time.sleep(0.2)
        unacked = producer.stop()
        args.ledger.write_text(json.dumps({
            "acked": [[p, o, _b64(v)] for p, o, v in producer.acked], "errors": producer.errors,
            "ack_times": producer.ack_times, "unacked": unacked}))
    elif args.cmd == "write":
        print(json.dumps({"error": anonymous_write(args.bootstrap, args.topic)}))


if __name__ == "__main__":
    main()
