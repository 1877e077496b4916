"""What the Spark job tests share (test_spark_jobs.py, and the modules that run the same jobs
elsewhere: failover, scaling, llm-metrics, Kubernetes): producing and reading as a principal,
running a job once as a subprocess, the events each job reads and the totals it must write.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path

import yaml
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from hanzo_stream.core import dead_letter as dl
from hanzo_stream.jobs import s3
from hanzo_stream.jobs.billing_ids import billing_id, event_id, settlement_id
from hanzo_stream.reconcile.secrets import env_name

ROOT = Path(__file__).resolve().parents[2]


JOB_TIMEOUT = 600  # a --once run on a loaded 2-core CI machine; bounded


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
    from hanzo_stream.registry import load_registry
    from hanzo_stream.schemas.store import load
    from hanzo_stream.schemas.validator import Validator

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


_MOVING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
           KafkaError._TRANSPORT, KafkaError._TIMED_OUT}  # a leader election under way


def _watermarks(c: Consumer, tp: TopicPartition, within: float = 60.0) -> tuple[int, int]:
    """A partition's offsets, asked again while its leadership moves: a test that kills a
    leader reads right through the election (seen: NOT_LEADER_FOR_PARTITION in a cold CI run,
    the killed broker restarting while billing_events was read)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return c.get_watermark_offsets(tp, timeout=10)
        except KafkaException as e:
            if e.args[0].code() not in _MOVING or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def read_all(cluster, topic: str) -> list:
    """Every record of a topic, as the admin, from the beginning to the current end, once
    each in (partition, offset) order. All partitions are read by one assignment and each
    record is kept by its position: a record fetched twice is never counted twice."""
    c = Consumer(cluster.admin.confluent() | {"group.id": f"test-reader-{uuid.uuid4()}",
                                              "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        bounds = {p: _watermarks(c, TopicPartition(topic, p)) for p in parts}
        ends = {p: hi for p, (lo, hi) in bounds.items() if hi > lo}
        c.assign([TopicPartition(topic, p, bounds[p][0]) for p in ends])
        seen: dict[tuple[int, int], object] = {}
        todo = set(ends)
        deadline = time.monotonic() + 180  # dead_letter holds ~1 MB letters: slow on a loaded machine
        while todo and time.monotonic() < deadline:
            for m in c.consume(500, 1.0):
                if m.error() or m.partition() not in ends or m.offset() >= ends[m.partition()]:
                    continue
                seen[(m.partition(), m.offset())] = m
                if m.offset() == ends[m.partition()] - 1:
                    todo.discard(m.partition())
        # A partial read would fail the caller's counts with no hint of why: say it here.
        assert not todo, f"{topic}: partitions {sorted(todo)} not read to their ends in 180 s"
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


def end_offsets(cluster, topic: str) -> dict[int, int]:
    c = Consumer(cluster.admin.confluent() | {"group.id": f"test-offsets-{uuid.uuid4()}"})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        c.close()


def offsets_of(cluster, group: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """(committed offsets of the group, end offsets of the topic)."""
    admin = cluster.admin_client()
    ends = end_offsets(cluster, topic)
    parts = sorted(ends)
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


def run_once(cluster, name: str, principal: str, home: Path, consumers: Path | None = None,
             store: s3.S3Access | None = None, extra_env: dict[str, str] | None = None):
    """`hanzo-stream jobs run NAME --once` as a subprocess; returns its output. Without
    `consumers`: the spec as it ships, or a windowed job's fast_specs copy (2030s events)."""
    if consumers is None:
        shipped = yaml.safe_load((ROOT / "consumers" / f"{name}.yaml").read_text())
        consumers = fast_specs(home, name) if "watermark" in shipped else ROOT / "consumers"
    proc = subprocess.run(
        [sys.executable, "-m", "hanzo_stream.jobs.cli", "run", name, "--once",
         "--registry", str(ROOT / "topics.yaml"), "--consumers", str(consumers)],
        env=job_env(cluster, principal, home, store) | (extra_env or {}), cwd=ROOT,
        capture_output=True, text=True,
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


@dataclass
class Outage:
    """How a supervised job rode out its store's outage (ride_out)."""

    outcome: str = "rode it out"
    restarts: int = 0
    caught_up_s: float = 0.0


def ride_out(cluster, job: str, topic: str, producer: str, key: str, events: list[dict],
             start: Callable[[], None], progressed: Callable[[], bool], home: Path,
             down: Callable[[], None], up: Callable[[], None], seconds: float = 30.0,
             caught_up: Callable[[], None] | None = None) -> Outage:
    """A third of `events` first; once `progressed()`, the store goes `down()` for `seconds`
    while the second third keeps arriving, then `up()` and the rest. The job is supervised as
    Kubernetes would: restarted (at most 3 times) if it exits. Returns once it has caught up
    (`caught_up()` runs then, the job still running, for what a test asks of a live job).

    During the outage, no committed offset may move while the log end does: what the
    ConsumerStalled alert reads (its window and `for:` are promtool's to prove).

    30 s: long enough for ~15 of the tests' 2 s triggers to meet the outage, so a job either
    waits it out in its store client's retries or fails and is restarted from its checkpoint,
    the two paths a longer outage takes too (60 s, measured until 2026-12-02, took the same
    ones: S3 rode it out, ClickHouse exited once)."""
    from hanzo_stream.jobs import process

    from .conftest import wait_for

    third = len(events) // 3
    before, during, after = events[:third], events[third:2 * third], events[2 * third:]
    produce(cluster, producer, topic, [(e[key], e) for e in before])
    out = Outage()
    start()
    try:
        wait_for(lambda: progressed() or None, JOB_TIMEOUT, f"{job}'s first batches")
        down()
        down_at = time.monotonic()
        held = None
        for i in range(0, len(during), 50):  # events keep arriving through the outage
            produce(cluster, producer, topic, [(e[key], e) for e in during[i:i + 50]])
            time.sleep(max(0.0, down_at + (i + 50) / len(during) * seconds - time.monotonic()))
            if held is None and time.monotonic() - down_at > seconds / 3:
                held = offsets_of(cluster, job, topic)[0]
        state = process.status(job, home)
        if not state["running"]:
            out.outcome = f"exited during the outage ({state.get('last_log_line')})"
        committed, ends = offsets_of(cluster, job, topic)
        assert committed == held and sum(ends.values()) - sum(committed.values()) >= 2 * len(during) // 3
        up()
        back_at = time.monotonic()
        produce(cluster, producer, topic, [(e[key], e) for e in after])
        deadline = time.monotonic() + JOB_TIMEOUT
        while time.monotonic() < deadline:
            if not process.status(job, home)["running"]:
                out.restarts += 1  # the supervisor's part: a pod's restartPolicy does the same
                assert out.restarts <= 3, Path(process.log_file(job, home)).read_text()[-4000:]
                start()
            committed, ends = offsets_of(cluster, job, topic)
            if committed == ends:
                break
            time.sleep(1)
        out.caught_up_s = time.monotonic() - back_at
        if caught_up:
            caught_up()
    finally:
        process.stop(job, home)
    return out


def chdb_query(path: Path, sql: str):
    from chdb import session

    s = session.Session(str(path))  # one chDB directory per process: open, read, close
    try:
        return s.query(sql, "ArrowTable").to_pylist()
    finally:
        s.close()


def fast_specs(tmp: Path, name: str, **overrides) -> Path:
    """A copy of consumers/<name>.yaml with overrides (small batches for the crash tests).

    A windowed job's copy has `future: off`: these tests date their events in the 2030s, newer
    than every earlier test's on the same topic (test_spark_jobs.py's docstring), which the
    job's own clock would refuse. test_clock_skew.py runs the spec as shipped."""

    doc = yaml.safe_load((ROOT / "consumers" / f"{name}.yaml").read_text())
    doc["job"] = str(ROOT / doc["job"])
    if "watermark" in doc:
        doc["future"] = "off"
    doc.update(overrides)
    d = tmp / "consumers"
    d.mkdir(exist_ok=True)
    (d / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return d


def archive_on_s3(tmp: Path, tag: str, **overrides) -> tuple[Path, str]:
    """audit-archive's specs with its archive and checkpoint under s3a paths of this test's own
    (`tag`), so a test's committed archive holds only its own events; and the archive's path."""
    spec = yaml.safe_load((ROOT / "consumers" / "audit-archive.yaml").read_text())
    archive = {**spec["sinks"]["archive"], "path": f"s3a://hanzo-audit/{tag}"}
    return fast_specs(tmp, "audit-archive", checkpoint=f"s3a://hanzo-stream/checkpoints/{tag}",
                      sinks={**spec["sinks"], "archive": archive}, **overrides), archive["path"]


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


def postgres_table(job: str) -> str:
    """The table of the job's postgres sink (consumers/<job>.yaml)."""
    spec = yaml.safe_load((ROOT / "consumers" / f"{job}.yaml").read_text())
    (table,) = [k["table"] for k in spec["sinks"].values() if k["type"] == "postgres"]
    return table


def postgres_rows(dsn: str, table: str, id_field: str, run: str) -> dict[str, dict]:
    """This run's rows of a settlement table, as the Kafka record's envelope would carry them:
    {id: {"id": event_id, "data": {field: value}}} (decimals exact, times in UTC ISO)."""
    import psycopg
    from psycopg.rows import dict_row

    def plain(k: str, v):
        if isinstance(v, datetime):
            return iso(v.astimezone(UTC))
        return v

    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        rows = conn.execute(f"SELECT * FROM {table}").fetchall()
    out = {}
    for r in rows:
        data = {k: plain(k, v) for k, v in r.items() if k not in ("event_id", "written_at")}
        if any(isinstance(v, str) and v.startswith(f"{run}-") for v in data.values()):
            out[r[id_field]] = {"id": str(r["event_id"]), "data": data}
    return out


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
