"""Job plumbing without a broker or a JVM: specs, credentials, Spark settings, offset commits,
offset-log parsing, billing ids, ClickHouse idempotence (embedded chDB), dead-letter headers,
the archive's committed-file reader, background processes and the CLI."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from hanzo_stream.artifacts import jvm
from hanzo_stream.core import dead_letter as dl
from hanzo_stream.core.connection import ConnectionError_
from hanzo_stream.jobs import archive, clickhouse, kafka_out, offsets, process, spark, spark_archive
from hanzo_stream.jobs.billing_ids import billing_id, event_id, settlement_id
from hanzo_stream.jobs.cli import app
from hanzo_stream.jobs.connect import job_connection
from hanzo_stream.jobs.spec import SpecInvalid, list_specs, load_spec, seconds

ROOT = Path(__file__).resolve().parents[2]
CONSUMERS = ROOT / "consumers"
JOBS = ["analytics-ingest", "audit-archive", "billing-agg", "llm-metrics", "rpc-billing"]


@pytest.fixture(scope="module")
def schemas():
    from hanzo_stream.schemas.store import load

    return load(ROOT / "schemas")


# ---------------------------------------------------------------- specs

def test_every_consumer_spec_loads_against_the_registry(registry, tmp_path):
    assert list_specs(CONSUMERS) == JOBS
    for name in list_specs(CONSUMERS):
        s = load_spec(name, registry, CONSUMERS, tmp_path)
        g = registry.group(name)
        assert (s.principal, s.topics) == (g.principal, g.topics)  # facts from the registry
        assert s.job.exists() and s.job.parent.name == ("spark" if s.runtime == "spark" else "jobs")
        # Relative checkpoints live in the state directory; audit-archive's is on S3, like its archive.
        assert s.checkpoint.startswith(("s3a://", str(tmp_path.resolve())))
        assert s.checkpoint_for("q") == f"{s.checkpoint}/q"
        assert "dead_letter" in {k.type for k in s.sinks.values()}
    billing = load_spec("billing-agg", registry, CONSUMERS, tmp_path)
    assert (billing.window_seconds, billing.watermark_seconds, billing.future_seconds) == (3600, 600, 60)
    assert billing.sink("billing_events").get("topic") == "billing_events"
    assert [n for n in JOBS if load_spec(n, registry, CONSUMERS, tmp_path).runtime != "spark"] == [
        "llm-metrics"]


def test_both_settlement_jobs_are_one_engine_configured_by_their_specs(registry, schemas, tmp_path):
    """billing-agg and rpc-billing: the same build(), different `aggregate:` blocks, each
    consistent with schemas/ (what the engine writes is what the output schema requires)."""
    from hanzo_stream.jobs import totals
    from hanzo_stream.jobs.runner import load_job_module

    billing = load_spec("billing-agg", registry, CONSUMERS, tmp_path)
    rpc = load_spec("rpc-billing", registry, CONSUMERS, tmp_path)
    assert load_job_module(billing.job).build is load_job_module(rpc.job).build is totals.build
    assert billing.aggregate.by == ("team_id", "org_id") and billing.aggregate.id_field == "billing_id"
    assert rpc.aggregate.by == ("agent_id",) and rpc.aggregate.sums == ("units", "duration_ms")
    assert rpc.sink(rpc.aggregate.sink).get("topic") == "agent_rpc_settlements"
    for spec in (billing, rpc):
        (topic,) = spec.topics
        assert totals.check_fields(spec, schemas, registry.topic(topic).event_types) == []
    assert totals.output_data_fields(billing.aggregate) == (
        "billing_id", "team_id", "org_id", "window_start", "window_end", "prompt_tokens",
        "completion_tokens", "total_tokens", "cost_usd", "cost_micros", "request_count")
    assert totals.locate(schemas, "llm.usage.completed", "org_id")[::2] == ("envelope", True)
    assert totals.locate(schemas, "agent.rpc.metered", "agent_id")[::2] == ("data", True)
    assert totals.locate(schemas, "agent.rpc.metered", "team_id")[::2] == ("envelope", False)


@pytest.mark.parametrize("change, message", [
    ({"by": ["agent_id", "team_id"]}, "'team_id' is optional in agent.rpc.metered"),
    ({"sum": ["units", "method"]}, "'method' is 'string', not integer"),
    ({"sum": ["units", "tokens"]}, "agent.rpc.metered has no field 'tokens'"),
    ({"count": "calls"}, "agent.rpc.settled.json's data must require exactly"),
    ({"money": "duration_ms"}, "'duration_ms' is 'integer', not number"),
])
def test_an_aggregate_that_disagrees_with_schemas_fails_at_start(registry, schemas, tmp_path, change,
                                                                  message):
    from hanzo_stream.jobs import totals

    doc = yaml.safe_load((CONSUMERS / "rpc-billing.yaml").read_text())
    doc["aggregate"] |= change
    d = _write_spec(tmp_path, "rpc-billing", **doc | {"job": "spark/job.py"})
    spec = load_spec("rpc-billing", registry, d, tmp_path)
    problems = totals.check_fields(spec, schemas, ("agent.rpc.metered",))
    assert any(message in p for p in problems), problems
    assert all(p.startswith(f"{d / 'rpc-billing.yaml'}: aggregate.") for p in problems)


@pytest.mark.parametrize("change, message", [
    ({"sink": "dead_letter"}, "aggregate.sink: 'dead_letter' must name a `kafka` sink"),
    ({"output": "billing.usage.hourly"},
     "billing.usage.hourly is not an event type of agent_rpc_settlements"),
    ({"by": ["team_id"]}, "must include it"),
    ({"sum": "units"}, "aggregate.sum: a list of field names"),
    ({"colour": "red"}, "aggregate.colour: unknown key"),
])
def test_aggregate_block_problems_name_the_field_and_the_fix(registry, tmp_path, change, message):
    doc = yaml.safe_load((CONSUMERS / "rpc-billing.yaml").read_text())
    doc["aggregate"] |= change
    d = _write_spec(tmp_path, "rpc-billing", **doc | {"job": "spark/job.py"})
    with pytest.raises(SpecInvalid, match=message):
        load_spec("rpc-billing", registry, d, tmp_path)
    del doc["watermark"]
    d = _write_spec(tmp_path, "rpc-billing", **doc | {"job": "spark/job.py", "aggregate": {}})
    with pytest.raises(SpecInvalid, match="`watermark` too"):
        load_spec("rpc-billing", registry, d, tmp_path)


@pytest.mark.parametrize("change, message", [
    ({"future": "10m"}, r"future: 10m must be more than 0 and less than the watermark \(10m\)"),
    ({"future": "0s"}, "must be more than 0"),
    ({"future": "soon"}, "durations look like"),
    ({"watermark": None, "window": None, "aggregate": None, "future": "1m"},
     "future: only a job with a `watermark` checks event times; remove it"),
])
def test_a_future_bound_that_would_make_honest_events_late_is_refused(registry, tmp_path, change,
                                                                      message):
    """`future` bounds how far a fast producer clock can push the watermark: at or past the
    watermark, one such producer would make every other producer's events late."""
    doc = yaml.safe_load((CONSUMERS / "rpc-billing.yaml").read_text()) | {"job": "spark/job.py"}
    doc = {k: v for k, v in (doc | change).items() if v is not None}
    d = _write_spec(tmp_path, "rpc-billing", **doc)
    with pytest.raises(SpecInvalid, match=message):
        load_spec("rpc-billing", registry, d, tmp_path)
    if "watermark" in doc:  # not given: the default, one minute; `off`: no check
        for given, want in ((None, 60), ("off", None), (False, None)):
            doc = {k: v for k, v in (doc | {"future": given}).items() if v is not None}
            spec = load_spec("rpc-billing", registry, _write_spec(tmp_path, "rpc-billing", **doc),
                             tmp_path)
            assert spec.future_seconds == want


def _write_spec(tmp_path: Path, name: str, **doc) -> Path:
    d = tmp_path / "consumers"
    d.mkdir(exist_ok=True)
    (tmp_path / "spark").mkdir(exist_ok=True)
    (tmp_path / "spark" / "job.py").write_text("def build(ctx): return []\n")
    base = {"group": name, "job": "spark/job.py", "checkpoint": "cp",
            "sinks": {"dl": {"type": "dead_letter"}}}
    (d / f"{name}.yaml").write_text(yaml.safe_dump(base | doc))
    return d


def test_a_spec_may_only_write_where_its_principal_may(registry, tmp_path):
    d = _write_spec(tmp_path, "analytics-ingest",
                    sinks={"out": {"type": "kafka", "topic": "billing_events"}})
    with pytest.raises(SpecInvalid, match="analytics-ingest is not a producer of billing_events"):
        load_spec("analytics-ingest", registry, d, tmp_path)


@pytest.mark.parametrize("doc, message", [
    ({"group": "nope"}, "'nope' is not a group"),
    ({"colour": "red"}, "colour: unknown key"),
    ({"sinks": {"x": {"type": "redis"}}}, "sinks.x.type: use one of"),
    ({"job": "spark/missing.py"}, "does not exist"),
    ({"trigger": "soon"}, "durations look like"),
    ({"max_offsets_per_trigger": -5}, "positive integer"),
    ({"runtime": "flink"}, "runtime: use one of spark, consumer"),
    ({"sinks": {"out": {"type": "kafka", "topic": "no_such_topic"}}}, "is not a registry topic"),
])
def test_spec_problems_name_the_field_and_the_fix(registry, tmp_path, doc, message):
    d = _write_spec(tmp_path, "billing-agg", **doc)
    with pytest.raises(SpecInvalid, match=message):
        load_spec("billing-agg", registry, d, tmp_path)


@pytest.mark.parametrize("sink, message", [
    ({"type": "postgres"}, "sinks.pg.table: the table to upsert into"),
    ({"type": "postgres", "table": "Bills; DROP"}, "sinks.pg.table: the table to upsert into"),
    ({"type": "postgres", "table": "bills", "dsn_env": "postgres://x"}, "sinks.pg.dsn_env: the "
                                                                        "environment variable"),
    ({"type": "postgres", "table": "bills", "dsn": "postgres://x"}, r"sinks.pg: unknown key\(s\) dsn"),
])
def test_a_postgres_sink_names_a_table_and_an_environment_variable_never_a_dsn(registry, tmp_path,
                                                                               sink, message):
    doc = yaml.safe_load((CONSUMERS / "billing-agg.yaml").read_text())
    doc["sinks"] = {k: v for k, v in doc["sinks"].items() if v["type"] != "postgres"} | {"pg": sink}
    d = _write_spec(tmp_path, "billing-agg", **doc | {"job": "spark/job.py"})
    with pytest.raises(SpecInvalid, match=message):
        load_spec("billing-agg", registry, d, tmp_path)


def test_a_postgres_sink_needs_an_aggregate_to_copy(registry, tmp_path):
    d = _write_spec(tmp_path, "audit-archive", sinks={"pg": {"type": "postgres", "table": "audit"}})
    with pytest.raises(SpecInvalid, match="sinks.pg: a postgres sink copies an `aggregate:`"):
        load_spec("audit-archive", registry, d, tmp_path)


def test_each_postgres_table_has_the_columns_its_job_writes(registry, tmp_path):
    """The migrations and the engine's output fields: one table per postgres sink, its columns
    the output event's data fields + the envelope id, the id field its primary key."""
    import re

    from hanzo_stream.jobs import postgres, totals

    sql = "\n".join(text for _, text in postgres.migrations())
    tables = {m[1]: m[2] for m in re.finditer(r"CREATE TABLE (\w+) \((.*?)\n\);", sql, re.S)}
    seen = 0
    for name in JOBS:
        spec = load_spec(name, registry, CONSUMERS, tmp_path)
        for sink in (k for k in spec.sinks.values() if k.type == "postgres"):
            body = tables[sink.get("table")]
            columns = [line.split()[0] for line in body.splitlines() if line.strip()
                       and not line.strip().startswith(("--", "CONSTRAINT", "PRIMARY"))]
            fields = totals.output_data_fields(spec.aggregate)
            assert columns == [*fields, postgres.EVENT_ID, "written_at"], (name, columns)
            assert re.search(rf"\b{fields[0]}\s+text PRIMARY KEY", body), body
            seen += 1
    assert seen == 2  # billing-agg and rpc-billing


def test_a_record_becomes_a_row_with_its_decimal_exact():
    from decimal import Decimal

    from hanzo_stream.jobs import postgres

    value = (b'{"id": "0190", "data": {"billing_id": "b1", "cost_usd": 0.100000000001, '
             b'"cost_micros": 100000, "window_start": "2038-07-08T09:00:00.000Z"}}')
    row = postgres.row_of(value, ("billing_id", "cost_usd", "cost_micros", "window_start"))
    assert row == ("b1", Decimal("0.100000000001"), 100000, "2038-07-08T09:00:00.000Z", "0190")
    assert isinstance(row[1], Decimal)


def test_spec_file_must_be_named_after_its_group(registry, tmp_path):
    d = _write_spec(tmp_path, "billing-agg", group="audit-archive")
    with pytest.raises(SpecInvalid, match="named after its group"):
        load_spec("billing-agg", registry, d, tmp_path)


def test_durations():
    assert [seconds(v) for v in ("500ms", "10s", "15m", "1h", 3)] == [0.5, 10, 900, 3600, 3]


# ---------------------------------------------------------------- credentials

BASE_ENV = {"HANZO_STREAM_BOOTSTRAP": "127.0.0.1:9093", "HANZO_STREAM_CA_FILE": "/ca.pem"}


def test_job_connects_as_its_own_principal_not_the_caller(tmp_path):
    env = BASE_ENV | {"HANZO_STREAM_SASL_USERNAME": "admin", "HANZO_STREAM_SASL_PASSWORD": "root",
                      "HANZO_STREAM_PASSWORD_BILLING_AGGREGATOR": "from-env"}
    c = job_connection("billing-aggregator", env)
    assert (c.username, c.password, c.sasl_mechanism) == ("billing-aggregator", "from-env", "SCRAM-SHA-512")
    assert 'username="billing-aggregator"' in c.java()["sasl.jaas.config"]


def test_password_lookup_order(tmp_path):
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"audit-archiver": "from-file"}))
    (tmp_path / "credentials.json").write_text(json.dumps(
        {"admin": "a", "principals": {"audit-archiver": "local", "analytics-ingest": "local-ai"}}))
    env = BASE_ENV | {"HANZO_STREAM_SECRETS_FILE": str(secrets)}
    assert job_connection("audit-archiver", env, tmp_path).password == "from-file"
    assert job_connection("analytics-ingest", env, tmp_path).password == "local-ai"
    same_user = env | {"HANZO_STREAM_SASL_USERNAME": "audit-archiver", "HANZO_STREAM_SASL_PASSWORD": "p"}
    assert job_connection("audit-archiver", same_user, tmp_path).password == "p"
    with pytest.raises(ConnectionError_, match="HANZO_STREAM_PASSWORD_LLM_METRICS"):
        job_connection("llm-metrics", env, tmp_path)


# ---------------------------------------------------------------- spark settings

def test_session_conf_uses_cached_jars_and_modest_local_defaults(registry, tmp_path, monkeypatch):
    jar = tmp_path / "spark-sql-kafka.jar"
    monkeypatch.setattr(spark, "connector_jars", lambda: [jar])
    monkeypatch.setattr(spark, "s3a_jars", lambda: pytest.fail("no s3a jars for a local path"))
    conf = spark.session_conf(load_spec("billing-agg", registry, CONSUMERS, tmp_path), env={})
    assert conf["spark.jars"] == str(jar) and "spark.jars.packages" not in conf
    assert conf["spark.master"] == "local[2]" and conf["spark.sql.shuffle.partitions"] == "4"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.ansi.enabled"] == "true"  # the jobs' tests prove they survive it
    assert not any(k.startswith("spark.hadoop.fs.s3a") for k in conf)
    assert spark.session_conf(load_spec("billing-agg", registry, CONSUMERS, tmp_path),
                              env={"HANZO_STREAM_SPARK_MASTER": "local[1]"})["spark.master"] == "local[1]"


def test_a_local_driver_starts_with_the_local_jit_and_a_submitted_one_with_its_own(
        registry, tmp_path, monkeypatch):
    """Local drivers (local up, the tests) compile with C1 only; bench/ asks for C2; a driver
    that spark-submit started on Kubernetes is left as production runs it."""
    monkeypatch.setattr(spark, "connector_jars", lambda: [])
    monkeypatch.setattr(spark_archive, "spark_jars", lambda: [])
    monkeypatch.setattr(jvm, "archive_path", lambda name, jars: tmp_path / "spark.jsa")
    spec = load_spec("billing-agg", registry, CONSUMERS, tmp_path)
    opts = "spark.driver.extraJavaOptions"
    assert spark.session_conf(spec, env={})[opts] == "-XX:TieredStopAtLevel=1"
    (tmp_path / "spark.jsa").write_bytes(b"")  # spark_archive.build() made it: the driver maps it
    assert spark.session_conf(spec, env={})[opts] == (
        f"-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile={tmp_path / 'spark.jsa'}")
    assert opts not in spark.session_conf(spec, env={"HANZO_STREAM_LOCAL_JIT": "full"})
    assert opts not in spark.session_conf(spec, env={}, submitted=True)
    with pytest.raises(ValueError, match="HANZO_STREAM_LOCAL_JIT='c2': use 'quick'"):
        spark.session_conf(spec, env={"HANZO_STREAM_LOCAL_JIT": "c2"})


def test_s3a_archive_gets_endpoint_and_aws_jars(registry, tmp_path, monkeypatch):
    monkeypatch.setattr(spark, "connector_jars", lambda: [Path("/k.jar")])
    monkeypatch.setattr(spark, "s3a_jars", lambda: [Path("/hadoop-aws.jar"), Path("/sdk.jar")])
    d = _write_spec(tmp_path, "audit-archive", sinks={"archive": {
        "type": "parquet", "path": "s3a://audit/log", "s3": {"endpoint": "http://minio:9000"}}})
    conf = spark.session_conf(load_spec("audit-archive", registry, d, tmp_path), env={})
    assert conf["spark.jars"] == "/k.jar,/hadoop-aws.jar,/sdk.jar"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"
    env = {"HANZO_STREAM_S3_ENDPOINT": "https://storage.hanzo.ai", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
           "AWS_ACCESS_KEY_ID": "AKIA"}
    conf = spark.session_conf(load_spec("audit-archive", registry, d, tmp_path), env=env)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "https://storage.hanzo.ai"
    assert "s3cr3t" not in json.dumps(conf)  # keys reach the JVM's environment, never its conf


def test_the_default_audit_archive_writes_parquet_and_checkpoints_through_s3a(registry, tmp_path):
    spec = load_spec("audit-archive", registry, CONSUMERS, tmp_path)
    assert archive.archive_path(spec, {}) == "s3a://hanzo-audit/audit_log"
    assert spec.checkpoint_for("archive") == "s3a://hanzo-stream/checkpoints/audit-archive/archive"
    assert spark.uses_s3a(spec)


def test_s3_keys_come_from_the_environment_else_the_local_credentials(registry, tmp_path):
    from hanzo_stream.jobs import s3
    from hanzo_stream.local import credentials

    spec = load_spec("audit-archive", registry, CONSUMERS, tmp_path)
    creds = credentials.of_home(tmp_path)
    local = s3.of_spec(spec, {})
    assert (local.access_key, local.secret_key) == (creds.service(credentials.S3_ACCESS_KEY),
                                                    creds.service(credentials.S3_SECRET_KEY))
    assert local.environ() == {"AWS_ACCESS_KEY_ID": local.access_key,
                               "AWS_SECRET_ACCESS_KEY": local.secret_key}
    assert local.secret_key not in repr(local)
    pod = s3.of_spec(spec, {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK",
                            "HANZO_STREAM_S3_ENDPOINT": "http://minio.hanzo:9000"})
    assert (pod.endpoint, pod.access_key, pod.secret_key) == ("http://minio.hanzo:9000", "AK", "SK")
    assert (tmp_path / "credentials.json").stat().st_mode & 0o077 == 0


def test_under_spark_submit_master_and_jars_are_left_alone(registry, tmp_path, monkeypatch):
    monkeypatch.setattr(spark, "connector_jars", lambda: pytest.fail("spark-submit passes --jars"))
    conf = spark.session_conf(load_spec("billing-agg", registry, CONSUMERS, tmp_path), env={},
                              submitted=True)
    assert not {"spark.master", "spark.jars", "spark.driver.memory"} & set(conf)


# ---------------------------------------------------------------- offsets

class FakeConsumer:
    def __init__(self):
        self.commits: list[dict] = []

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})

    def close(self):
        pass


def test_parse_spark_offsets_and_progress():
    assert offsets.parse_offsets('{"t":{"0":5,"1":7}}') == {("t", 0): 5, ("t", 1): 7}
    progress = {"sources": [{"endOffset": {"t": {"0": 9, "1": 3}}}, {"endOffset": '{"t":{"0":4,"1":8}}'}]}
    assert offsets.end_offsets(progress) == {("t", 0): 4, ("t", 1): 3}  # two branches: the minimum
    assert offsets.end_offsets(None) == {}


def test_committer_commits_the_offset_every_query_passed_and_only_changes():
    fake = FakeConsumer()
    c = offsets.OffsetCommitter("audit-archive", None, {"a", "b"}, consumer=fake)
    c.record("a", {("t", 0): 10, ("t", 1): 4})
    assert c.commit() == {}  # b has not reported yet
    c.record("b", {("t", 0): 6, ("t", 1): 9})
    assert c.commit() == {("t", 0): 6, ("t", 1): 4}
    c.record("b", {("t", 0): 7, ("t", 1): 9})
    assert c.commit() == {("t", 0): 7}  # partition 1 unchanged: not re-sent
    assert c.commit() == {}
    assert fake.commits == [{("t", 0): 6, ("t", 1): 4}, {("t", 0): 7}]


def test_committer_never_raises_into_the_listener():
    class Broken(FakeConsumer):
        def commit(self, offsets, asynchronous):
            raise RuntimeError("broker down")

    c = offsets.OffsetCommitter("g", None, {"q"}, consumer=Broken())
    c.record_and_commit("q", {"sources": [{"endOffset": {"t": {"0": 1}}}]})  # logs, no raise
    assert c.pending() == {("t", 0): 1}  # retried with the next batch


def test_offset_log_entry():
    text = 'v1\n{"batchWatermarkMs":1767874800000,"batchTimestampMs":1795359114109,"conf":{}}\n' \
           '{"llm_usage":{"1":5,"0":3}}\n'
    e = offsets.parse_offset_log(text)
    assert (e.watermark_ms, e.timestamp_ms) == (1767874800000, 1795359114109)
    assert e.sources == ({("llm_usage", 0): 3, ("llm_usage", 1): 5},)
    with pytest.raises(ValueError):
        offsets.parse_offset_log("garbage")


# ---------------------------------------------------------------- billing ids

def test_billing_ids_are_deterministic_uuid7s():
    a = billing_id("team", "org", "2026-01-01T10:00:00.000Z")
    assert a == billing_id("team", "org", "2026-01-01T10:00:00.000Z")
    assert len(a) == 64 and int(a, 16) >= 0
    assert a != billing_id("team", "org", "2026-01-01T11:00:00.000Z")
    assert a != billing_id("team", "org2", "2026-01-01T10:00:00.000Z")
    # rpc-billing's digest is the same function over (agent_id, window_start)
    assert settlement_id("agent_7", "2026-11-22T10:00:00.000Z") == hashlib.sha256(
        b"agent_7|2026-11-22T10:00:00.000Z").hexdigest()
    end_ms = 1767265200000
    u = uuid.UUID(event_id(a, end_ms))
    assert u.version == 7 and u.variant == uuid.RFC_4122
    assert u.int >> 80 == end_ms  # the UUIDv7 time is the window end
    assert event_id(a, end_ms) == event_id(a, end_ms) != event_id(a[::-1], end_ms)


# ---------------------------------------------------------------- ClickHouse

def _events(ids: list[str], offset0: int = 0) -> pa.Table:
    n = len(ids)
    ts = pa.array([1_767_261_600_000 + i for i in range(n)], pa.timestamp("ms", "UTC"))
    return pa.table({
        "id": ids, "team_id": ["t1"] * n, "org_id": [None] * n, "event": ["signup"] * n,
        "distinct_id": [f"u{i}" for i in range(n)], "timestamp": ts, "properties": ['{"a":1}'] * n,
        "session_id": [None] * n, "ip": [None] * n,
        "sent_at": pa.array([None] * n, pa.timestamp("ms", "UTC")), "source": ["tests"] * n,
        "_partition": pa.array([0] * n, pa.int32()),
        "_offset": pa.array(range(offset0, offset0 + n), pa.int64()), "_kafka_timestamp": ts})


def test_chdb_sink_absorbs_replays_and_producer_retries(tmp_path):
    sink = clickhouse.ChdbSink(tmp_path / "chdb")
    try:
        batch = _events(["a", "b", "c"])
        token = clickhouse.insert_token("analytics-ingest", {0: (0, 2)})
        sink.write(batch, token)
        sink.write(batch, token)  # the replay of the same batch after a crash
        assert sink.query("SELECT count() AS n FROM events").to_pylist() == [{"n": 3}]
        retry = _events(["c", "d"], offset0=3)  # a producer retried c: new offset, same id
        sink.write(retry, clickhouse.insert_token("analytics-ingest", {0: (3, 4)}))
        assert sink.query("SELECT count() AS n FROM events").to_pylist() == [{"n": 5}]  # unmerged
        # what readers are pointed at, and what the job reports to `local status`: c once
        assert sink.query("SELECT count() AS n FROM events_unique").to_pylist() == [{"n": 4}]
        assert sink.count() == 4
        final = sink.query("SELECT id, _offset FROM events FINAL ORDER BY id").to_pylist()
        assert final == [{"id": i, "_offset": o} for i, o in (("a", 0), ("b", 1), ("c", 3), ("d", 4))]
    finally:
        sink.close()


def test_insert_token_names_exactly_the_offsets():
    t = clickhouse.insert_token("g", {1: (5, 9), 0: (0, 3)})
    assert t == clickhouse.insert_token("g", {0: (0, 3), 1: (5, 9)})
    assert t != clickhouse.insert_token("g", {0: (0, 3), 1: (5, 10)})
    assert t != clickhouse.insert_token("other", {0: (0, 3), 1: (5, 9)})
    ddl = clickhouse.events_ddl()
    assert "ReplacingMergeTree(_offset)" in ddl and "non_replicated_deduplication_window" in ddl


def test_http_sink_sends_the_same_ddl_and_tokens():
    class FakeClient:
        def __init__(self):
            self.calls = []

        def command(self, sql):
            self.calls.append(("command", sql))

        def insert_arrow(self, table, data, settings):
            self.calls.append(("insert", table, data.num_rows, settings))

    client = FakeClient()
    sink = clickhouse.HttpSink("http://ch:8123", client=client)
    sink.write(_events(["a"]), "tok")
    assert client.calls == [("command", clickhouse.events_ddl()),
                            ("command", clickhouse.unique_view_ddl()),
                            ("insert", "events", 1, {"insert_deduplication_token": "tok"})]


# ---------------------------------------------------------------- dead letters

def test_dead_letter_headers_follow_the_contract():
    r = kafka_out.Rejected("llm_usage", 3, 42, b"team-1", b"{bad", "json.malformed", "not JSON", "s")
    rec = r.dead_letter("job:billing-agg", "2026-01-01T00:00:00.000Z")
    h = dict(rec.headers)
    assert (rec.topic, rec.key, rec.value) == (dl.TOPIC, b"llm_usage", b"{bad")
    assert set(h) == set(dl.ALL_HEADERS)
    assert h[dl.H_SOURCE_PARTITION] == b"3" and h[dl.H_SOURCE_OFFSET] == b"42"
    assert h[dl.H_STAGE] == b"job:billing-agg" and h[dl.H_ORIGINAL_KEY] == b"team-1"
    no_key = kafka_out.Rejected("t", 0, 0, None, None, "c", "m")
    assert dl.H_ORIGINAL_KEY not in dict(no_key.dead_letter("s", "t").headers)


def test_dead_letter_header_text_never_fails_to_encode():
    """A lone surrogate in a message must not turn a dead letter into an exception."""
    rec = kafka_out.Rejected("t", 0, 0, None, b"v", "c", "bad \ud800 text").dead_letter("s", "t")
    assert dict(rec.headers)[dl.H_ERROR_MESSAGE] == b"bad \\ud800 text"


def test_a_one_megabyte_value_is_dead_lettered_truncated_not_refused():
    value = bytes(range(256)) * 4096  # 1 MiB: over dead_letter's limit
    out, p, sleeps = _out(FakeProducer())
    out.dead_letter([kafka_out.Rejected("llm_usage", 2, 7, None, value, "json.malformed", "m")],
                    "job:billing-agg", "now")
    out.flush_or_raise()
    ((topic, key, sent, headers),) = p.sent
    h = dict(headers)
    assert (topic, key) == (dl.TOPIC, b"llm_usage")
    assert sent == value[:dl.DEAD_LETTER_MAX_VALUE]
    assert h[dl.H_TRUNCATED] == b"true" and h[dl.H_ORIGINAL_SIZE] == str(len(value)).encode()
    assert h[dl.H_ORIGINAL_SHA256] == hashlib.sha256(value).hexdigest().encode()
    assert (h[dl.H_SOURCE_PARTITION], h[dl.H_SOURCE_OFFSET]) == (b"2", b"7")


def test_the_original_key_counts_toward_the_dead_letter_limit():
    key = b"k" * 1000
    rec = kafka_out.Rejected("t", 0, 0, key, b"x" * dl.DEAD_LETTER_MAX_VALUE, "c", "m").dead_letter("s", "t")
    assert len(rec.value) + len(key) == dl.DEAD_LETTER_MAX_VALUE
    assert dict(rec.headers)[dl.H_ORIGINAL_SIZE] == str(dl.DEAD_LETTER_MAX_VALUE).encode()
    small = kafka_out.Rejected("t", 0, 0, key, b"x" * 10, "c", "m").dead_letter("s", "t")
    assert small.value == b"x" * 10 and dl.H_TRUNCATED not in dict(small.headers)


class FakeProducer:
    """librdkafka's queue, scripted: `full_times` BufferErrors, then per-attempt outcomes."""

    def __init__(self, full_times: int = 0, fail: bool = False, errors: list | None = None):
        self.sent, self.full_times, self.fail = [], full_times, fail
        self.errors = list(errors or [])  # delivery error per produce() call, None = ok
        self.polls = 0

    def produce(self, topic, value, key, headers, on_delivery):
        if self.full_times:
            self.full_times -= 1
            raise BufferError
        self.sent.append((topic, key, value, headers))
        msg = type("M", (), {"topic": lambda _self: topic})()
        err = self.errors.pop(0) if self.errors else ("boom" if self.fail else None)
        on_delivery(err, msg)

    def poll(self, t):
        self.polls += 1
        return 0

    def flush(self, t):
        return 0


def _out(p: FakeProducer, **kw) -> tuple[kafka_out.KafkaOut, FakeProducer, list[float]]:
    """A KafkaOut over `p` that records its backoff waits instead of sleeping."""
    sleeps: list[float] = []
    return kafka_out.KafkaOut(None, "c", producer=p, sleep=sleeps.append, **kw), p, sleeps


def test_kafka_out_waits_out_a_full_queue_and_fails_the_batch_on_errors():
    p = FakeProducer(full_times=2)
    out = kafka_out.KafkaOut(None, "c", producer=p)
    out.dead_letter([kafka_out.Rejected("t", 0, 1, b"k", b"v", "c", "m")], "job:g", "now")
    out.flush_or_raise()
    assert [(t, k, v) for t, k, v, _ in p.sent] == [("dead_letter", b"t", b"v")]
    bad = kafka_out.KafkaOut(None, "c", producer=FakeProducer(fail=True))
    bad.send("billing_events", b"org", b"{}")
    with pytest.raises(kafka_out.DeliveryFailed, match="boom"):
        bad.flush_or_raise()


def test_a_full_queue_that_never_drains_fails_the_batch_in_bounded_time():
    out, p, sleeps = _out(FakeProducer(full_times=10**9), queue_wait_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(kafka_out.DeliveryFailed, match="llm_usage partition 1 offset 9.*queue stayed full"):
        out.dead_letter([kafka_out.Rejected("llm_usage", 1, 9, None, b"v", "c", "m")], "job:g", "now")
    assert time.monotonic() - t0 < 5 and p.polls >= 1 and p.sent == []


def test_retriable_delivery_errors_are_retried_with_backoff_then_succeed():
    from confluent_kafka import KafkaError

    flaky = [KafkaError(KafkaError.NOT_ENOUGH_REPLICAS), KafkaError(KafkaError._MSG_TIMED_OUT), None]
    out, p, sleeps = _out(FakeProducer(errors=flaky), attempts=3, backoff_s=0.25)
    out.dead_letter([kafka_out.Rejected("llm_usage", 0, 5, None, b"v", "c", "m")], "job:g", "now")
    out.flush_or_raise()
    assert len(p.sent) == 3 and p.sent[0] == p.sent[2]  # the very same record each time
    assert sleeps == [0.25, 0.5]


def test_retries_are_bounded_and_the_failure_names_the_record():
    from confluent_kafka import KafkaError

    down = [KafkaError(KafkaError.REQUEST_TIMED_OUT)] * 10
    out, p, sleeps = _out(FakeProducer(errors=down), attempts=3)
    out.dead_letter([kafka_out.Rejected("llm_usage", 4, 1234, None, b"v", "c", "m")], "job:g", "now")
    with pytest.raises(kafka_out.DeliveryFailed) as e:
        out.flush_or_raise()
    assert len(p.sent) == 3
    msg = str(e.value)
    assert "dead_letter record for llm_usage partition 4 offset 1234" in msg
    assert "after 3 attempt(s)" in msg and "REQUEST_TIMED_OUT" in msg
    out.flush_or_raise()  # the failure was reported once; the next batch starts clean


def test_errors_no_retry_can_cure_fail_at_once():
    from confluent_kafka import KafkaError

    out, p, sleeps = _out(FakeProducer(errors=[KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)]))
    out.send("billing_events", b"org-1", b"{}")
    with pytest.raises(kafka_out.DeliveryFailed, match="billing_events record for key b'org-1'.*1 attempt"):
        out.flush_or_raise()
    assert len(p.sent) == 1 and sleeps == []
    assert not kafka_out.retriable("boom")
    assert kafka_out.retriable(KafkaError(KafkaError._TRANSPORT))


# ---------------------------------------------------------------- archive reader

def _log(path: Path, batch: str, files: list[Path], action: str = "add") -> None:
    lines = ["v1"] + [json.dumps({"path": f.as_uri(), "size": 1, "isDir": False,
                                  "modificationTime": 0, "blockReplication": 1,
                                  "blockSize": 1, "action": action}) for f in files]
    (path / "_spark_metadata").mkdir(exist_ok=True)
    (path / "_spark_metadata" / batch).write_text("\n".join(lines) + "\n")


def test_archive_reader_sees_only_committed_files(tmp_path):
    files = []
    for i, (org, date) in enumerate([("o1", "2026-01-01"), ("o2", "2026-01-02"), ("o1", "2026-01-01")]):
        d = tmp_path / f"org_id={org}" / f"date={date}"
        d.mkdir(parents=True, exist_ok=True)
        f = d / f"part-{i}.parquet"
        pq.write_table(pa.table({"id": [f"e{i}"]}), f)
        files.append(f)
    _log(tmp_path, "9.compact", files[:1])
    _log(tmp_path, "3", [tmp_path / "stale-before-compaction.parquet"])
    _log(tmp_path, "10", files[1:2])
    # files[2] is what a failed batch leaves behind: on disk, in no log entry.
    assert archive.committed_files(str(tmp_path)) == [str(files[0]), str(files[1])]
    rows = sorted(archive.read_committed(str(tmp_path)).to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": "e0", "org_id": "o1", "date": "2026-01-01"},
                    {"id": "e1", "org_id": "o2", "date": "2026-01-02"}]
    _log(tmp_path, "11", files[:1], action="delete")
    assert archive.committed_files(str(tmp_path)) == [str(files[1])]


# ---------------------------------------------------------------- processes and CLI

def test_stop_signals_only_a_process_that_is_still_this_job(tmp_path):
    d = tmp_path / "jobs" / "billing-agg"
    d.mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                            "hanzo_stream.jobs.cli", "run", "billing-agg"])
    try:
        for pid in (other.pid, job.pid):  # /proc/<pid>/cmdline is empty until exec finishes
            deadline = time.monotonic() + 10
            while not Path(f"/proc/{pid}/cmdline").read_bytes() and time.monotonic() < deadline:
                time.sleep(0.05)
        (d / "job.json").write_text(json.dumps({"pid": other.pid}))  # a reused pid
        assert process.stop("billing-agg", tmp_path) is False
        assert other.poll() is None
        (d / "job.json").write_text(json.dumps({"pid": job.pid}))
        assert process.status("billing-agg", tmp_path)["running"]
        assert process.stop("billing-agg", tmp_path, timeout=10) is True
        job.wait(5)
        assert not process.status("billing-agg", tmp_path)["running"]
    finally:
        other.kill()
        job.kill()


def test_start_runs_the_cli_as_its_own_session_with_the_state_dir(tmp_path, monkeypatch):
    started = {}

    class FakePopen:
        pid = 4242

        def __init__(self, cmd, **kw):
            started.update(cmd=cmd, **kw)

        def poll(self):
            return 0  # "exited at once": start() stops waiting for the exec

    monkeypatch.setattr(process.subprocess, "Popen", FakePopen)
    left = process.scratch_dir("audit-archive", tmp_path) / "spark-1" / "userFiles-1"
    left.mkdir(parents=True)  # what a SIGKILLed run leaves: Spark cleans up only on a clean exit
    (left / "big.jar").write_bytes(b"x" * 1024)
    pid = process.start("audit-archive", tmp_path, {"HANZO_STREAM_BOOTSTRAP": "b:1"}, once=True)
    assert pid == 4242
    scratch = process.scratch_dir("audit-archive", tmp_path.resolve())
    assert started["env"]["SPARK_LOCAL_DIRS"] == str(scratch)
    assert scratch.is_dir() and not any(scratch.iterdir())  # the killed run's files are gone
    assert started["cmd"][1:5] == ["-m", "hanzo_stream.jobs.cli", "run", "audit-archive"]
    assert "--once" in started["cmd"] and started["start_new_session"] is True
    assert started["env"]["HANZO_STREAM_HOME"] == str(tmp_path.resolve())
    assert started["env"]["HANZO_STREAM_BOOTSTRAP"] == "b:1"
    assert json.loads((tmp_path / "jobs" / "audit-archive" / "job.json").read_text())["pid"] == 4242


def test_a_job_records_its_exit_code_for_local_status(tmp_path, monkeypatch):
    """A job that ends on its own leaves its exit code, even when the runner raised."""
    from hanzo_stream.jobs import runner

    def crash(*a, **kw):
        raise RuntimeError("the JVM died")

    monkeypatch.setenv("HANZO_STREAM_HOME", str(tmp_path))
    args = ["run", "billing-agg", "--registry", str(ROOT / "topics.yaml"), "--consumers", str(CONSUMERS)]
    exit_file = tmp_path / "jobs" / "billing-agg" / "exit.json"
    for outcome, code in ((lambda *a, **kw: 2, 2), (crash, 1)):
        monkeypatch.setattr(runner, "run", outcome)
        assert CliRunner().invoke(app, args).exit_code == code
        assert json.loads(exit_file.read_text())["code"] == code


def test_progress_is_reported_for_local_up(tmp_path, registry):
    from hanzo_stream.jobs.runner import REPORT_FILE, JobContext, report_progress

    spec = load_spec("billing-agg", registry, CONSUMERS, tmp_path)
    spec.state_dir.mkdir(parents=True)
    ctx = JobContext(None, spec, registry, None)
    ctx.report(clickhouse_rows=5)
    report_progress(ctx, {"name": "billing-agg.aggregate", "batchId": 7})
    got = json.loads((spec.state_dir / REPORT_FILE).read_text())
    assert got["clickhouse_rows"] == 5 and got["progress_batch"] == 7
    assert got["progress_at"] <= time.time()


def test_cli_lists_and_shows_jobs_with_registry_facts():
    runner = CliRunner()
    listed = runner.invoke(app, ["list", "--consumers", str(CONSUMERS)])
    assert listed.exit_code == 0 and listed.stdout.split() == JOBS
    shown = runner.invoke(app, ["show", "billing-agg", "--registry", str(ROOT / "topics.yaml"),
                                "--consumers", str(CONSUMERS)])
    assert shown.exit_code == 0, shown.output
    assert "billing-aggregator" in shown.stdout and "llm_usage" in shown.stdout
    assert "billing_events" in shown.stdout
    missing = runner.invoke(app, ["show", "nope", "--registry", str(ROOT / "topics.yaml"),
                                  "--consumers", str(CONSUMERS)])
    assert missing.exit_code == 1


def test_main_cli_mounts_the_jobs_group():
    from hanzo_stream.cli import app as main_app

    result = CliRunner().invoke(main_app, ["jobs", "--help"])
    assert result.exit_code == 0 and "run" in result.stdout


def test_job_modules_import_without_a_running_spark():
    from hanzo_stream.jobs.runner import load_job_module

    t = time.time()
    for name in ("analytics_ingest", "billing_agg", "audit_archive", "rpc_billing"):
        assert callable(load_job_module(ROOT / "spark" / f"{name}.py").build)
    assert time.time() - t < 30


def test_commit_waits_out_a_loading_coordinator_but_not_an_acl_error():
    from confluent_kafka import KafkaError, KafkaException

    class Loading(FakeConsumer):
        def __init__(self, fail_with, times):
            super().__init__()
            self.fail_with, self.times = fail_with, times

        def commit(self, offsets, asynchronous):
            if self.times:
                self.times -= 1
                raise KafkaException(KafkaError(self.fail_with))
            super().commit(offsets, asynchronous)

    slow = Loading(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, 2)
    c = offsets.OffsetCommitter("g", None, {"q"}, consumer=slow)
    c.record("q", {("t", 0): 5})
    assert c.commit() == {("t", 0): 5} and slow.commits == [{("t", 0): 5}]
    denied = Loading(KafkaError.GROUP_AUTHORIZATION_FAILED, 1)
    c = offsets.OffsetCommitter("g", None, {"q"}, consumer=denied)
    c.record("q", {("t", 0): 5})
    with pytest.raises(KafkaException):
        c.commit()


def test_job_report_merges_numbers_for_local_status(tmp_path, registry):
    from hanzo_stream.jobs.runner import REPORT_FILE, JobContext

    spec = load_spec("analytics-ingest", registry, ROOT / "consumers", tmp_path)
    spec.state_dir.mkdir(parents=True)
    ctx = JobContext(spark=None, spec=spec, registry=registry, conn=None)
    ctx.report(clickhouse_rows=10)
    ctx.report(batches=2)
    ctx.report(clickhouse_rows=25)
    got = json.loads((spec.state_dir / REPORT_FILE).read_text())
    assert got["clickhouse_rows"] == 25 and got["batches"] == 2 and got["at"] > 0
    assert [f.name for f in spec.state_dir.iterdir()] == [REPORT_FILE]  # no temp file left


def test_shutdown_waits_for_a_listener_commit_in_flight_and_commits_the_final_offsets(caplog):
    """The CI failure of issue 11: a --once run logged "could not commit offsets for group
    audit-archive: Consumer closed". The listener's commit of an earlier batch was still
    waiting out the coordinator (_commit_retrying) when the run's final commit finished and
    shutdown closed the consumer under it. Shutdown must wait for that commit, commit the
    final offsets after it (never before: the group would go backwards) and close only then."""
    import threading

    from confluent_kafka import KafkaError, KafkaException

    class ClosableConsumer(FakeConsumer):
        """Like confluent-kafka's: a commit after close() raises RuntimeError('Consumer closed').
        The first commit meets a coordinator that is not ready yet (retried after 0.5 s)."""

        def __init__(self):
            super().__init__()
            self.closed = False
            self.first_refused = threading.Event()

        def commit(self, offsets, asynchronous):
            if self.closed:
                raise RuntimeError("Consumer closed")
            if not self.first_refused.is_set():
                self.first_refused.set()
                raise KafkaException(KafkaError(KafkaError._WAIT_COORD, "coordinator not ready"))
            super().commit(offsets, asynchronous)

        def close(self):
            self.closed = True

    consumer = ClosableConsumer()
    c = offsets.OffsetCommitter("audit-archive", None, {"archive"}, consumer=consumer)
    batch = {"sources": [{"endOffset": {"audit_log": {"0": 5}}}]}
    listener = threading.Thread(target=c.record_and_commit, args=("archive", batch))
    listener.start()  # the listener thread, with the progress of an earlier batch
    assert consumer.first_refused.wait(10)  # its commit is in flight, waiting for the coordinator
    c.record("archive", {("audit_log", 0): 9})  # the run's final progress
    with caplog.at_level("INFO", logger="hanzo_stream.jobs"):
        assert c.finish(timeout=30) is True
        listener.join(10)
    assert not listener.is_alive()
    problems = [r.getMessage() for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    assert problems == []
    assert consumer.commits == [{("audit_log", 0): 5}, {("audit_log", 0): 9}]  # never backwards
    assert consumer.closed


def test_a_final_commit_that_fails_is_reported_with_the_offsets_it_left(caplog):
    from confluent_kafka import KafkaError, KafkaException

    class Denied(FakeConsumer):
        def commit(self, offsets, asynchronous):
            raise KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))

    c = offsets.OffsetCommitter("audit-archive", None, {"archive"}, consumer=Denied())
    c.record("archive", {("audit_log", 0): 9, ("audit_log", 1): 4})
    with caplog.at_level("INFO", logger="hanzo_stream.jobs"):
        assert c.finish(timeout=30) is False
    (error,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "final offsets of group audit-archive were NOT committed" in error
    assert "GROUP_AUTHORIZATION_FAILED" in error and "audit_log[0]=9, audit_log[1]=4" in error
    assert c.close() is False  # closing again changes nothing and still says so


def test_a_spark_jobs_metrics_follow_its_queries_progress():
    from prometheus_client import CollectorRegistry, generate_latest

    from hanzo_stream.jobs.progress_metrics import ProgressMetrics

    m = ProgressMetrics("billing-agg")
    reg = CollectorRegistry()
    reg.register(m)
    base = {"name": "billing", "timestamp": "2026-11-27T03:00:00.000Z", "batchDuration": 4850,
            "numInputRows": 200_000, "inputRowsPerSecond": 25_000.0,
            "processedRowsPerSecond": 41_237.1,
            "stateOperators": [{"numRowsTotal": 120, "memoryUsedBytes": 65_536,
                                "numRowsDroppedByWatermark": 2,
                                "customMetrics": {"numDroppedDuplicateRows": 5}},
                               {"numRowsTotal": 3, "memoryUsedBytes": 1_024}]}
    m.update(base)
    m.update(base | {"numInputRows": 0, "inputRowsPerSecond": "NaN", "batchDuration": 12})
    text = generate_latest(reg).decode()
    at = '{query="billing",spark_job="billing-agg"}'
    for line in (f"hanzo_stream_spark_batch_duration_seconds{at} 0.012",
                 f"hanzo_stream_spark_input_rows_per_second{at} 0.0",  # NaN: no rows
                 f"hanzo_stream_spark_processed_rows_per_second{at} 41237.1",
                 f"hanzo_stream_spark_state_rows{at} 123.0",
                 f"hanzo_stream_spark_state_bytes{at} 66560.0",
                 f"hanzo_stream_spark_input_rows_total{at} 200000.0",
                 f"hanzo_stream_spark_batches_total{at} 2.0",
                 # per batch in the progress, summed over batches: counters
                 f"hanzo_stream_spark_duplicates_dropped_total{at} 10.0",
                 f"hanzo_stream_spark_late_rows_dropped_total{at} 4.0",
                 f"hanzo_stream_spark_last_progress_timestamp_seconds{at} 1795748400"):
        name = line.split("{")[0]
        got = [ln for ln in text.splitlines() if ln.startswith(name + "{")]
        assert got and float(got[0].rsplit(" ", 1)[1]) == float(line.rsplit(" ", 1)[1]), (line, got)
