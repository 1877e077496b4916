"""Produce throughput: our EventProducer (validate + key + lz4) vs raw confluent-kafka.

2 KB insights.event.captured envelopes into events_plugin_ingestion (16 partitions) on one
local KRaft broker (SASL_SSL, TLS 1.3). Both sides use the same producer settings (the
standard's: acks=all, idempotence, lz4, 16 KB batches, linger 5 ms, murmur2) and send the
same bytes with the same keys; the raw side gets them pre-serialized, ours builds them from
the event dicts, validating each one. Rounds alternate so drift on a shared machine hits
both sides. Writes the "Produce" section of docs/benchmarks.md.

    python bench/produce.py [--events 20000] [--rounds 6]

Uses the broker in HANZO_STREAM_BOOTSTRAP (+ credentials) when set, else starts one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_section  # noqa: E402

from hanzo_stream.client import envelope  # noqa: E402
from hanzo_stream.client.producer import EventProducer, producer_config  # noqa: E402
from hanzo_stream.core.connection import Connection  # noqa: E402
from hanzo_stream.registry import load_registry  # noqa: E402
from hanzo_stream.schemas.store import load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "events_plugin_ingestion"


def make_events(n: int, size: int = 2048) -> list[dict]:
    """Envelopes of ~`size` bytes: realistic analytics events with a properties bag."""
    events = []
    for i in range(n):
        props = {"$browser": "Firefox", "$os": "Linux", "$screen_width": 1440, "plan": "pro",
                 "$current_url": f"https://app.hanzo.ai/project/{i % 97}/dashboard", "seq": i}
        e = envelope.build("insights.event.captured", "insights-capture", {
            "event": "$pageview", "distinct_id": f"user_{i % 5000}", "properties": props,
            "ip": f"203.0.113.{i % 254 + 1}", "session_id": f"s_{i % 800}",
            "sent_at": envelope.iso_ms()}, team_id=f"team_{i % 200}")
        pad = size - len(json.dumps(e, separators=(",", ":")))
        props["$pad"] = "x" * max(pad - 11, 0)
        events.append(e)
    return events


class Counter:
    def __init__(self):
        self.ok = self.failed = 0

    def __call__(self, err, msg):
        if err is None:
            self.ok += 1
        else:
            self.failed += 1


class Clock:
    """Wall time and this process's CPU time (all threads: Python + librdkafka)."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def produce_all(produce, producer, items) -> None:
    for item in items:
        while True:
            try:
                produce(item)
                break
            except BufferError:
                producer.poll(0.01)


def run_raw(conn: Connection, payloads: list[tuple[bytes, bytes]]) -> Clock:
    from confluent_kafka import Producer

    p = Producer(producer_config(conn, "bench-raw"))
    p.produce(TOPIC, payloads[0][1], payloads[0][0])  # connect + producer id outside the timing
    p.flush(30)
    cb = Counter()
    with Clock() as c:
        produce_all(lambda kv: p.produce(TOPIC, kv[1], kv[0], on_delivery=cb), p, payloads)
        assert p.flush(120) == 0
    assert cb.ok == len(payloads) and cb.failed == 0
    return c


def run_ours(conn: Connection, registry, schemas, events: list[dict]) -> Clock:
    p = EventProducer.connect(conn, stage="bench", registry=registry, schemas=schemas,
                              client_id="bench-ours")
    p.send(events[0])  # compile the schema outside the timed loop, as a service does at start-up
    p.flush(30)
    p.counts.__init__()
    with Clock() as clock:
        produce_all(p.send, p.producer, events)
        p.flush_or_raise(120)
    c = p.counts
    assert c.accepted == c.delivered == len(events) and c.dead_lettered == 0, c
    return clock


def run_ours_bytes(conn: Connection, registry, schemas, payloads: list[tuple[bytes, bytes]]) -> Clock:
    p = EventProducer.connect(conn, stage="bench", registry=registry, schemas=schemas,
                              client_id="bench-ours-bytes")
    p.send_bytes(payloads[0][1], TOPIC)  # connect + producer id + schema compile, untimed
    p.flush(30)
    p.counts.__init__()
    with Clock() as clock:
        produce_all(lambda kv: p.send_bytes(kv[1], TOPIC), p.producer, payloads)
        p.flush_or_raise(120)
    assert p.counts.accepted == len(payloads) and p.counts.dead_lettered == 0
    return clock


def ensure_topic(conn: Connection, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conn.confluent())
    if TOPIC in admin.list_topics(timeout=10).topics:
        return
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    time.sleep(2)


def bench(conn: Connection, events_n: int, rounds: int) -> str:
    registry = load_registry(ROOT / "topics.yaml")
    schemas = load(ROOT / "schemas")
    ensure_topic(conn, registry.topic(TOPIC).partitions)
    events = make_events(events_n)
    payloads = [(e["team_id"].encode(), json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode())
                for e in events]
    size = statistics.mean(len(v) for _, v in payloads)
    from hanzo_stream.client.router import Router
    from hanzo_stream.schemas.validator import Validator

    same = Router(registry, Validator(schemas)).route_event(events[0])
    assert same.value == payloads[0][1] and same.key == payloads[0][0], "both sides must send the same bytes"
    # Warm-up (the broker's JIT, page cache, log segments), then rounds in rotating order so
    # neither side always runs first.
    run_raw(conn, payloads)
    run_ours(conn, registry, schemas, events)
    runs = {"raw": lambda: run_raw(conn, payloads),
            "ours": lambda: run_ours(conn, registry, schemas, events),
            "bytes": lambda: run_ours_bytes(conn, registry, schemas, payloads)}
    times: dict[str, list[Clock]] = {k: [] for k in runs}
    order = list(runs)
    for r in range(rounds):
        for k in order[r % 3:] + order[:r % 3]:
            times[k].append(runs[k]())
        print(f"round {r + 1}: " + ", ".join(f"{k} {events_n / times[k][-1].wall:,.0f}/s" for k in runs),
              flush=True)

    def rate(k: str) -> float:
        return events_n / statistics.median(c.wall for c in times[k])

    def ratio(k: str) -> float:
        """Median of per-round ratios: each round's runs are adjacent, so share the machine's load."""
        pairs = zip(times[k], times["raw"], strict=True)
        return statistics.median(raw.wall / ours.wall for ours, raw in pairs)

    def cpu_us(k: str) -> float:
        return statistics.median(c.cpu for c in times[k]) / events_n * 1e6

    names = {"raw": "raw confluent-kafka (pre-serialized bytes)",
             "ours": "EventProducer.send(dict): validate + serialize + key",
             "bytes": "EventProducer.send_bytes(bytes): parse + validate + key"}
    body = (f"`python bench/produce.py --events {events_n} --rounds {rounds}` — {events_n} "
            f"insights.event.captured envelopes of {size:,.0f} bytes, 200 team keys, into {TOPIC} "
            "(16 partitions) on one local KRaft broker over SASL_SSL/TLS 1.3; all three with the "
            "standard's settings (acks=all, idempotence, lz4, batch 16 KB, linger 5 ms, murmur2), "
            "each connected before its clock starts. After one warm-up round, rounds rotate the "
            "order of the three; throughput is the median of the rounds, `vs raw` the median of "
            "per-round ratios (adjacent runs share the machine's load), CPU the producing "
            "process's CPU time (Python and librdkafka threads) per event. Target: ours >= 0.8x "
            "raw.\n\n"
            "| producer | events/s | MB/s | vs raw | CPU µs/event |\n|---|---|---|---|---|\n")
    for k in runs:
        body += (f"| {names[k]} | {rate(k):,.0f} | {rate(k) * size / 1e6:.1f} | "
                 f"{1.0 if k == 'raw' else ratio(k):.2f}x | {cpu_us(k):.1f} |\n")
    body += "\nPer round (events/s): " + "; ".join(
        f"{k} " + ", ".join(f"{events_n / c.wall:,.0f}" for c in times[k]) for k in runs) + ".\n"
    print(body)
    return body


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--no-write", action="store_true", help="Print only; leave docs/ alone.")
    args = ap.parse_args()
    if os.environ.get("HANZO_STREAM_BOOTSTRAP"):
        body = bench(Connection.from_env(), args.events, args.rounds)
    else:
        from hanzo_stream.local import credentials, kafka

        with tempfile.TemporaryDirectory(prefix="hs-bench-produce-") as tmp:
            home = Path(tmp)
            creds = credentials.of_home(home)
            cluster = kafka.start(home / "kafka", creds, brokers=1, heap_mb=1024)
            try:
                body = bench(cluster.connection("admin", creds.admin), args.events, args.rounds)
            finally:
                kafka.stop(home / "kafka")
    if not args.no_write:
        write_section("Produce", body)


if __name__ == "__main__":
    main()
