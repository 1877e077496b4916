"""From 1 broker to 3, live: the commands of docs/runbooks/scaling-1-to-3.md, run for real.

A one-broker platform (`hanzo-stream local up --only kafka,reconcile`) holds data while
producers (the client library, every event counted by id), a plain KIP-848 consumer group
and the Spark jobs analytics-ingest and billing-agg run. Then, with nothing stopped:

    hanzo-stream local scale --brokers 3      # two nodes join; each becomes a controller voter
    (topics.yaml: replication: {profile: cluster})
    hanzo-stream plan                          # the moves, the bytes, the throttle
    hanzo-stream apply --wait 600              # throttled reassignment, in sync, min ISR 2
    hanzo-stream plan                          # nothing left to do

and at the end every partition (Kafka's __consumer_offsets too) has 3 in-sync replicas,
nothing acknowledged was lost or duplicated, the longest pause of each consumer is measured,
and a broker leading partitions being written is killed while production goes on and an
hour of llm_usage is written across the kill; it comes back while the jobs catch up, and
ClickHouse holds each event exactly once and billing is exact to the micro-dollar, with no
window billed twice. (That last part was test_failover's own test on a 3-broker cluster of
its own, with two more Spark starts; the grown cluster is such a cluster.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from hanzo_stream.client.producer import EventProducer
from hanzo_stream.local import credentials, failover, kafka
from hanzo_stream.local.failover import Ledger, Tally
from hanzo_stream.schemas.store import load

from .conftest import Cluster, exports, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
RATE = 100  # llm_usage events/s (and as many insights events) while the cluster grows


@dataclass
class Shell:
    """The operator's terminal: the project CLI with this module's HANZO_STREAM_HOME."""

    home: Path
    env: dict[str, str] = field(default_factory=dict)

    def __call__(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        res = subprocess.run([sys.executable, "-m", "hanzo_stream", *args], cwd=ROOT, env=self.env,
                             capture_output=True, text=True, timeout=timeout)
        print(f"$ hanzo-stream {' '.join(args)}  -> exit {res.returncode}")
        return res


@dataclass
class Traffic:
    """Producers and a consumer running on their own threads, each step bounded."""

    cluster: Cluster
    registry: object
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    ledger: Ledger = field(default_factory=Ledger)
    clicks: int = 0
    received: list[float] = field(default_factory=list)  # when the probe consumer got a record
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def produce(self) -> None:
        from .spark_harness import insights

        schemas = load(ROOT / "schemas")
        gateway = EventProducer.connect(self.cluster.as_("llm-gateway"), stage="llm-gateway",
                                        registry=self.registry, schemas=schemas)
        capture = EventProducer.connect(self.cluster.as_("insights-capture"),
                                        stage="insights-capture", registry=self.registry,
                                        schemas=schemas)
        teams = [f"team_{self.run}_{i}" for i in range(8)]
        try:
            for _ in range(3000):  # at most 3000 s; stopped by the test long before
                if self.stop.is_set():
                    break
                failover.send(gateway, self.ledger, teams, RATE // 10, rate=RATE)
                for _ in range(RATE // 10):
                    capture.send(insights(self.run, self.clicks, datetime.now(UTC)))
                    self.clicks += 1
                capture.poll(0)
            gateway.flush_or_raise()
            capture.flush_or_raise()
        except Exception as e:  # surfaced by the test's assertions
            self.errors.append(repr(e))

    def consume(self) -> None:
        """A KIP-848 group member reading llm_usage: the pause a plain consumer sees."""
        from confluent_kafka import Consumer

        c = Consumer(self.cluster.admin.confluent() | {
            "group.id": f"scale-probe-{self.run}", "group.protocol": "consumer",
            "auto.offset.reset": "latest"})
        c.subscribe([failover.TOPIC])
        try:
            for _ in range(100_000):  # bounded; stopped by the test
                if self.stop.is_set():
                    break
                for m in c.consume(500, 0.2):
                    if m.error() is None:
                        self.received.append(time.monotonic())
        finally:
            c.close()

    def longest_pause(self, since: float, until: float) -> float:
        return longest_gap(self.received, since, until)


def flat(text: str) -> str:
    """CLI output with rich's line wrapping undone."""
    return " ".join(text.split())


def batch_commits(home: Path, job: str) -> list[float]:
    """When each micro-batch of a Spark job committed (its checkpoint's commit files)."""
    files = (home / "jobs" / job / "checkpoint").glob("*/commits/*")
    return sorted(f.stat().st_mtime for f in files if f.name.isdigit())


def longest_gap(times: list[float], since: float, until: float) -> float:
    inside = [since] + [t for t in times if since < t < until] + [until]
    return max(b - a for a, b in zip(inside, inside[1:], strict=False))


def isr_counts(cluster: Cluster) -> dict[str, set[tuple[int, int]]]:
    """topic -> {(replicas, in-sync replicas)} over its partitions, as the brokers say."""
    md = cluster.admin_client().list_topics(timeout=30)
    return {n: {(len(p.replicas), len(p.isrs)) for p in t.partitions.values()}
            for n, t in md.topics.items()}


def test_one_broker_grows_to_three_under_load(tmp_path, registry):
    from hanzo_stream.jobs import process

    from .spark_harness import (
        assert_caught_up,
        billing_events,
        chdb_query,
        expected_billing,
        fast_specs,
        job_env,
        offsets_of,
        usage,
    )

    t0 = time.monotonic()
    home = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANZO_STREAM_")}
    sh = Shell(home, env | {"HANZO_STREAM_HOME": str(home)})
    res = sh("local", "up", "--only", "kafka,reconcile")
    assert res.returncode == 0, res.stdout + res.stderr
    sh.env |= exports(sh("local", "env").stdout)  # as the runbook: eval "$(hanzo-stream local env)"
    local = kafka.LocalCluster.load(home / "kafka")
    creds = credentials.of_home(home, registry.principal_names())
    cluster = Cluster(local.bootstrap, local.ca_file, creds, 1, home, local)

    # 1. One broker holding data, and everything running on it.
    held = Ledger()
    gateway = EventProducer.connect(cluster.as_("llm-gateway"), stage="llm-gateway",
                                    registry=registry, schemas=load(ROOT / "schemas"))
    failover.send(gateway, held, [f"team_{held.run}_{i}" for i in range(8)], 20_000)
    gateway.flush_or_raise()
    jobs = {"analytics-ingest": "analytics-ingest", "billing-agg": "billing-aggregator"}
    consumers = fast_specs(tmp_path, "analytics-ingest", trigger="1s")
    fast_specs(tmp_path, "billing-agg", trigger="2s")
    for name, principal in jobs.items():
        process.start(name, tmp_path, job_env(cluster, principal, tmp_path),
                      registry=ROOT / "topics.yaml", consumers=consumers, cwd=ROOT)
    traffic = Traffic(cluster, registry)
    threads = [threading.Thread(target=traffic.produce, daemon=True),
               threading.Thread(target=traffic.consume, daemon=True)]
    figures: dict[str, float] = {}
    try:
        wait_for(lambda: all(batch_commits(tmp_path, n) for n in jobs), 300, "both jobs' first batch")
        for t in threads:
            t.start()
        wait_for(lambda: len(traffic.received) > RATE, 60, "the probe consumer to read")

        # 2. The runbook, command by command.
        grow_from = time.monotonic()
        res = sh("local", "scale", "--brokers", "3")
        assert res.returncode == 0, res.stdout + res.stderr
        assert "controller voters [1, 2, 3]" in flat(res.stderr), res.stderr
        figures["scale"] = time.monotonic() - grow_from
        local = kafka.LocalCluster.load(home / "kafka")  # the test reads through all three now
        cluster = Cluster(local.bootstrap, local.ca_file, creds, 3, home, local)
        doc = yaml.safe_load((ROOT / "topics.yaml").read_text())
        doc["replication"] = {"profile": "cluster"}
        grown = tmp_path / "topics.yaml"
        grown.write_text(yaml.safe_dump(doc, sort_keys=False))
        res = sh("plan", "--registry", str(grown))
        assert res.returncode == 2, res.stdout + res.stderr
        moves = re.findall(r"topic (\S+): replication factor 1 -> 3, (\d+) partition\(s\) move, "
                           r"([\d.]+ \w+) to copy", flat(res.stdout))
        assert {m[0] for m in moves} >= {t.name for t in registry.topics} | {"__consumer_offsets"}, \
            res.stdout
        apply_from = time.monotonic()
        res = sh("apply", "--registry", str(grown), "--wait", "600")
        assert res.returncode == 0, res.stdout + res.stderr
        grown_at = time.monotonic()
        figures["apply"] = grown_at - apply_from
        copied = re.findall(r"([\d.]+ \w+) of \1 copied", flat(res.stdout + res.stderr))[-1:]
        assert copied, res.stdout + res.stderr  # progress, ending complete
        res = sh("plan", "--registry", str(grown))
        assert res.returncode == 0, res.stdout + res.stderr

        # 3. Every partition: 3 replicas, 3 in sync; 3 controller voters.
        def all_in_sync():
            counts = isr_counts(cluster)
            return counts if all(c == {(3, 3)} for c in counts.values()) else None

        counts = wait_for(all_in_sync, 60, "3 in-sync replicas everywhere")
        assert set(counts) >= {t.name for t in registry.topics} | {"__consumer_offsets"}
        assert kafka.quorum_status(local, creds.admin)["voters"] == [1, 2, 3]
        time.sleep(5)  # the consumers read on a while after the move
        figures["probe pause"] = traffic.longest_pause(grow_from, time.monotonic())
        for n in jobs:
            figures[f"{n} pause"] = longest_gap(batch_commits(tmp_path, n), grow_from, time.monotonic())

        # 4. A broker that leads partitions being written dies; production goes on. Not node 1:
        # the clients started before the growth have it as their only bootstrap address, and
        # Spark's Kafka admin client bootstraps again after a connection error (a finding of
        # this test: the runbook says to restart such clients after growing; on Kubernetes the
        # bootstrap address is a Service over every ready pod).
        led = Counter(b for t in (failover.TOPIC, "events_plugin_ingestion")
                      for b in failover.leaders(cluster.admin, t).values() if b != 1)
        victim = max(sorted(led), key=led.get)
        # Billing's proof across the kill: an hour of spend (a day of its own, newer than the
        # traffic's, whose later events billing-agg then dead-letters as late: not counted
        # here), ~60 events/s for 20 s from the kill on, then one event that closes the hour.
        spend_run = uuid.uuid4().hex[:8]
        day = datetime(2034, 6, 7, tzinfo=UTC)
        spend = [usage(spend_run, "abc"[i % 3], "xy"[i % 2], day + timedelta(hours=10, seconds=2 * i), i)
                 for i in range(1200)]
        closer = usage(spend_run, "a", "x", day + timedelta(hours=11, minutes=45), 7)
        want = expected_billing(spend + [closer], day + timedelta(hours=11, minutes=35),
                                "hanzo-stream/billing-agg")
        assert len(want) == 6  # teams a, b, c x orgs x, y in the closed hour
        spender = EventProducer.connect(cluster.as_("llm-gateway"), stage="llm-gateway",
                                        registry=registry, schemas=load(ROOT / "schemas"))
        killed_at = time.monotonic()
        kafka.kill(home / "kafka", victim)
        sent = len(traffic.ledger.sent)
        for i, e in enumerate(spend):
            spender.send(e)
            ahead = killed_at + (i + 1) / 60 - time.monotonic()
            spender.poll(max(0.0, ahead))
        spender.send(closer)
        spender.flush_or_raise()
        wait_for(lambda: len(traffic.ledger.sent) > sent + 20 * RATE, 120, "20 s more of production")
        figures["resume after kill"] = traffic.ledger.resume_seconds(killed_at) or -1
        traffic.stop.set()
        for t in threads:
            t.join(300)
        back = threading.Thread(target=kafka.start, args=(home / "kafka", creds),
                                kwargs={"only": {victim}, "timeout": 180}, daemon=True)
        back.start()  # the broker returns while the jobs catch up

        # analytics-ingest catches up, then holds each event exactly once; billing-agg bills
        # the closed hour once, exactly
        def caught_up() -> bool | None:
            committed, ends = offsets_of(cluster, "analytics-ingest", "events_plugin_ingestion")
            return committed == ends or None

        wait_for(caught_up, 300, "analytics-ingest to catch up")
        wait_for(lambda: len(billing_events(cluster, spend_run)) >= len(want), 300,
                 "billing-agg to bill the closed hour")
        time.sleep(5)  # one more trigger of each: a replayed window would show up now
        back.join(240)
        assert not back.is_alive(), f"broker {victim} did not come back"
    finally:
        traffic.stop.set()
        for t in threads:
            if t.is_alive():
                t.join(300)
        for n in jobs:
            process.stop(n, tmp_path)
    try:
        assert not traffic.errors, traffic.errors
        t1 = Tally.of(held, failover.ids_in_topic(cluster.admin, held))
        t2 = Tally.of(traffic.ledger, failover.ids_in_topic(cluster.admin, traffic.ledger))
        (row,) = chdb_query(tmp_path / "jobs" / "analytics-ingest" / "chdb",
                            f"SELECT count() AS n, uniqExact(id) AS ids FROM events "
                            f"WHERE startsWith(team_id, '{traffic.run}-')")
        assert_caught_up(cluster, "analytics-ingest", "events_plugin_ingestion")
        assert_caught_up(cluster, "billing-agg", "llm_usage")
        billed = billing_events(cluster, spend_run)
    finally:
        kafka.stop(home / "kafka")
    print(f"\n1 -> 3 brokers under {RATE}+{RATE} events/s: scale {figures['scale']:.1f}s, apply "
          f"{figures['apply']:.1f}s copying {copied[0]}; longest pause: probe consumer "
          f"{figures['probe pause']:.1f}s; longest gap between Spark batch commits: analytics-ingest "
          f"{figures['analytics-ingest pause']:.1f}s, billing-agg {figures['billing-agg pause']:.1f}s; "
          f"held {t1.acked} + produced during {t2.acked} acked, lost {t1.acked_lost + t2.acked_lost}, "
          f"duplicated {t1.duplicated + t2.duplicated}; broker {victim} killed: acks resumed after "
          f"{figures['resume after kill']:.1f}s; ClickHouse {row['n']} rows for {traffic.clicks} "
          f"events; billing events {len(billed)} for {len(want)} closed windows; test "
          f"{time.monotonic() - t0:.0f}s")
    assert (t1.acked, t1.acked_lost, t1.duplicated) == (20_000, 0, 0)
    assert (t2.failed, t2.unreported, t2.acked_lost, t2.duplicated) == (0, 0, 0, 0)
    assert t2.acked == t2.sent > 20 * RATE
    assert 0 <= figures["resume after kill"] < 30
    assert figures["probe pause"] < 20, figures
    assert row == {"n": traffic.clicks, "ids": traffic.clicks}  # each event exactly once
    assert {e["data"]["billing_id"]: e for e in billed} == want  # exact Decimal totals
    assert len(billed) == len(want), "a window was billed twice"
