"""The three consumer-group jobs on local Spark against the real SASL_SSL broker with ACLs.

Each job runs as its own registry principal (SCRAM), with exactly the ACLs the registry
derives (hip_cluster applies topics.yaml): no extra grant for Spark's generated group ids.
Every test tags its events with a fresh run id so data left in the shared session broker by
other tests never counts, and works in its own HANZO_STREAM_HOME (checkpoints, chDB).
Jobs run as subprocesses, as `hanzo-stream jobs run NAME --once`, one Spark at a time.

Event dates rise through the session, per topic. A fresh checkpoint reads its topic from the
start, and billing-agg's and rpc-billing's watermark is the newest event time in a batch, so
a test's events must be newer than every earlier test's on the same topic, or its hours close
early and its events count as late. llm_usage: 2030 (test_llm_metrics_live.py, which runs
first) < 2032 < 2038 (crash); agent_rpc_metering: 2036 < 2038 (crash).
The shipped specs refuse event times ahead of the job's clock (`future`), so the windowed jobs
run here from fast_specs copies with `future: off`; test_clock_skew.py runs the check as shipped.
The two outage tests come first: a fresh checkpoint reads its topic from the start, their jobs
take 150 records a batch, and behind the crash tests' 12,000 records on
events_plugin_ingestion the ClickHouse outage took 238 s (80 batches of other tests' events)
against 73 s first; what they prove is the outage's, not the backlog's.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hanzo_stream.core import dead_letter as dl
from hanzo_stream.jobs import chdb_http, process, s3
from hanzo_stream.jobs.archive import committed_files, listed_files, read_committed
from hanzo_stream.local import platform

from .spark_harness import (
    BROKER_MAX_MESSAGE,
    CRASH_JOBS,
    JOB_TIMEOUT,
    POISON_JOBS,
    POISON_KEY,
    ROOT,
    archive_on_s3,
    assert_caught_up,
    assert_rejected,
    audit_events,
    billing_events,
    chdb_query,
    client_says,
    cost,
    dead_letters,
    end_offsets,
    expected_billing,
    expected_settlements,
    fast_specs,
    headers,
    insights,
    invalid_insights,
    iso,
    job_env,
    offsets_of,
    poison,
    postgres_rows,
    postgres_table,
    produce,
    read_all,
    ride_out,
    rpc_call,
    run_once,
    settlements,
    standard,
    usage,
    uuid7,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Iterator[s3.S3Access]:
    """A real S3-compatible server (s3proxy, as `local up` runs it) with the jobs' buckets."""
    from hanzo_stream.local import credentials, object_store

    home = tmp_path_factory.mktemp("object-store")
    creds = credentials.of_home(home)
    try:
        object_store.start(home / object_store.NAME, creds, ["hanzo-audit", "hanzo-stream"])
        yield object_store.access(home / object_store.NAME, creds)
    finally:
        object_store.stop(home / object_store.NAME)


@pytest.fixture(scope="module")
def cluster(hip_cluster, registry):
    """The session broker with topics.yaml applied (topics, SCRAM users, derived ACLs)."""
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import ResourceType as RT

    from tests.integration.conftest import apply_registry

    apply_registry(hip_cluster, registry)  # another module may have changed the cluster
    # Spark's generated group ids get no grant: the jobs must work with the registry's ACLs.
    flt = AclBindingFilter(RT.GROUP, None, ResourcePatternType.ANY, None, None,
                           AclOperation.ANY, AclPermissionType.ANY)
    admin = hip_cluster.admin_client()
    groups = {b.name for b in admin.describe_acls(flt).result(timeout=30)}
    assert not any("spark" in g for g in groups), groups
    return hip_cluster


CODECS = ("gzip", "snappy", "lz4", "zstd")  # the standard's seeds name all four


def _codecs(segment: Path) -> set[str]:
    """The codecs of the record batches in a log segment (Kafka's v2 batch header: base
    offset 8, length 4, leader epoch 4, magic 1, CRC 4, attributes 2: codec in bits 0-2)."""
    data, codecs, at = segment.read_bytes(), set(), 0
    while at + 23 <= len(data):
        length = int.from_bytes(data[at + 8:at + 12], "big")
        if length == 0:
            break  # preallocated tail
        attributes = int.from_bytes(data[at + 21:at + 23], "big")
        codecs.add(("none", "gzip", "snappy", "lz4", "zstd")[attributes & 7])
        at += 12 + length
    return codecs


def send_in_every_codec(cluster, registry, principal: str, events: dict[str, list[dict]]) -> None:
    """Each codec's events through the client library, compressed with that codec. A producer
    may use any codec the standard names (its seeds name all four); the jobs' tests below read
    them back with the rest."""
    from hanzo_stream.client import Accepted, EventProducer, make_producer
    from hanzo_stream.schemas.store import load

    schemas = load(ROOT / "schemas")
    for codec, batch in events.items():
        producer = EventProducer(make_producer(cluster.as_(principal), compression_type=codec),
                                 registry, schemas, f"codec-{codec}")
        assert all(isinstance(producer.send(e), Accepted) for e in batch)
        producer.flush_or_raise()
        assert producer.counts.delivered == len(batch), (codec, producer.counts)


def kcat_ids(cluster, tmp_path: Path, run: str) -> set[str]:
    """The ids of this run's events in events_plugin_ingestion, as Debian's kcat reads them."""
    conf = tmp_path / "kcat.conf"  # PLAIN: Debian 12's kcat repeats the SCRAM nonce (kube_1_dev)
    conf.write_text("security.protocol=SASL_SSL\nsasl.mechanisms=PLAIN\n"
                    "sasl.username=analytics-ingest\n"
                    f"sasl.password={cluster.creds.password('analytics-ingest')}\n"
                    f"ssl.ca.location={cluster.ca_file}\n")
    conf.chmod(0o600)
    read = subprocess.run(["kcat", "-F", str(conf), "-b", cluster.bootstrap, "-C", "-t",
                           "events_plugin_ingestion", "-o", "beginning", "-e", "-q", "-f", "%s\\n"],
                          capture_output=True, timeout=120, check=True)
    # bytes: other tests' records in the topic are not all UTF-8 (hostile ones on purpose)
    return {json.loads(line)["id"] for line in read.stdout.split(b"\n") if run.encode() in line}


def produce_poison(cluster, job: str) -> list[tuple[int, int]]:
    """A ~1 MB raw record and a malformed one whose key is ~1 MB, ahead of a job's events. A
    record too large for dead_letter used to fail every replay of its batch
    (MSG_SIZE_TOO_LARGE): each is dead-lettered cut to fit, and the events behind it flow
    (asserted by the job's own test, which produces them after these)."""
    _, topic, producer = POISON_JOBS[job]
    huge = poison(BROKER_MAX_MESSAGE - 1024)  # room for the batch and record framing
    huge_key = b"K" * (BROKER_MAX_MESSAGE - 4096)
    return produce(cluster, producer, topic, [(POISON_KEY, huge), (huge_key, b"{poison")],
                   config={"message.max.bytes": BROKER_MAX_MESSAGE, "compression.type": "none"})


def assert_poison_dead_lettered(cluster, job: str, where: list[tuple[int, int]]) -> None:
    _, topic, _ = POISON_JOBS[job]
    huge = poison(BROKER_MAX_MESSAGE - 1024)
    huge_key = b"K" * (BROKER_MAX_MESSAGE - 4096)
    letters = dead_letters(cluster, job, topic, set(where))
    (keyed,) = [m for m in letters if m.value() == b"{poison"]
    k = headers(keyed)
    assert k[dl.H_ORIGINAL_KEY] == huge_key[:dl.KEY_MAX] and k[dl.H_KEY_TRUNCATED] == b"true"
    assert k[dl.H_ORIGINAL_KEY_SHA256] == hashlib.sha256(huge_key).hexdigest().encode()
    (letter,) = [m for m in letters if m is not keyed]
    h = headers(letter)
    assert h[dl.H_TRUNCATED] == b"true"
    assert h[dl.H_ORIGINAL_SIZE] == str(len(huge)).encode()
    assert h[dl.H_ORIGINAL_SHA256] == hashlib.sha256(huge).hexdigest().encode()
    assert h[dl.H_ORIGINAL_KEY] == POISON_KEY and letter.key() == topic.encode()
    assert letter.value() == huge[:dl.DEAD_LETTER_MAX_VALUE - len(POISON_KEY)]  # cut to the limit
    committed, _ = offsets_of(cluster, job, topic)
    assert all(committed[p] > o for p, o in where), (committed, where)  # past the poison pill


def every_jobs_panel_has_data(tmp_path: Path, targets: Path, name: str) -> None:
    """A real Prometheus, pointed at the job by the target file it wrote, answers every panel
    of the Spark jobs dashboard for it."""
    from hanzo_stream.local import prometheus
    from hanzo_stream.monitoring import dashboards
    from tests.integration.conftest import wait_for

    wait_for(lambda: (targets / f"{name}.json").exists(), JOB_TIMEOUT, "the job's target file")
    url = prometheus.start(tmp_path / "prometheus", [prometheus.ScrapeJob(
        "hanzo-stream-jobs", (), file_sd=str(targets / "*.json"))], rules=[],
        scrape_interval="1s", evaluation_interval="1s")
    try:
        read = f'sum(hanzo_stream_spark_input_rows_total{{spark_job="{name}"}})'
        wait_for(lambda: (lambda r: r and float(r[0]["value"][1]) > 0)(prometheus.query(url, read)),
                 JOB_TIMEOUT, "the job's rows in Prometheus", every=2)
        queries = dashboards.panel_queries([dashboards.JOBS_DASHBOARD.file])
        assert len(queries) >= 7
        missing = [q for q in queries if not wait_for(
            lambda q=q: prometheus.query(url, dashboards.expand(q.expr, {"spark_job": name})),
            60, f"data for {q.panel}", every=2)]
        assert not missing
    finally:
        prometheus.stop(tmp_path / "prometheus")


def test_audit_archive_rides_out_half_a_minute_without_s3(cluster, tmp_path, registry):
    """The S3 store (archive and checkpoint) stops for 30 s while audit events keep arriving
    (issue 24, item 8), then comes back on its address. Every event ends in the committed
    archive exactly once."""
    from hanzo_stream.local import credentials, object_store

    home = tmp_path / "store"
    creds = credentials.of_home(home)
    object_store.start(home / object_store.NAME, creds, ["hanzo-audit", "hanzo-stream"])
    store = object_store.access(home / object_store.NAME, creds)
    run = uuid.uuid4().hex[:8]
    events = audit_events(registry, run, 900, datetime(2035, 7, 8, 22, tzinfo=UTC),
                          timedelta(seconds=3))
    consumers, path = archive_on_s3(tmp_path, f"outage-{run}", max_offsets_per_trigger=150,
                                    trigger="2s")
    env = job_env(cluster, "audit-archiver", tmp_path, store)

    def committed_batches() -> int:
        return len([k for k in s3.list_keys(store.client(), "hanzo-stream",
                                            f"checkpoints/outage-{run}/archive/commits/")
                    if k.rsplit("/", 1)[-1].isdigit()])

    try:
        outage = ride_out(
            cluster, "audit-archive", "audit_log", "iam-service", "org_id", events,
            lambda: process.start("audit-archive", tmp_path, env, registry=ROOT / "topics.yaml",
                                  consumers=consumers, cwd=ROOT),
            lambda: committed_batches() >= 2, tmp_path,
            down=lambda: object_store.stop(home / object_store.NAME),
            up=lambda: object_store.start(home / object_store.NAME, creds))
    finally:
        object_store.stop(home / object_store.NAME)
        object_store.start(home / object_store.NAME, creds)  # to read what was committed
    try:
        ids = [r["id"] for r in read_committed(path, store).to_pylist()
               if r["org_id"].startswith(run)]
    finally:
        object_store.stop(home / object_store.NAME)
    print(f"\naudit-archive, S3 down 30 s: {outage.outcome}; restarts {outage.restarts}; caught "
          f"up {outage.caught_up_s:.0f}s after S3 was back; {len(ids)} of {len(events)} events "
          f"committed ({len(set(ids))} distinct)")
    assert sorted(ids) == sorted(e["id"] for e in events)  # every one, once
    assert_caught_up(cluster, "audit-archive", "audit_log")


def test_analytics_ingest_rides_out_half_a_minute_when_clickhouse_refuses_writes(cluster, tmp_path):
    """ClickHouse refuses every write for 30 s while events keep arriving (issue 24, item 8),
    then takes them again. The job's ClickHouse is chDB, embedded in its driver: "down" is its
    data directory remounted read-only (a bind mount over it; needs root, as the Kubernetes
    tests do), which fails every insert as a full or broken disk would. Every event ends in
    `events` exactly once: a batch that failed is replayed with the same deduplication token.

    The job runs with HANZO_STREAM_METRICS_LISTEN, as the local platform gives every job (until
    2026-12-02 a test of its own, with a Spark start of its own): once caught up, the restarted
    job serves its queries' progress, announces itself to Prometheus, and a real Prometheus
    scraping it answers every panel of the Spark jobs dashboard."""
    from hanzo_stream.jobs.consumer import LISTEN_ENV, TARGETS_ENV

    run = uuid.uuid4().hex[:8]
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    events = [insights(run, i, t0 + timedelta(seconds=i)) for i in range(900)]
    consumers = fast_specs(tmp_path, "analytics-ingest", max_offsets_per_trigger=150, trigger="2s")
    env = job_env(cluster, "analytics-ingest", tmp_path)
    targets = tmp_path / "targets"
    metrics = {LISTEN_ENV: "127.0.0.1:0", TARGETS_ENV: str(targets)}
    chdb = tmp_path / "jobs" / "analytics-ingest" / "chdb"
    commits = tmp_path / "jobs" / "analytics-ingest" / "checkpoint" / "ingest" / "commits"
    mounted: list[Path] = []

    def down() -> None:
        subprocess.run(["mount", "--bind", str(chdb), str(chdb)], check=True)
        mounted.append(chdb)
        subprocess.run(["mount", "-o", "remount,ro,bind", str(chdb)], check=True)

    def up() -> None:
        subprocess.run(["umount", str(mounted.pop())], check=True)

    try:
        outage = ride_out(
            cluster, "analytics-ingest", "events_plugin_ingestion", "insights-capture", "team_id",
            events,
            lambda: process.start("analytics-ingest", tmp_path, env, registry=ROOT / "topics.yaml",
                                  consumers=consumers, cwd=ROOT, extra_env=metrics),
            lambda: commits.exists() and sum(f.name.isdigit() for f in commits.iterdir()) >= 2,
            tmp_path, down=down, up=up,
            caught_up=lambda: every_jobs_panel_has_data(tmp_path, targets, "analytics-ingest"))
    finally:
        for m in mounted:  # the machine as it was, whatever failed
            subprocess.run(["umount", "-l", str(m)], check=False)
    teams = ", ".join(f"'{run}-team{i}'" for i in range(3))
    (row,) = chdb_query(chdb, f"SELECT count() AS n, uniqExact(id) AS ids FROM events "
                              f"WHERE team_id IN ({teams})")
    print(f"\nanalytics-ingest, ClickHouse read-only 30 s: {outage.outcome}; restarts "
          f"{outage.restarts}; caught up {outage.caught_up_s:.0f}s after; {row['n']} rows of "
          f"{len(events)} events ({row['ids']} distinct)")
    # The job failed the batch and exited; its status names the cause.
    assert "Read-only file system" in outage.outcome, outage.outcome
    # No FINAL: a replayed batch's insert was dropped by its token, so a plain count is exact.
    assert row == {"n": len(events), "ids": len(events)}
    assert_caught_up(cluster, "analytics-ingest", "events_plugin_ingestion")


def test_analytics_ingest_loads_exactly_the_valid_events(cluster, tmp_path, registry):
    """Exactly the valid events, each once, the invalid ones dead-lettered with their bytes,
    behind two records too large for dead_letter; events compressed with every codec among
    them, which the broker keeps as sent and Debian's kcat reads back too."""
    run, codec_run = uuid.uuid4().hex[:8], uuid.uuid4().hex[:8]
    poisoned = produce_poison(cluster, "analytics-ingest")
    codec_t0 = datetime(2041, 1, 1, tzinfo=UTC)
    in_codec = {c: [insights(f"{codec_run}{c[:2]}", i, codec_t0 + timedelta(seconds=i))
                    for i in range(30)] for c in CODECS}
    send_in_every_codec(cluster, registry, "insights-capture", in_codec)
    if cluster.local is not None:  # the broker kept each producer's codec (topics say `producer`)
        stored = set().union(*(_codecs(f) for f in cluster.local.node_dir(1).glob(
            "data/events_plugin_ingestion-*/*.log")))
        assert {"gzip", "snappy", "lz4", "zstd"} <= stored, stored
    t0 = datetime(2031, 1, 1, 9, 58, tzinfo=UTC)
    valid = [insights(run, i, t0 + timedelta(seconds=7 * i)) for i in range(120)]  # crosses 10:00
    # The standard's example as written, and with the run's team (ids as the standard makes them).
    valid += [standard("insights.event.captured"),
              {**standard("insights.event.captured"), "id": f"evt_{run}", "team_id": f"{run}-team1"}]
    retried = valid[:10]  # the producer retried these: same envelope, new offsets
    bad = invalid_insights(run)
    for _, value, cls in bad:  # the client library gives the same verdict on the same bytes
        assert client_says("events_plugin_ingestion", value) == cls, (value, cls)
    records = [(v["team_id"], v) for v in valid + retried] + [(k, v) for k, v, _ in bad]
    where = produce(cluster, "insights-capture", "events_plugin_ingestion", records)

    run_once(cluster, "analytics-ingest", "analytics-ingest", tmp_path)

    db = tmp_path / "jobs" / "analytics-ingest" / "chdb"
    teams = ", ".join(f"'{run}-team{i}'" for i in range(3))
    # The standard's example by its whole sort key: test_client_produce's fuzzed batch may have
    # sent a valid variant with its id and another event name, a row of its own (seen once).
    std_in = standard("insights.event.captured")
    the_standard = (f"(id = '{std_in['id']}' AND team_id = '{std_in['team_id']}' AND event = "
                    f"'{std_in['data']['event']}' AND toDate(timestamp) = '{std_in['timestamp'][:10]}')")
    mine = f"(team_id IN ({teams}) OR {the_standard})"
    rows = chdb_query(db, f"SELECT * FROM events FINAL WHERE {mine} ORDER BY id")
    assert len(rows) == len(valid)
    # the view readers are pointed at counts each retried event once, merged or not; the
    # job's own report (what `local status` shows) counts through it
    (unique,) = chdb_query(db, f"SELECT count() AS n FROM events_unique WHERE {mine}")
    assert unique["n"] == len(valid)
    (everything,) = chdb_query(db, "SELECT count() AS n FROM events_unique")
    report = json.loads((tmp_path / "jobs" / "analytics-ingest" / "report.json").read_text())
    assert report["clickhouse_rows"] == everything["n"]
    by_id = {v["id"]: v for v in valid}
    assert {r["id"] for r in rows} == set(by_id)
    for r in rows:
        v = by_id[r["id"]]
        assert (r["team_id"], r["event"], r["distinct_id"]) == (v["team_id"], v["data"]["event"],
                                                               v["data"]["distinct_id"])
        assert iso(r["timestamp"].astimezone(UTC)) == v["timestamp"]
        assert json.loads(r["properties"]) == v["data"]["properties"]
        assert r["session_id"] == v["data"].get("session_id")
        assert r["ip"] == v["data"].get("ip")
        assert (iso(r["sent_at"].astimezone(UTC)) if r["sent_at"] else None) == v["data"].get("sent_at")
        # The verbatim example may also have come from another test's produce (same id, same
        # row): only the run's own events must sit at this run's offsets.
        assert (r["_partition"], r["_offset"]) in set(where) or r["team_id"] == "team_abc123"
    std = next(r for r in rows if r["id"] == "evt_01HQ4Y8L9N3O5Q6R7S8T9U0V1X")
    assert (std["team_id"], std["event"], std["distinct_id"], std["ip"], std["session_id"]) == (
        "team_abc123", "$pageview", "user_456", "203.0.113.42", "sess_abc123")
    assert iso(std["sent_at"].astimezone(UTC)) == "2025-01-15T10:30:59.800Z"
    assert json.loads(std["properties"])["$current_url"] == "https://hanzo.ai/dashboard"
    hours = chdb_query(db, f"SELECT toHour(timestamp) AS h, count() AS n FROM events FINAL "
                           f"WHERE {mine} GROUP BY h ORDER BY h")
    assert [h["h"] for h in hours] == [9, 10]

    bad_where = dict(zip(where[len(valid) + len(retried):], bad, strict=True))
    letters = dead_letters(cluster, "analytics-ingest", "events_plugin_ingestion", set(where))
    got = {(int(headers(m)[dl.H_SOURCE_PARTITION]), int(headers(m)[dl.H_SOURCE_OFFSET])): m
           for m in letters}
    assert len(letters) == len(got) == len(bad)  # exactly the invalid ones, once each
    assert set(got) == set(bad_where)
    for pos, m in got.items():
        key, value, error_class = bad_where[pos]
        h = headers(m)
        assert m.key() == b"events_plugin_ingestion"
        expected = value if value is None or isinstance(value, bytes) else json.dumps(value).encode()
        assert m.value() == expected  # the original bytes, untouched
        assert h[dl.H_ERROR_CLASS].decode() == error_class, h[dl.H_ERROR_MESSAGE]
        assert h[dl.H_ERROR_MESSAGE] and h[dl.H_ORIGINAL_KEY] == key.encode()
        assert h[dl.H_SCHEMA] == b"insights.event.captured"
        datetime.strptime(h[dl.H_FAILED_AT].decode(), "%Y-%m-%dT%H:%M:%S.%fZ")
    for codec in CODECS:
        ids = {r["id"] for r in chdb_query(db, f"SELECT id FROM events FINAL WHERE team_id LIKE "
                                               f"'{codec_run}{codec[:2]}-%'")}
        assert ids == {e["id"] for e in in_codec[codec]}, codec
    assert kcat_ids(cluster, tmp_path, codec_run) == {e["id"] for c in CODECS for e in in_codec[c]}
    assert_poison_dead_lettered(cluster, "analytics-ingest", poisoned)
    assert_caught_up(cluster, "analytics-ingest", "events_plugin_ingestion")


def test_analytics_ingest_survives_a_crash_without_duplicates(cluster, tmp_path):
    """Killed mid-run, run again: every event once. While it inserts, its driver answers SQL
    (issue 52, item 6): count() read through the endpoint rises between batches, an INSERT is
    refused and leaves nothing, clickhouse-connect reads it too, and once the driver is killed
    `local sql` finds no endpoint."""
    run = uuid.uuid4().hex[:8]
    t0 = datetime(2031, 2, 1, 10, tzinfo=UTC)
    events = [insights(run, i, t0 + timedelta(milliseconds=i)) for i in range(12_000)]  # 6 batches
    produce(cluster, "insights-capture", "events_plugin_ingestion",
            [(e["team_id"], e) for e in events])
    consumers = fast_specs(tmp_path, "analytics-ingest", max_offsets_per_trigger=2000, trigger="0s")
    env = job_env(cluster, "analytics-ingest", tmp_path)
    teams = ", ".join(f"'{run}-team{i}'" for i in range(3))
    mine = f"SELECT count() FROM events WHERE team_id IN ({teams})"
    process.start("analytics-ingest", tmp_path, env, registry=ROOT / "topics.yaml",
                  consumers=consumers, cwd=ROOT)
    commits = tmp_path / "jobs" / "analytics-ingest" / "checkpoint" / "ingest" / "commits"
    counts: list[int] = []  # count() of the run's events, read through the driver as it inserts
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while time.monotonic() < deadline:  # wait for a few finished batches, then crash
            if commits.exists() and len([f for f in commits.iterdir() if f.name.isdigit()]) >= 3:
                break
            assert process.status("analytics-ingest", tmp_path)["running"], \
                Path(process.log_file("analytics-ingest", tmp_path)).read_text()[-4000:]
            if url := platform.sql_url(tmp_path):
                if not counts:  # the first answer: the other clients, before the batches
                    assert_sql_endpoint_refuses_writes_and_serves_clickhouse_connect(url, run)
                counts.append(int(chdb_http.ask(url, mine)))
            time.sleep(0.2)
    finally:
        assert process.kill("analytics-ingest", tmp_path)
    committed, ends = offsets_of(cluster, "analytics-ingest", "events_plugin_ingestion")
    assert sum(committed.values()) < sum(ends.values()), "killed after it had caught up"
    rises = [b for a, b in zip(counts, counts[1:], strict=False) if b > a]
    print(f"\nanalytics-ingest: count() through its SQL endpoint, {len(counts)} reads while it "
          f"inserted: {sorted(set(counts))}")
    assert counts == sorted(counts) and rises, counts  # read twice or more, seen rising
    assert platform.sql_url(tmp_path) is None  # killed: its record names a dead pid

    run_once(cluster, "analytics-ingest", "analytics-ingest", tmp_path, consumers)

    (row,) = chdb_query(tmp_path / "jobs" / "analytics-ingest" / "chdb",
                        f"SELECT count() AS n, uniqExact(id) AS ids, countIf(id = '{run}-intruder') "
                        f"AS intruders FROM events WHERE team_id IN ({teams})")
    # No FINAL: the replayed batch's insert was dropped by its deduplication token.
    assert row == {"n": len(events), "ids": len(events), "intruders": 0}
    assert_caught_up(cluster, "analytics-ingest", "events_plugin_ingestion")


def assert_sql_endpoint_refuses_writes_and_serves_clickhouse_connect(url: str, run: str) -> None:
    """The driver's endpoint as ClickHouse's clients meet it: /ping, an INSERT refused by the
    read-only session with ClickHouse's error over HTTP 500, clickhouse-connect's queries."""
    import urllib.error
    import urllib.request

    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import DatabaseError

    with urllib.request.urlopen(f"{url}/ping", timeout=10) as r:
        assert r.read() == b"Ok.\n"
    insert = f"INSERT INTO events (id, team_id) VALUES ('{run}-intruder', '{run}-team0')"
    req = urllib.request.Request(f"{url}/", data=insert.encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=30)
    with refused.value as e:
        assert e.code == 500 and e.read().startswith(b"Code: 164. DB::Exception:")
    host, port = url.removeprefix("http://").split(":")
    client = clickhouse_connect.get_client(host=host, port=int(port))
    try:
        assert client.query(f"SELECT count() FROM events WHERE id = '{run}-intruder'"
                            ).result_rows == [(0,)]
        with pytest.raises(DatabaseError, match="164"):
            client.command(insert)
    finally:
        client.close()


def test_billing_agg_bills_exact_hours_once_and_dead_letters_late_and_invalid(cluster, tmp_path):
    """Exact hours once, the late and invalid events dead-lettered; the first run's events
    behind two records too large for dead_letter."""
    run = uuid.uuid4().hex[:8]
    poisoned = produce_poison(cluster, "billing-agg")
    day = datetime(2032, 3, 4, tzinfo=UTC)

    def at(h, m, s=0, ms=0):
        return day + timedelta(hours=h, minutes=m, seconds=s, milliseconds=ms)

    # Phase 1: one batch (nothing can be late in a query's first batch).
    p1 = [usage(run, "a", "x", at(10, 5), 1), usage(run, "a", "x", at(10, 59, 59, 999), 2),
          usage(run, "b", "x", at(10, 0), 3), usage(run, "b", "x", at(10, 30), 4),
          usage(run, "a", "x", at(11, 0), 5), usage(run, "c", "y", at(11, 10), 6),
          usage(run, "c", "y", at(11, 50), 7), usage(run, "a", "x", at(12, 29), 8),
          usage(run, "a", "x", at(12, 30), 9)]  # newest: watermark becomes 12:20
    retried1 = [p1[0], p1[4]]  # same envelope twice in one batch: billed once
    bad = [
        ("k", {**usage(run, "a", "x", at(10, 1), 1), "data": {**p1[0]["data"], "cost_usd": "0.0038"}},
         "schema.type"),
        ("k", {**usage(run, "a", "x", at(10, 1), 1), "data": {**p1[0]["data"], "cost_micros": 3800}},
         "schema.unknown_field"),
        ("k", {**usage(run, "a", "x", at(10, 1), 1), "data": {**p1[0]["data"], "prompt_tokens": -1}},
         "schema.value"),
        ("k", {k: v for k, v in usage(run, "a", "x", at(10, 2), 1).items() if k != "org_id"},
         "schema.required"),
        ("k", {**usage(run, "a", "x", at(10, 3), 1), "type": "insights.event.captured"}, "schema.required"),
        ("k", b'{"schema": "hanzo.stream.v1", "id": ', "json.malformed"),
    ]
    for _, value, cls in bad:  # the client library gives the same verdict on the same bytes
        assert client_says("llm_usage", value) == cls, (value, cls)
    # The standard's own example in its own hour (2025-01-15 10:00), billed by the second run.
    p1.append(standard("llm.usage.completed") | {"id": f"evt_{run}", "team_id": f"{run}-std",
                                                 "org_id": f"{run}-org_hanzo"})
    hours: dict[tuple, list[dict]] = defaultdict(list)
    for e in p1:
        hours[(e["team_id"], e["timestamp"][:13])].append(e)
    assert any(sum(e["data"]["cost_usd"] for e in es) != float(sum(map(cost, es)))
               for es in hours.values()), "the data must tell a float sum from the exact one"
    records1 = [(e["team_id"], e) for e in p1 + retried1] + [(k, v) for k, v, _ in bad]
    where1 = produce(cluster, "llm-gateway", "llm_usage", records1)
    run_once(cluster, "billing-agg", "billing-aggregator", tmp_path)

    source = "hanzo-stream/billing-agg"
    got1 = billing_events(cluster, run)
    want1 = expected_billing(p1, at(12, 20), source)
    assert len(want1) == 5  # 10:00 a, b; 11:00 a, c; the standard's 2025 hour
    assert {e["data"]["billing_id"]: e for e in got1} == want1
    assert len(got1) == len(want1)

    # Phase 2: late rows (at or before 12:20), on-time rows, retries, a new hour.
    late = [usage(run, "a", "x", at(10, 40), 10), usage(run, "c", "y", at(12, 15), 11),
            usage(run, "b", "x", at(12, 20), 12)]
    on_time = [usage(run, "a", "x", at(12, 20, 0, 1), 13), usage(run, "b", "x", at(12, 45), 14),
               usage(run, "c", "y", at(13, 45), 15)]  # newest: watermark becomes 13:35
    retried2 = [p1[7], p1[0]]  # 12:29 is still deduplicated in state; 10:05 is now late
    records2 = [(e["team_id"], e) for e in late + on_time + retried2]
    where2 = produce(cluster, "llm-gateway", "llm_usage", records2)
    run_once(cluster, "billing-agg", "billing-aggregator", tmp_path)

    got = billing_events(cluster, run)
    want = expected_billing(p1 + on_time, at(13, 35), source)
    assert len(want) == 7  # + 12:00 a, b; 13:00 c still open
    assert {e["data"]["billing_id"]: e for e in got} == want
    assert len(got) == len(want), "a window was billed twice"

    late_pos = [where2[i] for i in range(len(late))] + [where2[-1]]  # + the late retry of 10:05
    assert_rejected(cluster, "billing-agg", "llm_usage", where1 + where2,
                    where1[len(p1) + len(retried1):], bad,
                    late_pos, "2032-03-04T12:20:00.000Z", "llm.usage.completed")
    assert_poison_dead_lettered(cluster, "billing-agg", poisoned)
    assert_caught_up(cluster, "billing-agg", "llm_usage")


def test_audit_archive_writes_exactly_the_audit_events_to_parquet(cluster, tmp_path, registry, store):
    """The spec as it ships: Parquet and checkpoints through s3a on a real S3 server; events
    compressed with every codec among them."""
    run, codec_run = uuid.uuid4().hex[:8], uuid.uuid4().hex[:8]
    in_codec = {c: audit_events(registry, f"{codec_run}{c[:2]}", 30, datetime(2041, 1, 1, tzinfo=UTC),
                                timedelta(seconds=1)) for c in CODECS}
    send_in_every_codec(cluster, registry, "iam-service", in_codec)
    events = audit_events(registry, run, 40, datetime(2033, 5, 6, 23, 59, 58, tzinfo=UTC),
                          timedelta(milliseconds=100))
    events.append(standard("iam.auth.login_success") | {"org_id": f"{run}-org0", "id": f"evt_{run}"})
    bad = [
        ("k", {**events[0], "id": uuid7(), "data": {**events[0]["data"], "email": "nobody"}},
         "schema.value"),
        ("k", {**events[0], "id": uuid7(), "data": {**events[0]["data"], "actor_id": "u"}},
         "schema.unknown_field"),
        ("k", {**events[0], "id": uuid7(), "type": "iam.auth.unknown"}, "event.unknown_type"),
        ("k", {k: v for k, v in {**events[1], "id": uuid7()}.items() if k != "org_id"}, "key.missing"),
        ("k", b"\x00\x01 not json", "json.malformed"),
    ]
    for _, value, cls in bad:  # the client library gives the same verdict on the same bytes
        assert client_says("audit_log", value) == cls, (value, cls)
    # at least once: three events arrive twice (an application's resend: same id and bytes)
    resent = [(e["org_id"], e) for e in events[5:8]]
    where = produce(cluster, "iam-service", "audit_log",
                    [(e["org_id"], e) for e in events] + [(k, v) for k, v, _ in bad] + resent)
    run_once(cluster, "audit-archive", "audit-archiver", tmp_path, store=store)
    report = json.loads((tmp_path / "jobs" / "audit-archive" / "report.json").read_text())
    (archive_query,) = [q for q in report["duplicates_dropped"] if "dead-letter" not in q]
    assert report["duplicates_dropped"][archive_query] >= len(resent)  # the session shares the topic

    path = "s3a://hanzo-audit/audit_log"
    table = read_committed(path, store).to_pylist()
    mine = [r for r in table if r["org_id"].startswith(run)]
    assert len(mine) == len(events)  # each once, the resent ones included
    by_id = {e["id"]: e for e in events}
    assert {r["id"] for r in mine} == set(by_id)
    for r in mine:
        e = by_id[r["id"]]
        for f in ("user_id", "email", "method", "provider", "ip", "user_agent", "application", "reason"):
            assert r[f] == e["data"].get(f), f
        assert (r["type"], r["org_id"]) == (e["type"], e["org_id"])
        assert json.loads(r["raw"]) == e
        assert iso(r["timestamp"]) == e["timestamp"]
        assert r["date"] == e["timestamp"][:10]  # partitioned by the event's UTC date
    assert {r["date"] for r in mine} == {"2033-05-06", "2033-05-07", "2025-01-15"}
    # A clean run leaves no uncommitted objects: the bucket listing and the sink log agree.
    assert set(listed_files(path, store)) == set(committed_files(path, store))
    assert s3.list_keys(store.client(), "hanzo-stream", "checkpoints/audit-archive/archive/commits/")

    letters = dead_letters(cluster, "audit-archive", "audit_log", set(where))
    got = {(int(headers(m)[dl.H_SOURCE_PARTITION]), int(headers(m)[dl.H_SOURCE_OFFSET])):
           headers(m)[dl.H_ERROR_CLASS].decode() for m in letters}
    assert len(letters) == len(bad)
    assert got == {pos: cls for pos, (_, _, cls) in
                   zip(where[len(events):len(events) + len(bad)], bad, strict=True)}
    archived = [r["id"] for r in table if r["org_id"].startswith(codec_run)]
    assert sorted(archived) == sorted(e["id"] for c in CODECS for e in in_codec[c])  # each once
    assert_caught_up(cluster, "audit-archive", "audit_log")


@pytest.mark.timeout(2 * JOB_TIMEOUT)  # two Spark runs, each bounded by JOB_TIMEOUT
def test_audit_archive_survives_a_crash_exactly_once_on_s3(cluster, tmp_path, registry, store):
    """SIGKILL audit-archive mid-run (archive and checkpoint on S3), restart: every event is in
    the committed archive exactly once. Objects of the killed batch may stay in the bucket,
    named by no sink-log entry: a listing reader would count them, the log reader does not."""
    run = uuid.uuid4().hex[:8]
    events = audit_events(registry, run, 1200, datetime(2034, 3, 4, 23, tzinfo=UTC),
                          timedelta(seconds=5))  # 23:00 -> 00:40: two dates
    # The new checkpoint reads audit_log from its start: the batches of earlier tests'
    # records come first, then this run's 4: killed after its second.
    batch = 300
    kill_after = sum(end_offsets(cluster, "audit_log").values()) // batch + 2
    produce(cluster, "iam-service", "audit_log", [(e["org_id"], e) for e in events])
    consumers, path = archive_on_s3(tmp_path, f"crash-{run}", max_offsets_per_trigger=batch,
                                    trigger="0s")
    env = job_env(cluster, "audit-archiver", tmp_path, store)
    process.start("audit-archive", tmp_path, env, registry=ROOT / "topics.yaml",
                  consumers=consumers, cwd=ROOT)
    client = store.client()
    commits = f"checkpoints/crash-{run}/archive/commits/"
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while time.monotonic() < deadline:  # a few batches archived, then crash
            if len([k for k in s3.list_keys(client, "hanzo-stream", commits)
                    if k.rsplit("/", 1)[-1].isdigit()]) >= kill_after:
                break
            assert process.status("audit-archive", tmp_path)["running"], \
                Path(process.log_file("audit-archive", tmp_path)).read_text()[-4000:]
            time.sleep(0.5)
    finally:
        assert process.kill("audit-archive", tmp_path)
    # Spark's scratch (copied jars) is where start() puts it, where the next start() empties it.
    assert list(process.scratch_dir("audit-archive", tmp_path).glob("spark-*/userFiles-*"))

    def mine(rows: list[dict]) -> list[str]:
        return [r["id"] for r in rows if r["org_id"].startswith(run)]

    before = mine(read_committed(path, store).to_pylist())
    assert 0 < len(before) < len(events), "killed before its first batch or after the last"

    run_once(cluster, "audit-archive", "audit-archiver", tmp_path, consumers, store)

    ids = mine(read_committed(path, store).to_pylist())
    assert len(ids) == len(events) and set(ids) == {e["id"] for e in events}  # once, all
    orphans = set(listed_files(path, store)) - set(committed_files(path, store))
    listed_rows = sum(pq.read_table(io.BytesIO(client.get_object(  # this run's orgs, every object
        Bucket="hanzo-audit", Key=s3.split(f)[1])["Body"].read())).num_rows
        for f in listed_files(path, store) if f"/org_id={run}-" in f)
    print(f"\naudit-archive crash on S3: {len(before)} of {len(events)} archived before SIGKILL, "
          f"{len(ids)} committed after the restart ({len(set(ids))} distinct); "
          f"{len(orphans)} uncommitted object(s) left by the killed batch, a listing reader "
          f"would see {listed_rows} rows")
    assert listed_rows >= len(events)
    assert_caught_up(cluster, "audit-archive", "audit_log")


def test_rpc_billing_settles_exact_hours_once_and_dead_letters_late_and_invalid(cluster, tmp_path):
    """The same proof as billing-agg's, for the same engine under rpc-billing's spec."""
    run = uuid.uuid4().hex[:8]
    day = datetime(2036, 4, 5, tzinfo=UTC)

    def at(h, m, s=0, ms=0):
        return day + timedelta(hours=h, minutes=m, seconds=s, milliseconds=ms)

    # Phase 1: one batch. Agent a is across three hours, b has no team or org (optional here).
    p1 = [rpc_call(run, "a", at(10, 5), 1, team_id=f"{run}-t", org_id=f"{run}-o"),
          rpc_call(run, "a", at(10, 59, 59, 999), 2), rpc_call(run, "b", at(10, 0), 3),
          rpc_call(run, "b", at(10, 30), 4), rpc_call(run, "a", at(11, 0), 5),
          rpc_call(run, "c", at(11, 10), 6), rpc_call(run, "c", at(11, 50), 7),
          rpc_call(run, "a", at(12, 29), 8), rpc_call(run, "a", at(12, 30), 9)]  # watermark 12:20
    retried1 = [p1[0], p1[4]]
    good = p1[1]
    bad = [
        ("k", {**good, "id": uuid7(), "data": {**good["data"], "cost_usd": "0.0005"}}, "schema.type"),
        ("k", {**good, "id": uuid7(), "data": {**good["data"], "duration_ms": 1.5}}, "schema.type"),
        ("k", {**good, "id": uuid7(), "data": {**good["data"], "units": -1}}, "schema.value"),
        ("k", {**good, "id": uuid7(), "data": {k: v for k, v in good["data"].items() if k != "agent_id"}},
         "key.missing"),
        ("k", {**good, "id": uuid7(), "data": {**good["data"], "tokens": 5}}, "schema.unknown_field"),
        ("k", standard("llm.usage.completed"), "topic.mismatch"),
        ("k", b'{"schema": "hanzo.stream.v1", "id": ', "json.malformed"),
    ]
    for _, value, cls in bad:  # the client library gives the same verdict on the same bytes
        assert client_says("agent_rpc_metering", value) == cls, (value, cls)
    hours: dict[tuple, list[dict]] = defaultdict(list)
    for e in p1:
        hours[(e["data"]["agent_id"], e["timestamp"][:13])].append(e)
    assert any(sum(e["data"]["cost_usd"] for e in es) != float(sum(map(cost, es)))
               for es in hours.values()), "the data must tell a float sum from the exact one"
    key = lambda e: e["data"]["agent_id"]  # noqa: E731 - the topic's key
    records1 = [(key(e), e) for e in p1 + retried1] + [(k, v) for k, v, _ in bad]
    where1 = produce(cluster, "agent-gateway", "agent_rpc_metering", records1)
    run_once(cluster, "rpc-billing", "rpc-billing", tmp_path)

    want1 = expected_settlements(p1, at(12, 20))
    assert len(want1) == 4  # 10:00 a, b; 11:00 a, c
    got1 = settlements(cluster, run)
    assert {e["data"]["settlement_id"]: e for e in got1} == want1
    assert len(got1) == len(want1)

    # Phase 2: late rows (at or before 12:20), on-time rows, retries, a new hour.
    late = [rpc_call(run, "a", at(10, 40), 10), rpc_call(run, "c", at(12, 15), 11),
            rpc_call(run, "b", at(12, 20), 12)]
    on_time = [rpc_call(run, "a", at(12, 20, 0, 1), 13), rpc_call(run, "b", at(12, 45), 14),
               rpc_call(run, "c", at(13, 45), 15)]  # newest: watermark becomes 13:35
    retried2 = [p1[7], p1[0]]  # 12:29 is still deduplicated in state; 10:05 is now late
    where2 = produce(cluster, "agent-gateway", "agent_rpc_metering",
                     [(key(e), e) for e in late + on_time + retried2])
    run_once(cluster, "rpc-billing", "rpc-billing", tmp_path)

    want = expected_settlements(p1 + on_time, at(13, 35))
    assert len(want) == 6  # + 12:00 a, b; 13:00 c still open
    got = settlements(cluster, run)
    assert {e["data"]["settlement_id"]: e for e in got} == want
    assert len(got) == len(want), "an hour was settled twice"

    late_pos = [where2[i] for i in range(len(late))] + [where2[-1]]  # + the late retry of 10:05
    assert_rejected(cluster, "rpc-billing", "agent_rpc_metering", where1 + where2,
                    where1[len(p1) + len(retried1):], bad,
                    late_pos, "2036-04-05T12:20:00.000Z", "agent.rpc.metered")
    assert_caught_up(cluster, "rpc-billing", "agent_rpc_metering")


@pytest.mark.parametrize("job", sorted(CRASH_JOBS))
def test_settlement_jobs_survive_a_crash_with_exact_totals(cluster, tmp_path, job, postgres_server):
    """Kill the job between its Kafka write and its PostgreSQL write; after the restart every
    closed hour is settled exactly, in both.

    The test holds a lock on the job's table, so the first batch with closed hours flushes
    its records to Kafka and then waits on the lock inside its PostgreSQL transaction: that
    is where it is killed. (A new checkpoint reads the topic from its start, so in a full
    session that batch may close earlier tests' hours rather than this run's: what is
    asserted is that it reached Kafka and not PostgreSQL, whoever's hours.) One partition
    key (one team, one agent), so all events share a partition and arrive in event-time
    order: none can be late whatever the batch
    boundaries, and the ground truth does not depend on them. billing-agg: 09:00, 10:00,
    11:00 for two orgs; rpc-billing: the same three hours for one agent; 12:00 still open.
    """
    import psycopg

    from hanzo_stream.jobs.postgres import DSN_ENV

    principal, topic, producer, make, key, truth, fetch, id_field, windows = CRASH_JOBS[job]
    table = postgres_table(job)
    run = uuid.uuid4().hex[:8]
    t0 = datetime(2038, 7, 8, 9, 0, tzinfo=UTC)
    events = [make(run, i, t0 + timedelta(seconds=5 * i)) for i in range(2400)]  # 09:00 -> 12:20
    records = []
    for i, e in enumerate(events):
        records.append((key(e), e))
        if i % 37 == 0:
            records.append((key(e), e))  # a producer retry, right behind the original
    produce(cluster, producer, topic, records)
    consumers = fast_specs(tmp_path, job, max_offsets_per_trigger=600, trigger="0s")  # 5 batches
    pg = {DSN_ENV: postgres_server.dsn}
    # The job's own upsert, waiting on the lock (not, say, an autovacuum worker waiting too).
    waiting = ("SELECT backend_type, left(query, 80) FROM pg_stat_activity WHERE pid IN "
               "(SELECT pid FROM pg_locks WHERE relation = to_regclass(%s) AND NOT granted)")
    upsert = f"INSERT INTO {table} "
    waiters: list = []
    out_topic = {"billing-agg": "billing_events", "rpc-billing": "agent_rpc_settlements"}[job]
    out_before = sum(end_offsets(cluster, out_topic).values())
    with psycopg.connect(postgres_server.dsn) as lock, psycopg.connect(postgres_server.dsn,
                                                                        autocommit=True) as look:
        rows_before = look.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        lock.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")  # reads pass, writes wait
        process.start(job, tmp_path, job_env(cluster, principal, tmp_path) | pg,
                      registry=ROOT / "topics.yaml", consumers=consumers, cwd=ROOT)
        try:
            deadline = time.monotonic() + JOB_TIMEOUT
            while time.monotonic() < deadline:
                waiters = look.execute(waiting, (table,)).fetchall()
                if any(q.startswith(upsert) for _, q in waiters):
                    break
                assert process.status(job, tmp_path)["running"], \
                    Path(process.log_file(job, tmp_path)).read_text()[-4000:]
                time.sleep(0.2)
            else:
                pytest.fail(f"{job} never wrote to {table}")
        finally:
            assert process.kill(job, tmp_path)
        lock.rollback()
        rows_after = look.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    assert sum(end_offsets(cluster, out_topic).values()) > out_before, \
        f"the blocked batch's records were not in Kafka before its PostgreSQL write: {waiters}"
    assert rows_after == rows_before  # the killed transaction left nothing
    sent = fetch(cluster, run)  # this run's part of the killed batch (none if it closed older hours)
    committed, ends = offsets_of(cluster, job, topic)
    assert sum(committed.values()) < sum(ends.values()), "killed after it had caught up"

    run_once(cluster, job, principal, tmp_path, consumers, extra_env=pg)

    newest = t0 + timedelta(seconds=5 * (len(events) - 1))
    want = truth(events, newest - timedelta(minutes=10))
    assert len(want) == windows
    got = fetch(cluster, run)
    copies: dict[str, list[dict]] = defaultdict(list)
    for e in got:
        copies[e["data"][id_field]].append(e)
    assert all(c == [c[0]] * len(c) for c in copies.values()), "a re-sent window changed"
    assert {b: c[0] for b, c in copies.items()} == want
    assert len(got) == len(want) + len(sent)  # the killed batch was sent again, and only it
    assert postgres_rows(postgres_server.dsn, table, id_field, run) == {
        b: {"id": e["id"], "data": e["data"]} for b, e in want.items()}
    late = [m for m in read_all(cluster, dl.TOPIC)
            if headers(m).get(dl.H_ERROR_CLASS) == b"event.late" and run.encode() in m.value()]
    assert late == []
    assert_caught_up(cluster, job, topic)
