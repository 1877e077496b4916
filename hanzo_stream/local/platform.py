"""`hanzo-stream local up/down/status/env`: the whole platform as processes on this machine.

Components start in dependency order; each is a (start, stop, status) triple so the whole
platform and `--only kafka` share one code path. Every process keeps its pid, port and log
under state_dir(), so `up` is safe to re-run and `down` works from another shell. The jobs
come from consumers/ (one component per spec), the principals and topics from topics.yaml.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..artifacts import jars
from ..core import state
from ..core.connection import ENV, Connection
from ..core.paths import state_dir
from ..jobs import chdb_http, process
from ..jobs.spec import list_specs
from ..monitoring import JMX_RULES_FILE
from ..registry import Registry
from ..registry.platform import LAG_EXPORTER
from . import (
    alertmanager,
    credentials,
    dead_letter_monitor,
    kafka,
    kafka_exporter,
    object_store,
    pager,
    postgres,
    prometheus,
    schema_registry,
)
from .daemon import Daemon, managed

DEMO = "demo"
JOBS_SCRAPE = "hanzo-stream-jobs"  # Prometheus job of the consumer jobs' own /metrics
DEMO_RATE_ENV = "HANZO_STREAM_DEMO_RATE"  # events/s over all services; default 20
JOB_LOG_LINES = 15  # of a job that died, shown by `up`
JOB_SETTLE_S = 30.0  # how long `up` watches a started job for its first progress
SQL_JOB = "analytics-ingest"  # the job whose driver owns the embedded ClickHouse (`local sql`)


@dataclass
class Context:
    home: Path
    registry: Registry
    console: Console
    brokers: int | None = None  # a new cluster's size (default 1); a running one keeps its own
    settle_s: float = JOB_SETTLE_S

    @property
    def root(self) -> Path:
        return checkout(self.registry)

    @property
    def consumers(self) -> Path:
        return self.root / "consumers"

    @property
    def credentials_file(self) -> Path:
        return state.credentials_file(self.home)

    @property
    def creds(self) -> credentials.Credentials:
        return credentials.of_home(self.home, self.registry.principal_names())

    @property
    def cluster(self) -> kafka.LocalCluster:
        c = kafka.LocalCluster.load(self.home / "kafka")
        if c is None:
            raise RuntimeError("the local broker was never started: run `hanzo-stream local up`")
        return c

    def connection(self, principal: str = "admin", mechanism: str = "SCRAM-SHA-512") -> Connection:
        return self.cluster.connection(principal, self.creds.password(principal), mechanism)

    def require(self, what: str, url: str | None) -> str:
        if not url:
            raise RuntimeError(f"{what} is not running: start it first (`hanzo-stream local up`)")
        return url


def checkout(registry: Registry) -> Path:
    """topics.yaml's folder, which holds schemas/, consumers/ and spark/ beside it."""
    return Path(registry.path).resolve().parent


@dataclass(frozen=True)
class Component:
    name: str
    start: Callable[[Context], str]  # returns a one-line summary
    stop: Callable[[Context], object]
    status: Callable[[Context], dict[str, Any]]
    asks_cluster: bool = False  # its status is a round trip to the broker or registry, not a pid
    # After start: why it is not up (it died), or None. Only processes that can die right
    # after starting (the jobs) need one; the others' start() fails when they fail.
    check: Callable[[Context], str | None] | None = None


# ---------------------------------------------------------------- the broker and the registry

def _kafka_start(ctx: Context) -> str:
    c = kafka.start(ctx.home / "kafka", ctx.creds, brokers=ctx.brokers,
                    jmx_agent=(jars.jmx_exporter_agent(), JMX_RULES_FILE))
    return f"{len(c.nodes)} broker(s) at {c.bootstrap} (SASL_SSL, TLS 1.3, ACLs); logs: " + ", ".join(
        map(str, c.log_files()))


def _kafka_status(ctx: Context) -> dict[str, Any]:
    c = kafka.LocalCluster.load(ctx.home / "kafka")
    alive = kafka.running(ctx.home / "kafka")
    return {"running": kafka.is_running(ctx.home / "kafka"),
            "bootstrap": c.bootstrap if c else None,
            "cpu_seconds": round(sum(state.session_cpu(n["pid"]) for n in c.nodes
                                     if n["node_id"] in alive), 1) if c and alive else None,
            "logs": [str(p) for p in c.log_files()] if c else []}


def _reconcile_start(ctx: Context) -> str:
    from ..reconcile import CountingAdmin, reconcile

    with CountingAdmin.connect(ctx.connection()) as admin:
        plan, result = reconcile(admin, ctx.registry, dict(ctx.creds.principals))
    if plan.errors:
        raise RuntimeError("registry plan refused:\n" + "\n".join(plan.errors))
    if not result.ok:
        raise RuntimeError("apply failed:\n" + "\n".join(f"{c.describe()}: {m}"
                                                         for c, m in result.failed))
    return f"applied {len(result.applied)} change(s) from {ctx.registry.path}"


def _reconcile_status(ctx: Context) -> dict[str, Any]:
    from ..reconcile import CountingAdmin, Options, plan

    if not kafka.is_running(ctx.home / "kafka"):
        return {"converged": None}
    with CountingAdmin.connect(ctx.connection()) as admin:
        p = plan(admin, ctx.registry, Options(available_passwords=frozenset(ctx.creds.principals)))
    return {"converged": not p.changes and not p.errors, "pending_changes": len(p.changes),
            "topics": len(ctx.registry.topics)}


def _registry_start(ctx: Context) -> str:
    url = schema_registry.start(ctx.home / "schema-registry")
    return f"Apicurio {schema_registry.APICURIO_VERSION} (Confluent API) at {url}"


def _schemas_start(ctx: Context) -> str:
    from ..schemas.register import client, sync
    from ..schemas.store import load

    url = ctx.require("the schema registry", schema_registry.url(ctx.home / "schema-registry"))
    outcomes = sync(client(url), load(ctx.root / "schemas"), ctx.registry)
    refused = [o for o in outcomes if o.action == "refused"]
    if refused:
        raise RuntimeError("schemas refused by the registry:\n" + "\n".join(
            f"{o.subject}: {o.detail}" for o in refused))
    return f"{len(outcomes)} subject(s) registered (BACKWARD), {sum(o.changed for o in outcomes)} changed"


def _schemas_status(ctx: Context) -> dict[str, Any]:
    url = schema_registry.url(ctx.home / "schema-registry")
    if not url:
        return {"subjects": None}
    from ..schemas.register import client

    return {"subjects": len(client(url).get_subjects())}


# ---------------------------------------------------------------- object storage

def _buckets(ctx: Context) -> set[str]:
    """Every bucket a job spec names (checkpoints, sinks): created on the local store."""
    from ..jobs import s3
    from ..jobs.spec import load_spec

    out = set()
    for name in list_specs(ctx.consumers):
        spec = load_spec(name, ctx.registry, ctx.consumers, ctx.home)
        for path in [spec.checkpoint, *(str(k.get("path", "")) for k in spec.sinks.values())]:
            if s3.is_s3(path):
                out.add(s3.split(path)[0])
    return out


def _object_store_start(ctx: Context) -> str:
    buckets = _buckets(ctx)
    url = object_store.start(ctx.home / object_store.NAME, ctx.creds, buckets)
    return (f"s3proxy (S3 API, filesystem backend) at {url}, bucket(s) {', '.join(sorted(buckets))}; "
            f"keys in {state.credentials_file(ctx.home)}")


def _postgres_start(ctx: Context) -> str:
    url = postgres.start(ctx.home, ctx.creds)
    return (f"PostgreSQL at {url} (role {postgres.ROLE}): billing-agg and rpc-billing upsert "
            "their hourly records here too")


# ---------------------------------------------------------------- monitoring

def _exporter_start(ctx: Context) -> str:
    url = kafka_exporter.start(ctx.home / "exporter", ctx.connection(LAG_EXPORTER))
    return f"consumer lag (kafka_exporter names) at {url}/metrics, as principal {LAG_EXPORTER}"


def _monitor_start(ctx: Context) -> str:
    principal = ctx.registry.group(dead_letter_monitor.NAME).principal
    url = dead_letter_monitor.start(ctx.home / dead_letter_monitor.NAME, ctx.connection(principal),
                                    Path(ctx.registry.path))
    return (f"dead letters by source topic, stage and error class at {url}/metrics, "
            f"as principal {principal}")


def _routing_key(ctx: Context) -> str:
    return (os.environ.get(alertmanager.ROUTING_KEY_ENV)
            or ctx.creds.service(credentials.PAGERDUTY_ROUTING_KEY))


def _pager_start(ctx: Context) -> str:
    if os.environ.get(alertmanager.URL_ENV):
        return f"not needed: pages go to {os.environ[alertmanager.URL_ENV]}"
    url = pager.start(ctx.home / pager.NAME, _routing_key(ctx))
    return f"PagerDuty Events API v2 endpoint at {url}; pages in {ctx.home / pager.NAME / pager.PAGES}"


def _alertmanager_start(ctx: Context) -> str:
    target = os.environ.get(alertmanager.URL_ENV) or ctx.require(
        "the local PagerDuty endpoint", pager.url(ctx.home / pager.NAME))
    url = alertmanager.start(ctx.home / alertmanager.NAME, _routing_key(ctx), target)
    return f"{url} routing every alert to PagerDuty (Events API v2) at {target}"


def _prometheus_start(ctx: Context) -> str:
    monitor = dead_letter_monitor.url(ctx.home / dead_letter_monitor.NAME)
    extra = [prometheus.ScrapeJob.from_urls(dead_letter_monitor.NAME, [monitor])] if monitor else []
    if registry := schema_registry.url(ctx.home / "schema-registry"):  # Apicurio's /metrics
        extra.append(prometheus.ScrapeJob.from_urls(schema_registry.NAME, [registry]))
    # Jobs with their own /metrics (llm-metrics) announce their port in a file_sd target file.
    extra.append(prometheus.ScrapeJob(JOBS_SCRAPE, (), file_sd=str(_scrape_targets(ctx) / "*.json")))
    jobs = prometheus.platform_jobs(ctx.cluster.jmx_ports, kafka_exporter.url(ctx.home / "exporter"),
                                    extra)
    am = alertmanager.url(ctx.home / alertmanager.NAME)
    url = prometheus.start(ctx.home / "prometheus", jobs, alertmanagers=[am] if am else [])
    return (f"{url} scraping {', '.join(j.name for j in jobs)}, with the project's alert rules"
            + (f", alerting to {am}" if am else ""))


# ---------------------------------------------------------------- the jobs and the demo

def _scrape_targets(ctx: Context) -> Path:
    return ctx.home / "prometheus" / "targets"


def _job_env(ctx: Context) -> dict[str, str]:
    """The cluster without a principal: each job logs in as its own (credentials.json).
    A job serving /metrics listens on a free local port and announces it to Prometheus."""
    from ..jobs.consumer import LISTEN_ENV, TARGETS_ENV
    from ..jobs.postgres import DSN_ENV

    conn = ctx.cluster.connection("", "")
    pg = postgres.dsn(ctx.home, ctx.creds)
    return {var: str(getattr(conn, f)) for f, var in ENV.items()
            if f not in ("username", "password")} | {
        "HANZO_STREAM_HOME": str(ctx.home), LISTEN_ENV: "127.0.0.1:0",
        TARGETS_ENV: str(_scrape_targets(ctx))} | ({DSN_ENV: pg} if pg else {})


def _job(name: str) -> Component:
    def start(ctx: Context) -> str:
        pid = process.start(name, ctx.home, _job_env(ctx), registry=Path(ctx.registry.path),
                            consumers=ctx.consumers, cwd=ctx.root)
        return f"pid {pid}, as its own principal; log {process.log_file(name, ctx.home)}"

    def status(ctx: Context) -> dict[str, Any]:
        url = sql_url(ctx.home, name)
        return process.status(name, ctx.home) | ({"sql_url": url} if url else {})

    return Component(name, start, lambda ctx: process.stop(name, ctx.home), status,
                     check=lambda ctx: job_died(ctx, name))


def sql_url(home: Path, job: str = SQL_JOB) -> str | None:
    """The read-only ClickHouse HTTP endpoint a job serves its embedded chDB on
    (jobs/chdb_http.py), while that job runs; None otherwise."""
    return state.running_url(process.job_dir(job, home), chdb_http.RECORD)


def _progress_at(ctx: Context, name: str) -> float:
    return float(_report(ctx, name).get("progress_at") or 0)


def job_died(ctx: Context, name: str) -> str | None:
    """Watch a just-started job until its first progress, or ctx.settle_s at most.

    A job that dies at start (bad credentials, a missing jar, a failing first batch) is
    reported with its exit code and the end of its log instead of a green tick.
    """
    deadline = time.monotonic() + ctx.settle_s
    since = _progress_at(ctx, name)
    while True:
        st = process.status(name, ctx.home)
        if not st["running"]:
            code = st.get("exit_code")
            how = f"exited (code {code})" if code is not None else "was killed (no exit code)"
            tail = "\n".join(f"    {line}" for line in process.log_tail(name, ctx.home, JOB_LOG_LINES))
            return f"{how} right after it started; last lines of {st['log']}:\n{tail}"
        if _progress_at(ctx, name) > since or time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


_demo = managed(DEMO)


def _demo_start(ctx: Context) -> str:
    d = Daemon.load(ctx.home, DEMO)
    rate = float(os.environ.get(DEMO_RATE_ENV, "20"))
    if not d.alive():
        d.spawn([sys.executable, "-m", "hanzo_stream.local.demo", "--home", str(ctx.home),
                 "--rate", f"{rate:g}", "--registry", str(Path(ctx.registry.path).resolve()),
                 "--schemas", str(ctx.root / "schemas")])
    return f"~{rate:g} events/s from 4 services (a few invalid on purpose); log {d.log_file}"


def components(registry: Registry) -> tuple[Component, ...]:
    return (
        Component("kafka", _kafka_start, lambda ctx: kafka.stop(ctx.home / "kafka"), _kafka_status),
        Component("reconcile", _reconcile_start, lambda ctx: None, _reconcile_status, asks_cluster=True),
        Component("schema-registry", _registry_start,
                  lambda ctx: schema_registry.stop(ctx.home / "schema-registry"),
                  lambda ctx: schema_registry.status(ctx.home / "schema-registry")),
        Component("schemas", _schemas_start, lambda ctx: None, _schemas_status, asks_cluster=True),
        Component(object_store.NAME, _object_store_start,
                  lambda ctx: object_store.stop(ctx.home / object_store.NAME),
                  lambda ctx: object_store.status(ctx.home / object_store.NAME)),
        Component(postgres.NAME, _postgres_start, lambda ctx: postgres.stop(ctx.home),
                  lambda ctx: postgres.status(ctx.home)),
        Component("kafka-exporter", _exporter_start, lambda ctx: kafka_exporter.stop(ctx.home / "exporter"),
                  lambda ctx: kafka_exporter.status(ctx.home / "exporter")),
        Component(dead_letter_monitor.NAME, _monitor_start,
                  lambda ctx: dead_letter_monitor.stop(ctx.home / dead_letter_monitor.NAME),
                  lambda ctx: dead_letter_monitor.status(ctx.home / dead_letter_monitor.NAME)),
        Component(pager.NAME, _pager_start, lambda ctx: pager.stop(ctx.home / pager.NAME),
                  lambda ctx: pager.status(ctx.home / pager.NAME)),
        Component(alertmanager.NAME, _alertmanager_start,
                  lambda ctx: alertmanager.stop(ctx.home / alertmanager.NAME),
                  lambda ctx: alertmanager.status(ctx.home / alertmanager.NAME)),
        Component("prometheus", _prometheus_start, lambda ctx: prometheus.stop(ctx.home / "prometheus"),
                  lambda ctx: prometheus.status(ctx.home / "prometheus")),
        *(_job(name) for name in list_specs(checkout(registry) / "consumers")),
        Component(DEMO, _demo_start, lambda ctx: _demo.stop(ctx.home),
                  lambda ctx: _demo.status(ctx.home)),
    )


def service_exports(ctx: Context) -> str:
    """`export` lines for the local services besides the broker, where they run."""
    import shlex

    urls = {"HANZO_STREAM_SCHEMA_REGISTRY_URL": schema_registry.url(ctx.home / "schema-registry"),
            "HANZO_STREAM_PROMETHEUS_URL": prometheus.url(ctx.home / "prometheus"),
            "HANZO_STREAM_SQL_URL": sql_url(ctx.home)}
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in urls.items() if v)


def context(registry: Registry, console: Console, brokers: int | None = None) -> Context:
    return Context(state_dir(), registry, console, brokers)


def _components(ctx: Context, only: set[str] | None) -> tuple[Component, ...]:
    """The components in start order, or those of `only` (names as `local status` shows them)."""
    comps = components(ctx.registry)
    unknown = (only or set()) - {c.name for c in comps}
    if unknown:
        raise ValueError(f"unknown component(s) {', '.join(sorted(unknown))}; known: "
                         + ", ".join(c.name for c in comps))
    return tuple(c for c in comps if not only or c.name in only)


def up(ctx: Context, only: set[str] | None = None) -> list[str]:
    """Start the components in order; returns those that died right after starting."""
    comps = _components(ctx, only)
    failed = []
    for comp in comps:
        with ctx.console.status(f"starting {comp.name} ..."):
            summary = comp.start(ctx)
        with ctx.console.status(f"watching {comp.name} start ..."):
            died = comp.check(ctx) if comp.check else None
        if died:
            failed.append(comp.name)
            ctx.console.print(f"[red]✗[/red] {comp.name}: {escape(summary)}\n  {escape(died)}")
        else:
            ctx.console.print(f"[green]✓[/green] {comp.name}: {summary}")
    return failed


def scale(ctx: Context, brokers: int) -> str:
    """Grow the running local cluster to `brokers` (kafka.scale), and let Prometheus scrape
    the new brokers. Replication factors are the registry's: the next step is an apply."""
    c = kafka.scale(ctx.home / "kafka", ctx.creds, brokers,
                    jmx_agent=(jars.jmx_exporter_agent(), JMX_RULES_FILE))
    voters = kafka.quorum_status(c, ctx.creds.admin).get("voters", [])
    if prometheus.url(ctx.home / "prometheus"):
        _prometheus_start(ctx)  # re-renders the scrape targets and reloads
    return (f"{len(c.nodes)} brokers at {c.bootstrap}; controller voters {voters}. Existing "
            "topics keep their replication factor until the registry raises it: set "
            "`replication: {profile: cluster}` in topics.yaml, then `hanzo-stream apply`")


def stop(ctx: Context, only: set[str] | None = None, quiet: bool = True) -> None:
    """Stop the components (or `only` those), last started first; data is kept."""
    for comp in reversed(_components(ctx, only)):
        if comp.stop(ctx):
            ctx.console.print(f"[green]✓[/green] stopped {comp.name}")
        elif not quiet:
            ctx.console.print(f"{comp.name}: was not running")


def down(ctx: Context, purge: bool = False) -> None:
    stop(ctx)
    if purge and ctx.home.exists():
        postgres.purge(ctx.home)  # its files may live outside the state directory (as root)
        shutil.rmtree(ctx.home)
        ctx.console.print(f"[green]✓[/green] purged {ctx.home}")


def status(ctx: Context, processes_only: bool = False) -> dict[str, dict[str, Any]]:
    """Each component's status; processes_only skips the ones that ask the cluster (cheap)."""
    out = {}
    for c in components(ctx.registry):
        if processes_only and c.asks_cluster:
            continue
        try:
            out[c.name] = c.status(ctx)
        except Exception as e:  # one component's trouble must not hide the others
            out[c.name] = {"error": str(e)}
    return out


# ---------------------------------------------------------------- is it working?

def pipeline(ctx: Context) -> dict[str, Any]:
    """What flows where: Prometheus' view (lag, rates, dead letters) plus each sink's count."""
    from ..monitoring import status as live

    url = prometheus.url(ctx.home / "prometheus")
    snap = live.read(url).as_dict() if url else {}
    billing = settlements = llm_requests = None
    if url:
        with contextlib.suppress(Exception):
            billing = live.topic_records(url, "billing_events")
            settlements = live.topic_records(url, "agent_rpc_settlements")
            llm_requests = live.llm_requests(url)
    return {**snap, "clickhouse_rows": _report(ctx, "analytics-ingest").get("clickhouse_rows"),
            "billing_events": billing, "settlements": settlements, "llm_requests": llm_requests,
            "billing_rows": postgres.rows(ctx.home, ctx.creds, "billing_usage_hourly"),
            "audit_objects": _audit_objects(ctx), "pages": _pages(ctx)}


def _pages(ctx: Context) -> int | None:
    """Pages (trigger events) the local PagerDuty endpoint received; None when it does not run."""
    if not pager.status(ctx.home / pager.NAME)["running"]:
        return None
    return sum(1 for e in pager.pages(ctx.home / pager.NAME) if e.get("event_action") == "trigger")


def _report(ctx: Context, job: str) -> dict[str, Any]:
    from ..jobs.runner import REPORT_FILE

    f = process.job_dir(job, ctx.home) / REPORT_FILE
    return json.loads(f.read_text()) if f.exists() else {}


def _audit_objects(ctx: Context) -> int | None:
    """Committed Parquet objects of the audit archive (Spark's sink log, read with boto3)."""
    if not (ctx.consumers / "audit-archive.yaml").exists():
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    from ..jobs import s3
    from ..jobs.archive import archive_path, committed_files
    from ..jobs.spec import load_spec

    spec = load_spec("audit-archive", ctx.registry, ctx.consumers, ctx.home)
    path = archive_path(spec)
    store = s3.of_spec(spec)
    if s3.is_s3(path) and not store.endpoint:
        return None  # the local object store is not running
    try:
        return len(committed_files(path, store))
    except (OSError, BotoCoreError, ClientError):  # the store is starting, stopping or gone
        return None


def working(ctx: Context, p: dict[str, Any], before: dict[str, Any] | None = None) -> list[str]:
    """What has not been seen working yet; empty when every part of the pipeline delivers.

    Lag must be reported for every job's group; ClickHouse rows, audit objects and dead letters
    must have grown since `before` (a snapshot from when the watch began, so a restart is
    not judged by yesterday's data); billing windows close hourly, so any will do.
    """
    before = before or {}
    missing = [f"lag of {g}" for g in sorted(set(list_specs(ctx.consumers)) - set(p.get("lag") or {}))]
    for what, key in (("new rows in ClickHouse", "clickhouse_rows"), ("new audit objects", "audit_objects"),
                      ("new dead letters", "dead_letters"), ("new LLM metrics", "llm_requests")):
        if (p.get(key) or 0) <= (before.get(key) or 0):
            missing.append(what)
    if p.get("pages") is not None and p["pages"] <= (before.get("pages") or 0):
        missing.append("a page in the local PagerDuty")
    for what, key in (("billing windows", "billing_events"), ("RPC settlements", "settlements"),
                      ("billing rows in PostgreSQL", "billing_rows")):
        if not p.get(key):
            missing.append(what)
    return missing
