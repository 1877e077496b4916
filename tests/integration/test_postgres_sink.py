"""The settlement jobs' postgres sink against a real PostgreSQL (Debian's, run by
hanzo_stream/local/postgres.py): migrations, the table check, exactly-once upserts, and a
server that goes away for a moment. The crash between the Kafka write and this one is in
test_spark_jobs.py (test_settlement_jobs_survive_a_crash_with_exact_totals)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from decimal import Decimal
from urllib.parse import quote

import psycopg
import pytest

from hanzo_stream.jobs import postgres as sink
from hanzo_stream.local import credentials
from hanzo_stream.local import postgres as server

pytestmark = pytest.mark.integration

FIELDS = ("billing_id", "team_id", "org_id", "window_start", "window_end", "prompt_tokens",
          "completion_tokens", "total_tokens", "cost_usd", "cost_micros", "request_count")


@pytest.fixture
def schema_dsn(postgres_server):
    """A schema of the test's own (the role owns the database), as the DSN's search path."""
    name = f"t_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    sep = "&" if "?" in postgres_server.dsn else "?"
    yield f"{postgres_server.dsn}{sep}options={quote(f'-csearch_path={name}')}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {name} CASCADE")


def record(bid: str, cost: str, n: int = 3) -> bytes:
    return (f'{{"id": "{uuid.uuid5(uuid.NAMESPACE_OID, bid)}", "data": {{"billing_id": "{bid}", '
            f'"team_id": "t", "org_id": "o", "window_start": "2038-07-08T09:00:00.000Z", '
            f'"window_end": "2038-07-08T10:00:00.000Z", "prompt_tokens": {n}, '
            f'"completion_tokens": 1, "total_tokens": {n + 1}, "cost_usd": {cost}, '
            f'"cost_micros": 1, "request_count": {n}}}}}').encode()


def test_migrations_apply_once_even_when_two_jobs_start_together(schema_dsn):
    results: list[list[str]] = []

    def one() -> None:
        with sink.connect(schema_dsn) as conn:
            results.append(sink.migrate(conn))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    versions = [v for v, _ in sink.migrations()]
    assert sorted(results, key=len) == [[], versions]  # the advisory lock: one applies, one sees
    with sink.connect(schema_dsn) as conn:
        assert sink.migrate(conn) == []


def test_replayed_rows_are_no_ops_and_a_changed_one_is_reported(schema_dsn, caplog):
    t = sink.PostgresSink("postgres", schema_dsn, "billing_usage_hourly", FIELDS, "spec: sinks.postgres")
    t.prepare()
    batch = [record(f"b{i}", "0.100000000001", i) for i in range(50)]
    assert t.write(batch) == (50, 0)
    with sink.connect(schema_dsn) as conn:
        first = conn.execute("SELECT billing_id, written_at FROM billing_usage_hourly").fetchall()
    assert t.write(batch) == (0, 0)  # Spark's replay of the batch: nothing moves
    with sink.connect(schema_dsn) as conn:
        assert conn.execute("SELECT billing_id, written_at FROM billing_usage_hourly").fetchall() == first
        total = conn.execute("SELECT sum(cost_usd) FROM billing_usage_hourly").fetchone()[0]
    assert total == Decimal("5.00000000005")  # 50 x 0.100000000001, exact
    with caplog.at_level(logging.ERROR, logger="hanzo_stream.jobs"):
        assert t.write([record("b7", "0.2", 7), record("b50", "1", 1)]) == (1, 1)
    assert "1 row(s) of billing_usage_hourly changed on rewrite" in caplog.text


@pytest.mark.parametrize("ddl, message", [
    ("", "table 'billing_usage_hourly' does not exist"),
    ("CREATE TABLE billing_usage_hourly (billing_id text PRIMARY KEY, team_id text)",
     r"lacks column\(s\) org_id, window_start"),
    (f"CREATE TABLE billing_usage_hourly ({', '.join(f'{f} text' for f in FIELDS)}, event_id uuid, "
     "PRIMARY KEY (team_id, org_id))", r"must have the primary key \(billing_id\)"),
])
def test_a_table_that_does_not_fit_fails_the_job_at_start_with_the_fix(schema_dsn, ddl, message):
    with sink.connect(schema_dsn) as conn:
        if ddl:
            conn.execute(ddl)
            conn.commit()
        with pytest.raises(sink.PostgresSinkError, match=message) as e:
            sink.check_table(conn, "billing_usage_hourly", (*FIELDS, sink.EVENT_ID), "spec: sinks.pg")
    assert str(e.value).startswith("spec: sinks.pg: ") and "postgres_migrations/" in str(e.value)


def test_a_write_waits_out_a_server_restart_and_gives_up_after_its_bound(postgres_server, schema_dsn,
                                                                        monkeypatch):
    t = sink.PostgresSink("postgres", schema_dsn, "billing_usage_hourly", FIELDS, "spec")
    t.prepare()
    creds = credentials.of_home(postgres_server.home)
    server.stop(postgres_server.home)
    restart = threading.Timer(3.0, server.start, (postgres_server.home, creds))
    restart.start()
    began = time.monotonic()
    try:
        assert t.write([record("r1", "1.5")]) == (1, 0)
    finally:
        restart.join(60)
    assert time.monotonic() - began >= 3.0
    server.stop(postgres_server.home)
    monkeypatch.setattr(sink, "RETRY_S", 2.0)
    try:
        with pytest.raises(sink.PostgresSinkError, match="PostgreSQL unreachable for 2s"):
            t.write([record("r2", "1.5")])
    finally:
        server.start(postgres_server.home, creds)
    assert t.write([record("r2", "1.5")]) == (1, 0)
