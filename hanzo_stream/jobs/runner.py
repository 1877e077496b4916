"""Run one consumer-group job: spec + registry -> Spark session -> the job's queries.

The entry point in spark/<job>.py only builds queries from a JobContext; everything every
job shares lives here: the principal's connection, the session with the connector jars,
query names, checkpoints and triggers, the offset-committing listener, the final commit
after `--once`, clean shutdown on SIGTERM, and per-batch metrics for the benchmark.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..core.connection import Connection
from ..registry import Registry, load_registry
from ..schemas.store import SchemaSet, load_schemas
from . import s3
from .connect import job_connection
from .kafka_out import KafkaOut
from .offsets import OffsetCommitter, commit_listener, end_offsets
from .spec import JobSpec, load_spec

log = logging.getLogger("hanzo_stream.jobs")

METRICS_ENV = "HANZO_STREAM_JOB_METRICS"  # a JSON-lines file for per-batch numbers (bench)
# The checkpoint root instead of the spec's: on Kubernetes <checkpointBase>/<job> (infra/spark.py),
# shared storage the executors write the state store to, not a directory in the driver's pod.
CHECKPOINT_ENV = "HANZO_STREAM_CHECKPOINT"
REPORT_FILE = "report.json"  # under the job's state_dir; read by `local status`
FINAL_COMMIT_TIMEOUT = 90.0  # seconds: bounded, a broker that is gone must not hold the exit


@dataclass
class Metrics:
    """Append-only JSON lines, one per event; off unless a path is given."""

    path: Path | None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def write(self, kind: str, **values: Any) -> None:
        if self.path is None:
            return
        line = json.dumps({"kind": kind, "at": time.time(), **values}, default=str)
        with self._lock, open(self.path, "a") as f:
            f.write(line + "\n")


@dataclass
class JobContext:
    """What a job's build() gets: the session, its spec, its principal, shared writers."""

    spark: Any
    spec: JobSpec
    registry: Registry
    conn: Connection
    once: bool = False
    schemas: SchemaSet | None = None  # schemas/: the event contracts the job checks
    metrics: Metrics = field(default_factory=lambda: Metrics(None))
    progress_hooks: list[Callable[[dict], None]] = field(default_factory=list)
    _closers: list[Callable[[], None]] = field(default_factory=list)
    _kafka_out: KafkaOut | None = None
    _report_lock: threading.Lock = field(default_factory=threading.Lock)
    duplicates_dropped: Counter[str] = field(default_factory=Counter)

    @property
    def stage(self) -> str:
        """The dead-letter stage header value for this job."""
        return f"job:{self.spec.name}"

    def query_name(self, query: str) -> str:
        return f"{self.spec.name}.{query}"

    def kafka_options(self) -> dict[str, str]:
        """Spark `kafka.*` options: the job's principal, TLS trust, nothing else."""
        return {f"kafka.{k}": v for k, v in self.conn.java().items()}

    @property
    def kafka_out(self) -> KafkaOut:
        if self._kafka_out is None:
            self._kafka_out = KafkaOut(self.conn, client_id=f"hanzo-stream-{self.spec.name}")
        return self._kafka_out

    def report(self, **values: Any) -> None:
        """Numbers `hanzo-stream local status` shows (e.g. rows in ClickHouse), merged into
        <state_dir>/report.json: the sink may be a process-owned chDB nobody else can open."""
        path = self.spec.state_dir / REPORT_FILE
        with self._report_lock:  # batches and the progress listener run on different threads
            old = json.loads(path.read_text()) if path.exists() else {}
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(old | values | {"at": time.time()}))
            tmp.replace(path)

    def on_close(self, fn: Callable[[], None]) -> None:
        self._closers.append(fn)

    def checkpoint_without_state(self, query: str) -> bool:
        """True if `query` resumes a checkpoint written by a plan without stateful operators:
        Spark cannot add one to it (STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY)."""
        jvm = self.spark._jvm
        root = jvm.org.apache.hadoop.fs.Path(self.spec.checkpoint_for(query))
        fs = root.getFileSystem(self.spark._jsc.hadoopConfiguration())
        return bool(fs.exists(jvm.org.apache.hadoop.fs.Path(root, "commits"))
                    and not fs.exists(jvm.org.apache.hadoop.fs.Path(root, "state")))

    def start(self, writer, query: str):
        """Start a writer with this job's name, per-query checkpoint and trigger."""
        writer = writer.queryName(self.query_name(query)).option(
            "checkpointLocation", self.spec.checkpoint_for(query))
        if self.once:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{int(self.spec.trigger_seconds * 1000)} milliseconds")
        return writer.start()

    def close(self) -> None:
        for fn in reversed(self._closers):
            try:
                fn()
            except Exception as e:
                log.warning("closing %s: %s", fn, e)
        self._closers.clear()


def load_job_module(path: Path) -> ModuleType:
    """Import spark/<job>.py by path (shared job code lives in hanzo_stream.jobs)."""
    mod_spec = importlib.util.spec_from_file_location(f"hanzo_stream_job_{path.stem}", path)
    if mod_spec is None or mod_spec.loader is None:
        raise ImportError(f"cannot load job module {path}")
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    if not hasattr(module, "build"):
        raise ImportError(f"{path} has no build(ctx) function")
    return module


class _Stop:
    """SIGTERM/SIGINT ask the queries to stop; handled between short waits on the JVM."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        log.warning("signal %s: stopping the job's queries", signum)
        self.requested = True


def run(name: str, *, registry_path: Path = Path("topics.yaml"),
        consumers_dir: Path = Path("consumers"), home: Path | None = None, once: bool = False,
        master: str | None = None, env: dict[str, str] | None = None) -> int:
    """Run a job until it finishes (--once) or is stopped. Exit code: 0 ok, 1 a query failed."""
    from .spark import build_session, uses_s3a

    env = dict(os.environ) if env is None else env
    registry = load_registry(registry_path)
    spec = load_spec(name, registry, consumers_dir, home)
    if env.get(CHECKPOINT_ENV):
        spec = dataclasses.replace(spec, checkpoint=spec.resolve(env[CHECKPOINT_ENV]))
    conn = job_connection(spec.principal, env, spec.home)
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    schemas = load_schemas(registry_path.parent / "schemas", env)
    if spec.runtime == "consumer":  # no Spark: hanzo_stream/jobs/consumer.py
        return _run_consumer(JobContext(None, spec, registry, conn, once, schemas), env)
    metrics = Metrics(Path(env[METRICS_ENV]) if env.get(METRICS_ENV) else None)

    if uses_s3a(spec):  # the JVM's AWS SDK reads its keys from the environment it starts with
        os.environ.update(s3.of_spec(spec, env).environ())
    spark = build_session(spec, master)
    committer = OffsetCommitter(spec.name, conn)
    ctx = JobContext(spark, spec, registry, conn, once, metrics=metrics, schemas=schemas)
    ctx.progress_hooks.append(lambda p: metrics.write("progress", progress=p))
    ctx.progress_hooks.append(lambda p: report_progress(ctx, p))
    server = serve_progress(ctx, env)
    spark.streams.addListener(commit_listener(committer, _hooks_view(ctx)))
    stop = _Stop()
    stop.install()
    queries = []
    try:
        queries = load_job_module(spec.job).build(ctx)
        committer.queries = {q.name for q in queries}
        log.warning("job %s: %d quer%s started as %s (%s)", spec.name, len(queries),
                    "y" if len(queries) == 1 else "ies", spec.principal,
                    "available-now" if once else f"every {spec.trigger_seconds:g}s")
        _wait(queries, stop)
        failed = [q for q in queries if q.exception() is not None]
        for q in failed:
            log.error("query %s failed: %s", q.name, q.exception())
        for q in queries:  # no batch completes after this: the last progress is final
            with contextlib.suppress(Exception):
                q.stop()
        # The listener is asynchronous: commit the final progress here, after any listener
        # commit still in flight, and say in the log if it could not be committed.
        for q in queries:
            committer.record(q.name, end_offsets(q.lastProgress))
        committer.finish(FINAL_COMMIT_TIMEOUT)
        return 1 if failed else 0
    finally:
        for q in queries:
            with contextlib.suppress(Exception):
                q.stop()
        ctx.close()
        committer.close()
        spark.stop()
        if server is not None:
            server.shutdown()


def serve_progress(ctx: JobContext, env: dict[str, str]):
    """The job's /metrics from its queries' progress (jobs/progress_metrics.py), when
    HANZO_STREAM_METRICS_LISTEN asks for it; announced to Prometheus as the plain consumers'."""
    from .consumer import LISTEN_ENV, TARGETS_ENV, serve, write_target
    from .progress_metrics import ProgressMetrics

    if not env.get(LISTEN_ENV):
        return None
    progress = ProgressMetrics(ctx.spec.name)
    ctx.progress_hooks.append(progress.update)
    server, url = serve(progress, env[LISTEN_ENV])
    if env.get(TARGETS_ENV):
        write_target(env[TARGETS_ENV], ctx.spec.name, url)
    log.warning("job %s: /metrics at %s", ctx.spec.name, url)
    return server


def _run_consumer(ctx: JobContext, env: dict[str, str]) -> int:
    """A `runtime: consumer` job; its checkpoints are its progress for `local up`/`status`."""
    from . import consumer

    def report(job, **extra) -> None:
        ctx.report(progress_at=time.time(), assigned=len(job.assigned), **job.usage.outcomes, **extra)

    assert ctx.schemas is not None
    return consumer.run(ctx.spec, ctx.registry, ctx.schemas, ctx.conn, once=ctx.once, env=env,
                        report=report)


def report_progress(ctx: JobContext, progress: dict) -> None:
    """The last progress in report.json: `local up` waits for the first to call a job up. With
    it, per query, the duplicate ids dropped since the job started (at-least-once delivery)."""
    from .progress_metrics import dropped

    query = progress.get("name") or "query"
    ctx.duplicates_dropped[query] += dropped(progress)[0]
    ctx.report(progress_at=time.time(), progress_query=query,
               progress_batch=progress.get("batchId"),
               duplicates_dropped=dict(ctx.duplicates_dropped))


class _hooks_view:
    """Lets hooks added by build() after the listener was registered still run."""

    def __init__(self, ctx: JobContext):
        self.ctx = ctx

    def __iter__(self):
        return iter(self.ctx.progress_hooks)


def _wait(queries: list, stop: _Stop) -> None:
    while True:
        active = [q for q in queries if q.isActive]
        if not active or stop.requested:
            break
        if any(q.exception() is not None for q in queries):
            break  # one failed: stop the rest, exit non-zero, let the supervisor restart
        with contextlib.suppress(Exception):
            active[0].awaitTermination(1)
