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
first) < 2032 < 2038 (crash) < 2039 (poison); agent_rpc_metering: 2036 < 2038 (crash).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition

from hanzo_stream import dead_letter as dl
from hanzo_stream.jobs import process, s3
from hanzo_stream.jobs.archive import committed_files, listed_files, read_committed
from hanzo_stream.jobs.billing_ids import billing_id, event_id, settlement_id
from hanzo_stream.reconcile.secrets import env_name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JOB_TIMEOUT = 600  # a --once run on a loaded 2-core CI machine; bounded


# ---------------------------------------------------------------- helpers

def uuid7(ms: int | None = None) -> str:
    ms = int(time.time() * 1000) if ms is None else ms
    r = uuid.uuid4().int
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | ((r >> 64) & 0xFFF) << 64 | (0b10 << 62)
                         | (r & ((1 << 62) - 1))))


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@cache
def _router():
    from hanzo_stream.client.router import Router
    from hanzo_stream.client.validator import Validator
    from hanzo_stream.registry import load_registry
    from hanzo_stream.schemas.store import load

    return Router(load_registry(ROOT / "topics.yaml"), Validator(load(ROOT / "schemas")))


def client_says(topic: str, value) -> str | None:
    """The client library's verdict on the same bytes: the class a job must also give."""
    raw = value if value is None or isinstance(value, bytes) else json.dumps(value).encode()
    out = _router().route_bytes(raw, topic=topic)
    return out.error.error_class if hasattr(out, "error") else None


def standard(event_type: str) -> dict:
    """The Event Streaming Standard's own example, verbatim (schemas/examples/.../standard.json)."""
    return json.loads((ROOT / "schemas" / "examples" / event_type / "valid" / "standard.json").read_text())


def envelope(type_: str, ts: str, data: dict, **extra) -> dict:
    return {"schema": "hanzo.stream.v1", "id": uuid7(), "type": type_, "source": "tests",
            "timestamp": ts, **extra, "data": data}


def produce(cluster, principal: str, topic: str, records: list[tuple],
            config: dict | None = None) -> list[tuple[int, int]]:
    """Produce (key, value) pairs in order; returns each record's (partition, offset)."""
    p = Producer(cluster.as_(principal).confluent() | {"enable.idempotence": True, "linger.ms": 5}
                 | (config or {}))
    where: list[tuple[int, int] | None] = [None] * len(records)

    def cb(i):
        def done(err, msg):
            assert err is None, err
            where[i] = (msg.partition(), msg.offset())
        return done

    for i, (key, value) in enumerate(records):
        raw = value if value is None or isinstance(value, bytes) else json.dumps(value).encode()
        p.produce(topic, key=key.encode() if isinstance(key, str) else key, value=raw,
                  on_delivery=cb(i))
        p.poll(0)
    assert p.flush(30) == 0
    assert all(w is not None for w in where)
    return where  # type: ignore[return-value]


def read_all(cluster, topic: str) -> list:
    """Every record of a topic, as the admin, from the beginning to the current end, once
    each in (partition, offset) order. All partitions are read by one assignment and each
    record is kept by its position: a record fetched twice is never counted twice."""
    c = Consumer(cluster.admin.confluent() | {"group.id": f"test-reader-{uuid.uuid4()}",
                                              "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        bounds = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in parts}
        ends = {p: hi for p, (lo, hi) in bounds.items() if hi > lo}
        c.assign([TopicPartition(topic, p, bounds[p][0]) for p in ends])
        seen: dict[tuple[int, int], object] = {}
        todo = set(ends)
        deadline = time.monotonic() + 60
        while todo and time.monotonic() < deadline:
            for m in c.consume(500, 1.0):
                if m.error() or m.partition() not in ends or m.offset() >= ends[m.partition()]:
                    continue
                seen[(m.partition(), m.offset())] = m
                if m.offset() == ends[m.partition()] - 1:
                    todo.discard(m.partition())
        return [seen[k] for k in sorted(seen)]
    finally:
        c.close()


def headers(msg) -> dict[str, bytes]:
    return dict(msg.headers() or [])


def dead_letters(cluster, group: str, source_topic: str, offsets: set[tuple[int, int]]) -> list:
    """dead_letter records this job wrote about the given source records."""
    out = []
    for m in read_all(cluster, dl.TOPIC):
        h = headers(m)
        if h.get(dl.H_STAGE) != f"job:{group}".encode() or h.get(dl.H_SOURCE_TOPIC) != source_topic.encode():
            continue
        if (int(h[dl.H_SOURCE_PARTITION]), int(h[dl.H_SOURCE_OFFSET])) in offsets:
            out.append(m)
    return out


def offsets_of(cluster, group: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """(committed offsets of the group, end offsets of the topic)."""
    admin = cluster.admin_client()
    c = Consumer(cluster.admin.confluent() | {"group.id": f"test-offsets-{uuid.uuid4()}"})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        c.close()
    # bounded: a broker that died must fail the test, not hang it
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in parts])
    res = admin.list_consumer_group_offsets([req])[group].result(timeout=60)
    return {tp.partition: tp.offset for tp in res.topic_partitions}, ends


def job_env(cluster, principal: str, home: Path, store: s3.S3Access | None = None) -> dict[str, str]:
    """The job's environment as a pod gets it: the cluster, its own password, and for a job on
    S3 the store's endpoint and keys (AWS_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HANZO_STREAM_", "AWS_"))}
    if store is not None:
        env |= {s3.ENDPOINT_ENV: str(store.endpoint), **store.environ()}
    env.update({
        "HANZO_STREAM_BOOTSTRAP": cluster.bootstrap, "HANZO_STREAM_SECURITY_PROTOCOL": "SASL_SSL",
        "HANZO_STREAM_SASL_MECHANISM": "SCRAM-SHA-512", "HANZO_STREAM_CA_FILE": cluster.ca_file,
        env_name(principal): cluster.creds.password(principal),  # only the job's own password
        "HANZO_STREAM_HOME": str(home),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    })
    return env


def run_once(cluster, name: str, principal: str, home: Path, consumers: Path = ROOT / "consumers",
             store: s3.S3Access | None = None):
    """`hanzo-stream jobs run NAME --once` as a subprocess; returns its output."""
    proc = subprocess.run(
        [sys.executable, "-m", "hanzo_stream.jobs.cli", "run", name, "--once",
         "--registry", str(ROOT / "topics.yaml"), "--consumers", str(consumers)],
        env=job_env(cluster, principal, home, store), cwd=ROOT, capture_output=True, text=True,
        timeout=JOB_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    warnings = [line for line in (proc.stdout + proc.stderr).splitlines()
                if "hanzo_stream.jobs" in line and ("WARNING" in line or "ERROR" in line)
                and "started as" not in line]
    assert not warnings, warnings  # e.g. a failed offset commit or a late-count mismatch
    if store is not None:
        assert store.secret_key not in proc.stdout + proc.stderr  # keys never reach a log
    return proc.stdout + proc.stderr


def assert_caught_up(cluster, group: str, topic: str) -> None:
    committed, ends = offsets_of(cluster, group, topic)
    assert committed == ends, f"{group}: committed {committed} != end offsets {ends}"


def chdb_query(path: Path, sql: str):
    from chdb import session

    s = session.Session(str(path))  # one chDB directory per process: open, read, close
    try:
        return s.query(sql, "ArrowTable").to_pylist()
    finally:
        s.close()


def fast_specs(tmp: Path, name: str, **overrides) -> Path:
    """A copy of consumers/<name>.yaml with overrides (small batches for the crash tests)."""
    import yaml

    doc = yaml.safe_load((ROOT / "consumers" / f"{name}.yaml").read_text())
    doc["job"] = str(ROOT / doc["job"])
    doc.update(overrides)
    d = tmp / "consumers"
    d.mkdir(exist_ok=True)
    (d / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return d


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Iterator[s3.S3Access]:
    """A real S3-compatible server (s3proxy, as `local up` runs it) with the jobs' buckets."""
    from hanzo_stream.local import credentials, object_store

    home = tmp_path_factory.mktemp("object-store")
    creds = credentials.load_or_create(home / "credentials.json", [])
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


# ---------------------------------------------------------------- analytics-ingest

def insights(run: str, i: int, ts: datetime, **data) -> dict:
    team = f"{run}-team{i % 3}"
    body = {"event": "$pageview" if i % 2 else "signup", "distinct_id": f"user-{i}",
            "properties": {"i": i, "plan": "pro", "nested": {"k": [1, 2]}}, **data}
    if i % 4 == 0:
        body |= {"session_id": f"s-{i}", "ip": "203.0.113.42" if i % 8 else "2001:db8::1",
                 "sent_at": iso(ts - timedelta(milliseconds=200))}
    return envelope("insights.event.captured", iso(ts), body, team_id=team)


def invalid_insights(run: str) -> list[tuple[str, bytes | dict | None, str]]:
    ts = iso(datetime(2031, 1, 1, 9, tzinfo=UTC))
    good = insights(run, 1, datetime(2031, 1, 1, 9, tzinfo=UTC))
    no_team = {k: v for k, v in good.items() if k != "team_id"}
    return [
        ("k", b"{not json", "json.malformed"),
        ("k", None, "json.malformed"),  # a tombstone
        ("k", b"[1, 2, 3]", "schema.type"),
        ("k", json.dumps(good).encode() + b" trailing", "json.malformed"),
        ("k", b'{"id": "\xff"}', "utf8.invalid"),
        ("k", no_team, "key.missing"),
        ("k", {**good, "id": uuid7(), "timestamp": "2031-01-01 09:00:00"}, "schema.value"),
        ("k", {**good, "id": uuid7(), "timestamp": "2031-02-30T09:00:00.000Z"}, "schema.value"),
        ("k", {**good, "id": "not an id"}, "schema.value"),
        ("k", {**good, "id": uuid7(), "schema": "hanzo.stream.v0"}, "schema.value"),
        ("k", {**good, "id": uuid7(), "type": "llm.usage.completed"}, "schema.required"),
        ("k", {**standard("llm.usage.completed"), "team_id": f"{run}-team0"}, "topic.mismatch"),
        ("k", {**good, "id": uuid7(), "data": {"distinct_id": "u"}}, "schema.required"),
        ("k", {**good, "id": uuid7(), "data": {"event": "e", "distinct_id": "u",
                                              "properties": "not an object"}}, "schema.type"),
        ("k", {**good, "id": uuid7(), "data": {"event": "e", "distinct_id": 7}}, "schema.type"),
        ("k", {**good, "id": uuid7(), "data": {**good["data"], "url": "https://hanzo.ai"}},
         "schema.unknown_field"),
        ("k", {**good, "id": uuid7(), "data": {**good["data"], "ip": "999.1.1.1"}}, "schema.value"),
        ("k", {**good, "id": uuid7(), "data": "not an object"}, "schema.type"),
        ("k", envelope("insights.event.captured", ts, {"event": "e", "distinct_id": "u"}), "key.missing"),
    ]


def test_analytics_ingest_loads_exactly_the_valid_events(cluster, tmp_path):
    run = uuid.uuid4().hex[:8]
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
    mine = f"(team_id IN ({teams}) OR id = 'evt_01HQ4Y8L9N3O5Q6R7S8T9U0V1X')"
    rows = chdb_query(db, f"SELECT * FROM events FINAL WHERE {mine} ORDER BY id")
    assert len(rows) == len(valid)
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
    assert_caught_up(cluster, "analytics-ingest", "events_plugin_ingestion")


def test_analytics_ingest_survives_a_crash_without_duplicates(cluster, tmp_path):
    run = uuid.uuid4().hex[:8]
    t0 = datetime(2031, 2, 1, 10, tzinfo=UTC)
    events = [insights(run, i, t0 + timedelta(milliseconds=i)) for i in range(30_000)]
    produce(cluster, "insights-capture", "events_plugin_ingestion",
            [(e["team_id"], e) for e in events])
    consumers = fast_specs(tmp_path, "analytics-ingest", max_offsets_per_trigger=2000, trigger="0s")
    env = job_env(cluster, "analytics-ingest", tmp_path)
    process.start("analytics-ingest", tmp_path, env, registry=ROOT / "topics.yaml",
                  consumers=consumers, cwd=ROOT)
    commits = tmp_path / "jobs" / "analytics-ingest" / "checkpoint" / "ingest" / "commits"
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while time.monotonic() < deadline:  # wait for a few finished batches, then crash
            if commits.exists() and len([f for f in commits.iterdir() if f.name.isdigit()]) >= 3:
                break
            assert process.status("analytics-ingest", tmp_path)["running"], \
                Path(process.log_file("analytics-ingest", tmp_path)).read_text()[-4000:]
            time.sleep(0.2)
    finally:
        assert process.kill("analytics-ingest", tmp_path)
    committed, ends = offsets_of(cluster, "analytics-ingest", "events_plugin_ingestion")
    assert sum(committed.values()) < sum(ends.values()), "killed after it had caught up"

    run_once(cluster, "analytics-ingest", "analytics-ingest", tmp_path, consumers)

    teams = ", ".join(f"'{run}-team{i}'" for i in range(3))
    (row,) = chdb_query(tmp_path / "jobs" / "analytics-ingest" / "chdb",
                        f"SELECT count() AS n, uniqExact(id) AS ids FROM events "
                        f"WHERE team_id IN ({teams})")
    # No FINAL: the replayed batch's insert was dropped by its deduplication token.
    assert row == {"n": len(events), "ids": len(events)}
    assert_caught_up(cluster, "analytics-ingest", "events_plugin_ingestion")


# ---------------------------------------------------------------- billing-agg

# Amounts whose binary-float sum differs from their decimal sum (0.1 + 0.2 != 0.3 in floats),
# one with a 7th decimal place (half a micro-dollar) and one in exponent form.
COSTS = [0.1, 0.2, 0.7, 0.0038, 1.0000005, 0.000392, 3.8e-05]


def usage(run: str, team: str, org: str, ts: datetime, n: int) -> dict:
    return envelope("llm.usage.completed", iso(ts), {
        "request_id": f"req-{uuid.uuid4().hex[:6]}", "model": "zen-1", "provider": "hanzo",
        "prompt_tokens": 100 + n, "completion_tokens": 10 * n, "total_tokens": 100 + 11 * n,
        "cost_usd": COSTS[n % len(COSTS)], "latency_ms": 50, "cache_hit": False, "stream": n % 2 == 0},
        team_id=f"{run}-{team}", org_id=f"{run}-{org}")


def cost(e: dict) -> Decimal:
    """What the producer meant: the decimal text it wrote, never the float it parses to."""
    return Decimal(json.dumps(e["data"]["cost_usd"]))


def expected_windows(events: list[dict], closed_before: datetime, source: str, *, out_type: str,
                     by: tuple[str, ...], sums: tuple[str, ...], id_field: str,
                     count: str) -> dict[str, dict]:
    """The ground truth, computed here independently: hourly sums per `by` values (envelope
    fields where the event has them, else data fields), windows closed before `closed_before`."""
    def value(e: dict, f: str) -> str:
        return e[f] if f in e else e["data"][f]

    sums_of: dict[tuple, Counter] = defaultdict(Counter)
    for e in events:
        t = datetime.strptime(e["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        start = t.replace(minute=0, second=0, microsecond=0)
        c = sums_of[(*(value(e, f) for f in by), start)]
        for k in sums:
            c[k] += e["data"][k]
        c["cost_usd"] += cost(e)
        c[count] += 1
    out = {}
    for (*keys, start), c in sums_of.items():
        usd = c.pop("cost_usd")
        n = c.pop(count)
        c |= {"cost_usd": usd, "cost_micros": int(usd.quantize(Decimal("0.000001"), ROUND_HALF_UP)
                                                   * 1_000_000), count: n}
        end = start + timedelta(hours=1)
        if end > closed_before:
            continue  # still open: not billed yet
        rid = hashlib.sha256("|".join([*keys, iso(start)]).encode()).hexdigest()
        named = dict(zip(by, keys, strict=True))
        out[rid] = {"schema": "hanzo.stream.v1", "id": event_id(rid, int(end.timestamp() * 1000)),
                    "type": out_type, "source": source, "timestamp": iso(end),
                    **{f: v for f, v in named.items() if f in ("team_id", "org_id")},
                    "data": {id_field: rid, **named, "window_start": iso(start),
                             "window_end": iso(end), **c}}
    return out


def expected_billing(events: list[dict], closed_before: datetime, source: str) -> dict[str, dict]:
    out = expected_windows(events, closed_before, source, out_type="billing.usage.hourly",
                           by=("team_id", "org_id"),
                           sums=("prompt_tokens", "completion_tokens", "total_tokens"),
                           id_field="billing_id", count="request_count")
    assert all(billing_id(d["team_id"], d["org_id"], d["window_start"]) == b  # the reference ids
               for b, d in ((b, e["data"]) for b, e in out.items()))
    return out


def billing_events(cluster, run: str) -> list[dict]:
    """This run's billing events; other tests share the topic (the ACL test writes `{}`)."""
    docs = [json.loads(m.value(), parse_float=Decimal) for m in read_all(cluster, "billing_events")]
    return [d for d in docs if str(d.get("team_id", "")).startswith(run)]


def assert_rejected(cluster, job: str, topic: str, produced: list, bad_pos: list, bad: list,
                    late_pos: list, watermark: str, schema: str) -> None:
    """Of all `produced` records, exactly the invalid ones (with their classes) and the late ones
    are dead-lettered, once each; a late one's message names the watermark it missed."""
    letters = dead_letters(cluster, job, topic, set(produced))
    by_pos = {(int(headers(m)[dl.H_SOURCE_PARTITION]), int(headers(m)[dl.H_SOURCE_OFFSET])): m
              for m in letters}
    assert len(by_pos) == len(letters)
    want = {pos: cls for pos, (_, _, cls) in zip(bad_pos, bad, strict=True)}
    want |= {pos: "event.late" for pos in late_pos}
    assert {p: headers(m)[dl.H_ERROR_CLASS].decode() for p, m in by_pos.items()} == want
    for pos in late_pos:
        assert f"watermark {watermark}".encode() in headers(by_pos[pos])[dl.H_ERROR_MESSAGE]
        assert headers(by_pos[pos])[dl.H_SCHEMA] == schema.encode()


def test_billing_agg_bills_exact_hours_once_and_dead_letters_late_and_invalid(cluster, tmp_path):
    run = uuid.uuid4().hex[:8]
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
    assert_caught_up(cluster, "billing-agg", "llm_usage")


# ---------------------------------------------------------------- audit-archive

def audit_events(registry, run: str, count: int, t0: datetime, step: timedelta) -> list[dict]:
    """`count` audit events of every type the registry routes to audit_log, two orgs."""
    types = registry.topic("audit_log").event_types
    events = []
    for i in range(count):
        data = {"user_id": f"user-{i}", "email": f"user{i}@hanzo.ai", "method": "oauth2",
                "provider": "github", "ip": "203.0.113.42", "application": "app-hanzo",
                "reason": "bad_password", "target": "role:admin"}
        if i % 5 == 0:
            data["user_agent"] = "Mozilla/5.0..."
        events.append(envelope(types[i % len(types)], iso(t0 + step * i), data,
                               org_id=f"{run}-org{i % 2}", team_id=f"{run}-team"))
    return events


def test_audit_archive_writes_exactly_the_audit_events_to_parquet(cluster, tmp_path, registry, store):
    """The spec as it ships: Parquet and checkpoints through s3a on a real S3 server."""
    run = uuid.uuid4().hex[:8]
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
    where = produce(cluster, "iam-service", "audit_log",
                    [(e["org_id"], e) for e in events] + [(k, v) for k, v, _ in bad])
    run_once(cluster, "audit-archive", "audit-archiver", tmp_path, store=store)

    path = "s3a://hanzo-audit/audit_log"
    table = read_committed(path, store).to_pylist()
    mine = [r for r in table if r["org_id"].startswith(run)]
    assert len(mine) == len(events)
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
    assert got == {pos: cls for pos, (_, _, cls) in zip(where[len(events):], bad, strict=True)}
    assert_caught_up(cluster, "audit-archive", "audit_log")


@pytest.mark.timeout(2 * JOB_TIMEOUT)  # two Spark runs, each bounded by JOB_TIMEOUT
def test_audit_archive_survives_a_crash_exactly_once_on_s3(cluster, tmp_path, registry, store):
    """SIGKILL audit-archive mid-run (archive and checkpoint on S3), restart: every event is in
    the committed archive exactly once. Objects of the killed batch may stay in the bucket,
    named by no sink-log entry: a listing reader would count them, the log reader does not."""
    run = uuid.uuid4().hex[:8]
    events = audit_events(registry, run, 1200, datetime(2034, 3, 4, 23, tzinfo=UTC),
                          timedelta(seconds=5))  # 23:00 -> 00:40: two dates
    produce(cluster, "iam-service", "audit_log", [(e["org_id"], e) for e in events])
    spec = yaml.safe_load((ROOT / "consumers" / "audit-archive.yaml").read_text())
    archive = {**spec["sinks"]["archive"], "path": f"s3a://hanzo-audit/crash-{run}"}
    consumers = fast_specs(tmp_path, "audit-archive", max_offsets_per_trigger=150, trigger="0s",
                           checkpoint=f"s3a://hanzo-stream/checkpoints/crash-{run}",
                           sinks={**spec["sinks"], "archive": archive})
    env = job_env(cluster, "audit-archiver", tmp_path, store)
    process.start("audit-archive", tmp_path, env, registry=ROOT / "topics.yaml",
                  consumers=consumers, cwd=ROOT)
    client = store.client()
    commits = f"checkpoints/crash-{run}/archive/commits/"
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while time.monotonic() < deadline:  # a few batches archived, then crash
            if len([k for k in s3.list_keys(client, "hanzo-stream", commits)
                    if k.rsplit("/", 1)[-1].isdigit()]) >= 3:
                break
            assert process.status("audit-archive", tmp_path)["running"], \
                Path(process.log_file("audit-archive", tmp_path)).read_text()[-4000:]
            time.sleep(0.5)
    finally:
        assert process.kill("audit-archive", tmp_path)
    path = archive["path"]

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


# ---------------------------------------------------------------- rpc-billing

RPC_SOURCE = "hanzo-stream/rpc-billing"
RPC_COSTS = [0.1, 0.2, 0.0005, 0.0000005, 2.5e-05, 1.0000005, 0.7]


def rpc_call(run: str, agent: str, ts: datetime, n: int, **envelope_fields) -> dict:
    return envelope("agent.rpc.metered", iso(ts), {
        "agent_id": f"{run}-{agent}", "method": ("tools.search", "tools.fetch", "memory.write")[n % 3],
        "duration_ms": 5 + 17 * n, "units": 1 + n % 9, "cost_usd": RPC_COSTS[n % len(RPC_COSTS)]},
        **envelope_fields)


def expected_settlements(events: list[dict], closed_before: datetime) -> dict[str, dict]:
    out = expected_windows(events, closed_before, RPC_SOURCE, out_type="agent.rpc.settled",
                           by=("agent_id",), sums=("units", "duration_ms"),
                           id_field="settlement_id", count="call_count")
    assert all(settlement_id(d["agent_id"], d["window_start"]) == s
               for s, d in ((s, e["data"]) for s, e in out.items()))
    return out


def settlements(cluster, run: str) -> list[dict]:
    """This run's settlement records, each checked against schemas/ by the client library."""
    msgs = [m for m in read_all(cluster, "agent_rpc_settlements")  # other tests' records too
            if json.loads(m.value()).get("data", {}).get("agent_id", "").startswith(run)]
    for m in msgs:
        assert client_says("agent_rpc_settlements", m.value()) is None, m.value()
        doc = json.loads(m.value())
        assert m.key() == doc["data"]["agent_id"].encode()  # the registry key of the topic
    return [json.loads(m.value(), parse_float=Decimal) for m in msgs]


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


# ---------------------------------------------------------------- crash and restart

CRASH_JOBS = {  # job -> (its principal, its topic, the producer, one event, its key, the truth)
    "billing-agg": ("billing-aggregator", "llm_usage", "llm-gateway",
                    lambda run, i, ts: usage(run, "solo", f"org{i % 2}", ts, i % 13),
                    lambda e: e["team_id"],
                    lambda evs, closed: expected_billing(evs, closed, "hanzo-stream/billing-agg"),
                    lambda cluster, run: billing_events(cluster, run), "billing_id", 6),
    "rpc-billing": ("rpc-billing", "agent_rpc_metering", "agent-gateway",
                    lambda run, i, ts: rpc_call(run, "solo", ts, i % 13),
                    lambda e: e["data"]["agent_id"], expected_settlements,
                    lambda cluster, run: settlements(cluster, run), "settlement_id", 3),
}


@pytest.mark.parametrize("job", sorted(CRASH_JOBS))
def test_settlement_jobs_survive_a_crash_with_exact_totals(cluster, tmp_path, job):
    """Kill the job mid-run; after the restart every closed hour is settled exactly.

    One partition key (one team, one agent), so all events share a partition and arrive in
    event-time order: none can be late whatever the batch boundaries, and the ground truth
    does not depend on them. billing-agg: 09:00, 10:00, 11:00 for two orgs; rpc-billing:
    the same three hours for one agent; 12:00 still open in both.
    """
    principal, topic, producer, make, key, truth, fetch, id_field, windows = CRASH_JOBS[job]
    run = uuid.uuid4().hex[:8]
    t0 = datetime(2038, 7, 8, 9, 0, tzinfo=UTC)
    events = [make(run, i, t0 + timedelta(seconds=5 * i)) for i in range(2400)]  # 09:00 -> 12:20
    records = []
    for i, e in enumerate(events):
        records.append((key(e), e))
        if i % 37 == 0:
            records.append((key(e), e))  # a producer retry, right behind the original
    produce(cluster, producer, topic, records)
    consumers = fast_specs(tmp_path, job, max_offsets_per_trigger=300, trigger="0s")
    env = job_env(cluster, principal, tmp_path)
    process.start(job, tmp_path, env, registry=ROOT / "topics.yaml", consumers=consumers, cwd=ROOT)
    commits = tmp_path / "jobs" / job / "checkpoint" / "aggregate" / "commits"
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while time.monotonic() < deadline:
            if commits.exists() and len([f for f in commits.iterdir() if f.name.isdigit()]) >= 4:
                break
            assert process.status(job, tmp_path)["running"], \
                Path(process.log_file(job, tmp_path)).read_text()[-4000:]
            time.sleep(0.2)
    finally:
        assert process.kill(job, tmp_path)
    committed, ends = offsets_of(cluster, job, topic)
    assert sum(committed.values()) < sum(ends.values()), "killed after it had caught up"

    run_once(cluster, job, principal, tmp_path, consumers)

    newest = t0 + timedelta(seconds=5 * (len(events) - 1))
    want = truth(events, newest - timedelta(minutes=10))
    assert len(want) == windows
    got = fetch(cluster, run)
    copies: dict[str, list[dict]] = defaultdict(list)
    for e in got:
        copies[e["data"][id_field]].append(e)
    assert all(c == [c[0]] * len(c) for c in copies.values()), "a re-sent window changed"
    assert {b: c[0] for b, c in copies.items()} == want
    late = [m for m in read_all(cluster, dl.TOPIC)
            if headers(m).get(dl.H_ERROR_CLASS) == b"event.late" and run.encode() in m.value()]
    assert late == []
    assert_caught_up(cluster, job, topic)


# ---------------------------------------------------------------- no input stops a job

# Kafka's message.max.bytes default: neither broker_config.py nor topics.yaml changes it,
# so the largest record a producer can write to llm_usage is just under this.
BROKER_MAX_MESSAGE = 1_048_588
POISON_KEY = b"poison-key"
POISON_JOBS = {  # job -> (its principal, its topic, a principal that produces there)
    "billing-agg": ("billing-aggregator", "llm_usage", "llm-gateway"),
    "analytics-ingest": ("analytics-ingest", "events_plugin_ingestion", "insights-capture"),
}


def poison(size: int) -> bytes:
    """~1 MB that is not an event: bigger than dead_letter can hold, as big as Kafka allows."""
    return (b"not an event: " + bytes(range(256)) * (size // 256 + 1))[:size]


def _valid_after_poison(job: str, run: str) -> list[dict]:
    if job == "billing-agg":  # 12:30 moves the watermark past 11:00: the 10:00 hour is billed
        day = datetime(2039, 9, 10, tzinfo=UTC)
        return [usage(run, "a", "x", day + timedelta(hours=10, minutes=5), 1),
                usage(run, "a", "x", day + timedelta(hours=12, minutes=30), 2)]
    return [insights(run, i, datetime(2039, 9, 10, 10, tzinfo=UTC) + timedelta(seconds=i))
            for i in range(3)]


def _assert_valid_ones_processed(cluster, job: str, run: str, valid: list[dict], home: Path) -> None:
    if job == "billing-agg":
        want = expected_billing(valid, datetime(2039, 9, 10, 12, 20, tzinfo=UTC),
                                "hanzo-stream/billing-agg")
        assert len(want) == 1
        assert {e["data"]["billing_id"]: e for e in billing_events(cluster, run)} == want
        return
    teams = ", ".join(f"'{run}-team{i}'" for i in range(3))
    rows = chdb_query(home / "jobs" / job / "chdb",
                      f"SELECT id FROM events FINAL WHERE team_id IN ({teams})")
    assert {r["id"] for r in rows} == {v["id"] for v in valid}


@pytest.mark.parametrize("job", sorted(POISON_JOBS))
def test_a_record_too_large_for_dead_letter_does_not_stop_the_job(cluster, tmp_path, job):
    """A ~1 MB raw record used to fail every replay of its batch (MSG_SIZE_TOO_LARGE on
    dead_letter): now it is dead-lettered truncated, and the valid events behind it flow."""
    principal, topic, producer = POISON_JOBS[job]
    run = uuid.uuid4().hex[:8]
    huge = poison(BROKER_MAX_MESSAGE - 1024)  # room for the batch and record framing
    valid = _valid_after_poison(job, run)
    where = produce(cluster, producer, topic,
                    [(POISON_KEY, huge)] + [(v["team_id"], v) for v in valid],
                    config={"message.max.bytes": BROKER_MAX_MESSAGE, "compression.type": "none"})

    run_once(cluster, job, principal, tmp_path)  # asserts exit code 0

    (letter,) = dead_letters(cluster, job, topic, {where[0]})
    h = headers(letter)
    assert h[dl.H_TRUNCATED] == b"true"
    assert h[dl.H_ORIGINAL_SIZE] == str(len(huge)).encode()
    assert h[dl.H_ORIGINAL_SHA256] == hashlib.sha256(huge).hexdigest().encode()
    assert h[dl.H_ORIGINAL_KEY] == POISON_KEY and letter.key() == topic.encode()
    assert letter.value() == huge[:dl.DEAD_LETTER_MAX_VALUE - len(POISON_KEY)]  # cut to the limit
    committed, _ = offsets_of(cluster, job, topic)
    assert all(committed[p] > o for p, o in where), (committed, where)  # past the poison pill
    _assert_valid_ones_processed(cluster, job, run, valid, tmp_path)
