"""Producers at acks=all while a change rolls out, then every acknowledged event counted.

Runs where the cluster's names resolve (`hanzo-stream local kube exec -- python -m
hanzo_stream.kube.load ...`), as any principal (HANZO_STREAM_* variables, the CA file
from the stack's output). The bookkeeping is failover.py's: each event gets exactly one
outcome from its delivery report, and the topic is then read back by id.

    produce --ledger F --stop-file S [--rate 100] [--max-seconds 1800] [--min-isr N]
        send llm_usage events until S exists (or max-seconds), flush, write the ledger to F,
        with the longest time a partition was under min ISR meanwhile; meanwhile F.acked
        holds the count acknowledged so far (`acked`), rewritten every second
    count --ledger F
        read llm_usage to its end and print the Tally of that ledger as JSON
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from ..client.producer import EventProducer
from ..core.connection import Connection
from ..local import failover


class UnderMinIsr:
    """Samples the topic's in-sync replicas once a second from a thread of its own: how long
    each partition was under min.insync.replicas (acks=all writes to it fail meanwhile)."""

    def __init__(self, conn: Connection, topic: str, min_isr: int):
        from confluent_kafka.admin import AdminClient

        self.admin, self.topic, self.min_isr = AdminClient(conn.confluent()), topic, min_isr
        self.since: dict[int, float] = {}
        self.longest = 0.0
        self.samples = self.failed_samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                parts = self.admin.list_topics(self.topic, timeout=5).topics[self.topic].partitions
            except Exception:  # no metadata at all this second (every broker restarting)
                self.failed_samples += 1
                continue
            now = time.monotonic()
            self.samples += 1
            for p, meta in parts.items():
                if len(meta.isrs) < self.min_isr:
                    self.since.setdefault(p, now)
                    self.longest = max(self.longest, now - self.since[p])
                else:
                    self.since.pop(p, None)

    def __enter__(self) -> UnderMinIsr:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


def produce(ledger_file: Path, stop_file: Path, rate: float, max_seconds: float,
            min_isr: int = 1) -> int:
    conn = Connection.from_env()
    with UnderMinIsr(conn, failover.TOPIC, min_isr) as isr:
        result = _produce(conn, ledger_file, stop_file, rate, max_seconds)
    doc = json.loads(ledger_file.read_text())
    doc["under_min_isr_longest_s"] = round(isr.longest, 1)
    doc["isr_samples"], doc["isr_samples_failed"] = isr.samples, isr.failed_samples
    ledger_file.write_text(json.dumps(doc))
    return result


def _produce(conn: Connection, ledger_file: Path, stop_file: Path, rate: float,
             max_seconds: float) -> int:
    ledger = failover.Ledger()
    errors: list[tuple[float, str]] = []  # what librdkafka reported while retrying

    def on_error(err) -> None:
        if len(errors) < 200:
            errors.append((time.time(), f"{err.name()}: {err.str()}"))

    producer = EventProducer.connect(conn, stage="load", error_cb=on_error)
    teams = [f"team_load_{i}" for i in range(16)]
    start, i, shown = time.monotonic(), 0, 0.0
    while not stop_file.exists() and time.monotonic() - start < max_seconds:
        if time.monotonic() - shown >= 1:
            shown = time.monotonic()
            _show_acked(ledger_file, len(ledger.acked))
        event = failover.usage_event(ledger, teams[i % len(teams)], i)
        producer.send(event, on_delivery=ledger.report(event["id"]))
        ledger.sent[event["id"]] = time.monotonic()
        i += 1
        ahead = start + i / rate - time.monotonic()
        producer.poll(max(ahead, 0))
    producer.flush(120)
    ledger_file.write_text(json.dumps({
        "run": ledger.run, "sent": list(ledger.sent), "acked": list(ledger.acked),
        "failed": ledger.failed, "errors": errors,
        "seconds": round(time.monotonic() - start, 1)}))
    return 0


def _show_acked(ledger_file: Path, n: int) -> None:
    tmp = ledger_file.with_suffix(".acked.tmp")
    tmp.write_text(str(n))
    tmp.replace(ledger_file.with_suffix(".acked"))  # a reader never sees half a number


def acked(ledger_file: Path) -> int:
    """Events acknowledged so far by the producer writing `ledger_file` (0 before any)."""
    try:
        return int(ledger_file.with_suffix(".acked").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def count(ledger_file: Path) -> int:
    doc = json.loads(ledger_file.read_text())
    ledger = failover.Ledger(run=doc["run"])
    ledger.sent = dict.fromkeys(doc["sent"], 0.0)
    ledger.acked = dict.fromkeys(doc["acked"], 0.0)
    ledger.failed = doc["failed"]
    found: Counter[str] = failover.ids_in_topic(Connection.from_env(), ledger)
    tally = failover.Tally.of(ledger, found)
    print(json.dumps({**tally.__dict__, "producer_errors": len(doc["errors"]),
                      "under_min_isr_longest_s": doc.get("under_min_isr_longest_s"),
                      "isr_samples_failed": doc.get("isr_samples_failed"),
                      "error_samples": sorted({e for _, e in doc["errors"]})[:10],
                      "failed_samples": sorted(set(doc["failed"].values()))[:10],
                      "seconds": doc["seconds"]}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--ledger", type=Path, required=True)
    p.add_argument("--stop-file", type=Path, required=True)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--max-seconds", type=float, default=1800.0)
    p.add_argument("--min-isr", type=int, default=1, help="the topic's min.insync.replicas")
    c = sub.add_parser("count")
    c.add_argument("--ledger", type=Path, required=True)
    a = ap.parse_args(argv)
    if a.cmd == "produce":
        return produce(a.ledger, a.stop_file, a.rate, a.max_seconds, a.min_isr)
    return count(a.ledger)


if __name__ == "__main__":
    sys.exit(main())
