"""The local platform without processes: the demo's events, the component list, the watch's
judgement of "working". The real thing runs in tests/integration/test_local_platform.py."""

from __future__ import annotations

import base64
import io
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from hanzo_stream.client.router import Accepted, Refused, Router
from hanzo_stream.jobs import process
from hanzo_stream.local import demo, kafka, platform
from hanzo_stream.local.cli import component_line
from hanzo_stream.schemas.store import load
from hanzo_stream.schemas.validator import Validator

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def router(registry) -> Router:
    return Router(registry, Validator(load(ROOT / "schemas")))


@pytest.mark.parametrize("service", sorted(demo.SERVICES))
def test_demo_events_are_valid_and_land_on_the_registry_topic(router, registry, service):
    rng = random.Random(7)
    for _ in range(300):
        event = demo.MAKERS[service](rng, datetime.now(UTC))
        out = router.route_event(event)
        assert isinstance(out, Accepted), out
        assert service in registry.topic(out.topic).producers


@pytest.mark.parametrize("service", sorted(demo.SERVICES))
def test_demo_breaks_events_both_ways(router, service):
    rng = random.Random(11)
    event = demo.MAKERS[service](rng, datetime.now(UTC))
    refused = router.route_event(demo.broken_for_client(event))
    assert isinstance(refused, Refused), refused
    raw = router.route_bytes(demo.broken_raw(event), None, b"legacy")
    assert isinstance(raw, Refused)
    assert raw.error.error_class in ("json.malformed", "key.missing"), raw.error


def test_demo_weights_cover_every_producing_service(registry):
    jobs = {g.principal for g in registry.groups}  # jobs write their outputs, not demo traffic
    producers = {p for t in registry.topics for p in t.producers} - {"*"} - jobs
    assert set(demo.SERVICES) == producers  # a new producing service gets demo traffic too
    assert sum(demo.SERVICES.values()) == pytest.approx(1.0)


def test_components_start_in_dependency_order_with_one_per_job(registry):
    names = [c.name for c in platform.components(registry)]
    jobs = sorted(p.stem for p in (ROOT / "consumers").glob("*.yaml"))
    assert names == ["kafka", "reconcile", "schema-registry", "schemas", "object-store", "postgres",
                     "kafka-exporter", "dead-letter-monitor", "pager", "alertmanager", "prometheus",
                     *jobs, "demo"]


def _ctx(registry, tmp_path: Path) -> platform.Context:
    return platform.Context(tmp_path, registry, Console(quiet=True))


def test_working_needs_growth_since_the_watch_began(registry, tmp_path):
    ctx = _ctx(registry, tmp_path)
    before = {"lag": {}, "clickhouse_rows": 100, "audit_objects": 3, "dead_letters": 5, "billing_events": 0,
              "llm_requests": 7}
    now = {"lag": {"analytics-ingest": 0, "billing-agg": 4, "llm-metrics": 0, "rpc-billing": 1},
           "clickhouse_rows": 100, "audit_objects": 4, "dead_letters": 9, "billing_events": 0,
           "llm_requests": 7, "settlements": 3, "billing_rows": 0}
    assert platform.working(ctx, now, before) == [
        "lag of audit-archive", "new rows in ClickHouse", "new LLM metrics", "billing windows",
        "billing rows in PostgreSQL"]
    now |= {"lag": {"analytics-ingest": 0, "billing-agg": 4, "audit-archive": 0, "llm-metrics": 0,
                    "rpc-billing": 1},
            "clickhouse_rows": 101, "billing_events": 2, "llm_requests": 8, "billing_rows": 2}
    assert platform.working(ctx, now, before) == []
    assert platform.working(ctx, now | {"settlements": None}, before) == ["RPC settlements"]


def test_nothing_counts_as_working_from_an_empty_snapshot(registry, tmp_path):
    missing = platform.working(_ctx(registry, tmp_path), {})
    assert len(missing) == len(platform.list_specs(ROOT / "consumers")) + 7  # lag of each job + 7 sinks


def test_up_refuses_unknown_components(registry, tmp_path):
    with pytest.raises(ValueError, match="unknown component.*known: kafka, reconcile"):
        platform.up(_ctx(registry, tmp_path), {"kafak"})


def test_cluster_ids_are_kraft_uuids_that_kafka_storage_can_parse():
    """1 in 64 raw base64 uuids starts with "-", which kafka-storage reads as an option."""
    ids = [kafka.random_uuid() for _ in range(5000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)


def test_every_service_breaks_events_both_ways_early_and_one_in_forty():
    """Counted, not drawn: each dead-letter stage gets records within a service's first 80 events."""
    first = [demo.breakage(n) for n in range(1, 2 * demo.INVALID_EVERY + 1)]
    assert first.count("client") == first.count("raw") == 1
    ways = [demo.breakage(n) for n in range(1, 4001)]
    assert ways.count(None) == 4000 - 100 and ways.count("client") == ways.count("raw") == 50


# ---------------------------------------------------------------- a job that dies must show

DIES = "import sys; print('ERROR hanzo_stream.jobs: SASL authentication failed for billing-aggregator'); " \
       "print('shutting down'); sys.exit(3)"
PROGRESSES = ("import json, os, pathlib, time; time.sleep(0.3); "
              "d = pathlib.Path(os.environ['HANZO_STREAM_HOME'], 'jobs', 'billing-agg'); "
              "(d / 'report.json').write_text(json.dumps({'progress_at': time.time()})); time.sleep(60)")


@pytest.fixture
def fake_jobs(monkeypatch):
    """process.start for real, but the command is `python -c SCRIPT <the job's marker args>`:
    /proc shows the job's marker, so the pid checks treat it as the job."""
    script = {"code": DIES}
    real = subprocess.Popen
    monkeypatch.setattr(platform, "_job_env", lambda ctx: {})
    monkeypatch.setattr(process.subprocess, "Popen",
                        lambda cmd, **kw: real([sys.executable, "-c", script["code"], *cmd[2:]], **kw))
    return script


def _console() -> Console:
    return Console(record=True, width=300, file=io.StringIO())


def _recording_ctx(registry, tmp_path: Path, settle_s: float = 20) -> platform.Context:
    return platform.Context(tmp_path, registry, _console(), settle_s=settle_s)


def test_up_shows_a_job_that_dies_at_start_as_failed_with_its_log(registry, tmp_path, fake_jobs):
    ctx = _recording_ctx(registry, tmp_path)
    assert platform.up(ctx, {"billing-agg"}) == ["billing-agg"]
    out = ctx.console.export_text()
    assert "✗ billing-agg" in out and "✓" not in out
    assert "exited (code 3)" in out and "SASL authentication failed" in out
    st = process.status("billing-agg", tmp_path)
    assert (st["running"], st["state"], st["exit_code"]) == (False, "failed", 3)
    assert "SASL authentication failed" in st["last_log_line"]  # the error, not the last line
    line = _console()
    line.print(component_line("billing-agg", st))
    text = line.export_text()
    assert "failed (exit code 3)" in text and "last: ERROR hanzo_stream.jobs: SASL" in text


def test_a_failed_spark_query_shows_its_cause_not_its_plan():
    """A query that failed ends its log with the plan, hundreds of lines after the exception;
    `status` shows the last exception raised (what on-call needs), not a line of the plan."""
    from hanzo_stream.jobs.process import _last_error

    cause = ("chdb._exceptions.ChdbError: Code: 1001. DB::Exception: filesystem error: in "
             "create_directories: Read-only file system [/data/store/tmp_insert_1]")
    tail = ["Traceback (most recent call last):", '  File "clickhouse.py", line 99, in write',
            cause, "", "=== Streaming Query ===", "Current State: ACTIVE", "Logical Plan:",
            *[f"{'   ' * i}+- ~Project [topic#9, partition#10]" for i in range(300)],
            "   +- ~StreamingDataSourceV2ScanRelation[key#7, value#8] KafkaTable"]
    assert _last_error(tail) == cause
    assert _last_error(["ERROR hanzo_stream.jobs: SASL authentication failed", "bye"]).startswith(
        "ERROR hanzo_stream.jobs: SASL")  # no exception raised: the line naming the error
    assert _last_error(["all", "quiet"]) == "quiet"


def test_up_ticks_a_job_at_its_first_progress_and_down_makes_it_stopped(registry, tmp_path, fake_jobs):
    fake_jobs["code"] = PROGRESSES
    ctx = _recording_ctx(registry, tmp_path, settle_s=30)
    try:
        t0 = time.monotonic()
        assert platform.up(ctx, {"billing-agg"}) == []
        assert time.monotonic() - t0 < 15  # ended at the progress, not at settle_s
        assert "✓ billing-agg" in ctx.console.export_text()
        assert process.status("billing-agg", tmp_path)["state"] == "running"
    finally:
        assert process.stop("billing-agg", tmp_path, timeout=10)
    st = process.status("billing-agg", tmp_path)
    assert (st["running"], st["state"]) == (False, "stopped") and "exit_code" not in st


def test_up_waits_a_bounded_time_for_a_slow_job(registry, tmp_path, fake_jobs):
    fake_jobs["code"] = "import time; time.sleep(60)"
    ctx = _recording_ctx(registry, tmp_path, settle_s=1)
    try:
        t0 = time.monotonic()
        assert platform.up(ctx, {"billing-agg"}) == []
        assert time.monotonic() - t0 < 10
    finally:
        process.stop("billing-agg", tmp_path, timeout=10)


def test_a_once_job_that_finished_cleanly_is_not_failed(tmp_path, monkeypatch):
    real = subprocess.Popen
    monkeypatch.setattr(process.subprocess, "Popen",
                        lambda cmd, **kw: real([sys.executable, "-c", "pass", *cmd[2:]], **kw))
    process.start("audit-archive", tmp_path, {}, once=True)
    assert process.wait("audit-archive", tmp_path, 10)
    assert process.status("audit-archive", tmp_path) | {"pid": None} == {
        "running": False, "pid": None, "log": str(process.log_file("audit-archive", tmp_path.resolve())),
        "state": "exited", "exit_code": 0}
    assert process.status("nope", tmp_path)["state"] == "not started"
