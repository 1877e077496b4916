"""The Spark jobs on the real local Kubernetes, deployed by the real `pulumi up`: the session's
dev stack with `spark` turned on runs one spark-submit driver Deployment per job (executors as
pods it asks the API server for), checkpoints and the audit archive on the node's S3 store.
Then, with the standard's events produced through the Service as their producers' principals:

- billing-agg delivers exactly the hourly billing records of those events on billing_events;
- analytics-ingest loads exactly the valid events into its ClickHouse (chDB in the driver),
  and dead-letters the invalid ones with their original bytes;
- audit-archive writes exactly the audit events as Parquet objects to the node's store.

At the end Spark is turned off again, so later modules share a light stack."""

from __future__ import annotations

import base64
import json
import sys
import textwrap
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from hanzo_stream.core import dead_letter as dl
from hanzo_stream.jobs import s3
from hanzo_stream.jobs.archive import committed_files, read_committed
from hanzo_stream.kube import netns

from .conftest import wait_for
from .kube import in_node, record
from .spark_harness import audit_events, expected_billing, insights, invalid_insights, iso, usage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

JOBS = ("analytics-ingest", "audit-archive", "billing-agg")
READY_TIMEOUT = 900  # three JVM drivers and their executors starting on two shared cores
RESULT_TIMEOUT = 600  # produced -> in the sink, with every job already running

# Kafka clients run on the node's network (the Service's DNS name), as a pod's would. The
# spark_harness helpers take a cluster with as_() and admin: here, the stack's.
CLIENT = textwrap.dedent("""
    import base64, json, os, sys
    from hanzo_stream.core.connection import Connection
    from tests.integration import spark_harness as t

    class Stack:
        def as_(self, principal, mechanism="SCRAM-SHA-512"):
            return Connection(os.environ["HANZO_STREAM_BOOTSTRAP"], "SASL_SSL", mechanism,
                              principal, json.loads(os.environ["PASSWORDS"])[principal],
                              os.environ["HANZO_STREAM_CA_FILE"])
        admin = property(lambda self: self.as_("admin", "PLAIN"))

    req = json.loads(sys.stdin.read())
    if req["op"] == "produce":
        records = [(k, base64.b64decode(v["b64"]) if isinstance(v, dict) and "b64" in v else v)
                   for k, v in req["records"]]
        out = t.produce(Stack(), req["principal"], req["topic"], records)
    else:
        out = [{"p": m.partition(), "o": m.offset(),
                "value": None if m.value() is None else base64.b64encode(m.value()).decode(),
                "headers": {k: v.decode("utf-8", "replace") for k, v in t.headers(m).items()}}
               for m in t.read_all(Stack(), req["topic"])]
    print(json.dumps(out))
""")


def kafka(stack, op: str, **args) -> list:
    passwords = {**stack.outputs["principalPasswords"], "admin": stack.password("admin")}
    out = in_node(stack.node, [sys.executable, "-c", CLIENT],
                  env=stack.client_env("admin") | {"PASSWORDS": json.dumps(passwords)},
                  input=json.dumps({"op": op, **args}), timeout=180)
    return json.loads(out.stdout.strip().splitlines()[-1])


def produce(stack, principal: str, topic: str, records: list[tuple]) -> list[tuple[int, int]]:
    """Produce (key, value) pairs (a dict is sent as JSON, bytes as they are) as `principal`."""
    wire = [(k, {"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v)
            for k, v in records]
    return [tuple(w) for w in kafka(stack, "produce", principal=principal, topic=topic,
                                    records=wire)]


def read(stack, topic: str) -> list[dict]:
    """Every record of `topic` as the admin: partition, offset, value bytes, headers."""
    return [m | {"value": None if m["value"] is None else base64.b64decode(m["value"])}
            for m in kafka(stack, "read", topic=topic)]


def drivers(stack) -> dict[str, dict]:
    return {p["metadata"]["labels"]["hanzo.ai/spark-app"]: p
            for p in stack.pods("hanzo.ai/spark-role=driver").values()}


def running(stack, role: str) -> set[str]:
    """Jobs with a Ready pod of this role (driver or executor)."""
    return {p["metadata"]["labels"]["hanzo.ai/spark-app"]
            for p in stack.pods(f"hanzo.ai/spark-role={role}").values()
            if p["status"].get("phase") == "Running"
            and all(c.get("ready") for c in p["status"].get("containerStatuses", []))}


def driver_exec(stack, job: str, *argv: str, input: str | None = None) -> str:
    return stack.kubectl("exec", "-i", f"deploy/{job}", "-c", "driver", "--", *argv,
                         input=input).stdout


CHDB_IDS = textwrap.dedent("""
    import json, shutil, sys, tempfile
    from chdb import session
    # The driver's chDB is its own process's: read a copy of its directory (its tables are
    # relative symlinks into store/, kept as they are).
    copy = tempfile.mkdtemp() + "/chdb"
    shutil.copytree("/tmp/hanzo-stream/jobs/analytics-ingest/chdb", copy, symlinks=True)
    s = session.Session(copy)
    sql = "SELECT id FROM events FINAL WHERE startsWith(team_id, %s) ORDER BY id"
    rows = s.query(sql % repr(sys.argv[1] + "-"), "ArrowTable").to_pylist()
    print(json.dumps([r["id"] for r in rows]))
    s.close(); shutil.rmtree(copy)
""")
INGESTED: dict[str, list[str]] = {}  # run -> the ids analytics-ingest loaded


def chdb_ids(stack, run: str) -> list[str]:
    """The ids of this run's rows in analytics-ingest's ClickHouse, read in the driver's pod."""
    out = driver_exec(stack, "analytics-ingest", "python3", "-c", CHDB_IDS, run)
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def spark(kube_dev):
    t = time.monotonic()
    result = kube_dev.up(spark=True)
    changes = dict(result.summary.resource_changes or {})
    up_s = time.monotonic() - t
    try:
        ready = wait_for(lambda: running(kube_dev, "driver") >= set(JOBS)
                         and running(kube_dev, "executor") >= set(JOBS),
                         READY_TIMEOUT, "every job's driver and executor Running and Ready",
                         every=5)
        assert ready
        record("spark-on", pulumi_up_s=round(up_s), changes=changes,
               drivers_and_executors_ready_s=round(time.monotonic() - t))
        yield kube_dev
    finally:
        for job in JOBS:  # what a failure needs to be understood
            logs = kube_dev.kubectl("logs", f"deploy/{job}", "--tail", "40", check=False)
            print(f"\n--- {job} driver log (tail)\n{logs.stdout}{logs.stderr}")
        kube_dev.up(spark=False)


def test_the_drivers_run_spark_submit_on_kubernetes_with_the_stacks_executors(spark):
    drv = drivers(spark)
    assert set(drv) >= set(JOBS)
    execs = spark.pods("hanzo.ai/spark-role=executor")
    per_job = {j: sorted(n for n, p in execs.items()
                         if p["metadata"]["labels"]["hanzo.ai/spark-app"] == j) for j in JOBS}
    assert {j: len(n) for j, n in per_job.items()} == {j: 1 for j in JOBS}  # sparkMaxExecutors 1
    for job, names in per_job.items():
        owner = execs[names[0]]["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Pod", drv[job]["metadata"]["name"])


def test_billing_agg_delivers_the_exact_hourly_records(spark):
    run = uuid.uuid4().hex[:8]
    # After every event time already on llm_usage (kube_1's probe is dated 3 days back), and in
    # the past: the job refuses event times ahead of its clock (`future` in the spec).
    day = (datetime.now(UTC) - timedelta(days=2)).replace(hour=0, minute=0, second=0, microsecond=0)

    def at(h, m, s=0, ms=0):
        return day + timedelta(hours=h, minutes=m, seconds=s, milliseconds=ms)

    hours = [usage(run, "a", "x", at(10, 5), 1), usage(run, "a", "x", at(10, 59, 59, 999), 2),
             usage(run, "b", "x", at(10, 0), 3), usage(run, "b", "x", at(10, 30), 4),
             usage(run, "a", "x", at(11, 0), 5), usage(run, "c", "y", at(11, 10), 6),
             usage(run, "c", "y", at(11, 50), 7)]
    closing = usage(run, "a", "x", at(12, 30), 8)  # the watermark becomes 12:20
    t = time.monotonic()
    produce(spark, "llm-gateway", "llm_usage", [(e["team_id"], e) for e in hours + [hours[0]]])
    # After the others are acknowledged: no batch can hold the closing event without them.
    produce(spark, "llm-gateway", "llm_usage", [(closing["team_id"], closing)])
    want = expected_billing(hours + [closing], at(12, 20), "hanzo-stream/billing-agg")
    assert len(want) == 4  # 10:00 a, b; 11:00 a, c (12:00 a still open)

    def mine() -> list[dict]:
        return [d for d in (json.loads(m["value"], parse_float=Decimal)
                            for m in read(spark, "billing_events"))
                if str(d.get("team_id", "")).startswith(run)]

    got = wait_for(lambda: (lambda g: g if len(g) >= len(want) else None)(mine()),
                   RESULT_TIMEOUT, "billing-agg's hourly records", every=5)
    first_s = time.monotonic() - t
    assert {e["data"]["billing_id"]: e for e in got} == want
    assert len(got) == len(want), "a window was billed twice"
    record("spark-billing-agg", first_records_s=round(first_s), records=len(got),
           events=len(hours) + 2)


def test_analytics_ingest_loads_the_valid_events_and_dead_letters_the_invalid(spark):
    run = uuid.uuid4().hex[:8]
    t0 = datetime.now(UTC).replace(microsecond=0)
    valid = [insights(run, i, t0 + timedelta(seconds=i)) for i in range(12)]
    bad = invalid_insights(run)[:4]  # malformed JSON, a tombstone, not an object, trailing bytes
    t = time.monotonic()
    where = produce(spark, "insights-capture", "events_plugin_ingestion",
                    [(e["team_id"], e) for e in valid] + [(k, v) for k, v, _ in bad])

    ids = wait_for(lambda: (lambda r: r if len(r) >= len(valid) else None)(chdb_ids(spark, run)),
                   RESULT_TIMEOUT, "analytics-ingest's rows in ClickHouse", every=5)
    rows_s = time.monotonic() - t
    assert ids == sorted(e["id"] for e in valid)
    report = json.loads(driver_exec(spark, "analytics-ingest", "cat",
                                    "/tmp/hanzo-stream/jobs/analytics-ingest/report.json"))
    assert report["clickhouse_rows"] >= len(valid)
    INGESTED[run] = ids

    bad_at = set(where[len(valid):])

    def letters() -> list[dict]:
        return [m for m in read(spark, dl.TOPIC)
                if m["headers"].get(dl.H_STAGE) == "job:analytics-ingest"
                and (int(m["headers"][dl.H_SOURCE_PARTITION]),
                     int(m["headers"][dl.H_SOURCE_OFFSET])) in bad_at]

    got = wait_for(lambda: (lambda g: g if len(g) >= len(bad) else None)(letters()),
                   RESULT_TIMEOUT, "analytics-ingest's dead letters", every=5)
    by_pos = {(int(m["headers"][dl.H_SOURCE_PARTITION]), int(m["headers"][dl.H_SOURCE_OFFSET])): m
              for m in got}
    assert len(by_pos) == len(got) == len(bad)
    for pos, (_, value, cls) in zip(where[len(valid):], bad, strict=True):
        m = by_pos[pos]
        assert m["headers"][dl.H_ERROR_CLASS] == cls
        assert m["value"] == (value if value is None or isinstance(value, bytes)
                              else json.dumps(value).encode())  # the original bytes
    record("spark-analytics-ingest", rows_s=round(rows_s), rows=len(ids), dead_letters=len(got))


def test_audit_archive_writes_parquet_to_the_nodes_object_store(spark, registry):
    run = uuid.uuid4().hex[:8]
    events = audit_events(registry, run, 10, datetime(2036, 5, 6, 23, 59, 59, tzinfo=UTC),
                          timedelta(milliseconds=200))
    t = time.monotonic()
    produce(spark, "iam-service", "audit_log", [(e["org_id"], e) for e in events])
    path = spark.settings.get("auditArchivePath") or "s3a://hanzo-audit/audit_log"
    store = spark.node.object_store()

    def archived() -> list[dict]:
        with netns.entered(spark.node.addr):
            return [r for r in read_committed(path, store).to_pylist() if r["org_id"].startswith(run)]

    rows = wait_for(lambda: (lambda r: r if len(r) >= len(events) else None)(archived()),
                    RESULT_TIMEOUT, "audit-archive's Parquet on the node's store", every=5)
    archive_s = time.monotonic() - t
    assert sorted(r["id"] for r in rows) == sorted(e["id"] for e in events)
    by_id = {e["id"]: e for e in events}
    for r in rows:
        assert json.loads(r["raw"]) == by_id[r["id"]]
        assert iso(r["timestamp"]) == by_id[r["id"]]["timestamp"]
    bucket, prefix = s3.split(path)
    with netns.entered(spark.node.addr):
        keys = s3.list_keys(store.client(), bucket, prefix)
        committed = committed_files(path, store)
        checkpoints = s3.list_keys(store.client(), "hanzo-stream", "checkpoints/audit-archive/")
    mine = [k for k in keys if k.endswith(".parquet") and f"org_id={run}-" in k]
    assert mine and all(k.split("/date=")[1][:10] in ("2036-05-06", "2036-05-07") for k in mine)
    assert {f"{bucket}/{k}" for k in mine} <= {c.split("://", 1)[1] for c in committed}
    assert any("/commits/" in k for k in checkpoints)  # the checkpoint is on the store too
    record("spark-audit-archive", archive_s=round(archive_s), rows=len(rows),
           parquet_objects=len(mine), objects_in_bucket=len(keys))

