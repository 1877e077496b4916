"""Pipeline benchmark: 2 KB events at a fixed rate through analytics-ingest and billing-agg.

    python bench/pipeline.py [--rate 2500] [--llm-rate 250] [--duration 60] [--runs 3] [--no-doc]

One run, on its own local broker (SASL_SSL, ACLs, the registry applied by the reconciler):
1. live, --runs times in a row: producer processes write 2 KB insights events at --rate into
   events_plugin_ingestion (16 partitions) and llm.usage events at --llm-rate into llm_usage,
   while both jobs run continuously, then wait until both groups have caught up; lag
   (committed offsets vs end offsets, what a lag exporter sees) is sampled every second, and
   analytics-ingest reports produced -> queryable latency per row. Goal (issue 26): p99 under
   LATENCY_GOAL_S on every run;
2. catch-up: each job alone, from a fresh checkpoint, over everything produced (the job's
   sustained maximum: rows / time spent in micro-batches);
3. ceiling: Kafka's own ConsumerPerformance reads the same events_plugin_ingestion data.
Writes docs/pipeline-lag.png and the "## Pipeline" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from report import write_section  # noqa: E402  (first: the JVMs run with C2, as in production)

from hanzo_stream.artifacts import jars  # noqa: E402
from hanzo_stream.client.envelope import iso_ms  # noqa: E402
from hanzo_stream.client.producer import producer_config  # noqa: E402
from hanzo_stream.core.connection import Connection  # noqa: E402
from hanzo_stream.jobs import process as jobs  # noqa: E402
from hanzo_stream.local import credentials, kafka  # noqa: E402
from hanzo_stream.reconcile.secrets import env_name  # noqa: E402
from hanzo_stream.registry import load_registry  # noqa: E402

EVENTS, LLM = "events_plugin_ingestion", "llm_usage"
PLOT = ROOT / "docs" / "pipeline-lag.png"
EVENT_BYTES = 2048
LATENCY_GOAL_S = 5.0  # p99 produced -> queryable, on every live run (issue 26)


# ---------------------------------------------------------------- producers

def uuid7() -> str:
    """A UUIDv7 (time-ordered), as the client library generates for envelope ids."""
    ms = int(time.time() * 1000)
    r = int.from_bytes(os.urandom(10))
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | ((r >> 62) & 0xFFF) << 64 | (0b10 << 62)
                         | (r & ((1 << 62) - 1))))


def _insights(i: int, pad: str) -> tuple[str, str]:
    team = f"team-{i % 64}"
    ts = iso_ms()
    head = (f'{{"schema":"hanzo.stream.v1","id":"{uuid7()}","type":"insights.event.captured",'
            f'"source":"bench","timestamp":"{ts}","team_id":"{team}","data":{{"event":"$pageview",'
            f'"distinct_id":"user-{i}","ip":"203.0.113.{i % 254 + 1}","session_id":"sess-{i % 800}",'
            f'"sent_at":"{ts}","properties":{{"$current_url":"https://hanzo.ai/p/{i % 1000}",'
            '"$browser":"Chrome","blob":"')
    tail = '"}}}'
    fill = EVENT_BYTES - len(head) - len(tail)
    start = i % 4096
    return team, head + pad[start:start + fill] + tail


def _usage(i: int, pad: str) -> tuple[str, str]:
    team = f"team-{i % 64}"
    ts = iso_ms()
    n = i % 97
    doc = {"schema": "hanzo.stream.v1", "id": uuid7(), "type": "llm.usage.completed",
           "source": "bench", "timestamp": ts, "team_id": team, "org_id": f"org-{i % 16}",
           "data": {"request_id": f"req-{i}", "model": "zen-1", "provider": "hanzo",
                    "prompt_tokens": 100 + n, "completion_tokens": 10 * n, "total_tokens": 100 + 11 * n,
                    "cost_usd": round(0.001234 * n, 6)}}
    return team, json.dumps(doc)


def produce_at_rate(conf: dict, topic: str, rate: float, duration: float, kind: str, out) -> None:
    """A fixed-rate producer (ticks of 10 ms); reports (sent, seconds) on `out`."""
    from confluent_kafka import Producer

    p = Producer(producer_config(conf, queue_buffering_max_kbytes=262144))
    make = _insights if kind == "insights" else _usage
    pad = os.urandom(4096).hex()
    start = time.monotonic()
    sent = 0
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= duration:
            break
        due = int(rate * elapsed)
        while sent < due:
            key, value = make(sent, pad)
            try:
                p.produce(topic, key=key, value=value)
                sent += 1
            except BufferError:
                p.poll(0.005)
        p.poll(0)
        time.sleep(0.01)
    p.flush(60)
    out.put((topic, sent, time.monotonic() - start))


# ---------------------------------------------------------------- lag sampling

@dataclass
class LagSampler:
    """Committed vs end offsets per group, once a second: what kafka_exporter would chart."""

    admin_conf: dict
    groups: dict[str, str]  # group -> topic
    samples: list[tuple[float, dict[str, int], dict[str, int]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def lag(self) -> tuple[dict[str, int], dict[str, int]]:
        from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.admin_conf)
        c = Consumer(self.admin_conf | {"group.id": "bench-lag-sampler"})
        lags, ends_total = {}, {}
        try:
            for group, topic in self.groups.items():
                parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
                tps = [TopicPartition(topic, p) for p in parts]
                ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
                res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])
                committed = {tp.partition: tp.offset for tp in res[group].result().topic_partitions}
                lags[group] = sum(e - max(committed.get(p, -1), 0) for p, e in ends.items())
                ends_total[group] = sum(ends.values())
        finally:
            c.close()
        return lags, ends_total

    def run(self, t0: float) -> None:
        while not self._stop.is_set():
            try:
                lags, ends = self.lag()
                self.samples.append((time.monotonic() - t0, lags, ends))
            except Exception as e:  # keep sampling
                print(f"lag sample failed: {e}", file=sys.stderr)
            self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()


# ---------------------------------------------------------------- job metrics

def read_metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def latency_quantiles(metrics: list[dict], qs=(0.5, 0.99)) -> dict[float, float]:
    hist: dict[int, int] = {}
    for m in metrics:
        if m["kind"] == "batch":
            for b, c in m.get("latency_ms", {}).items():
                hist[int(b)] = hist.get(int(b), 0) + c
    total = sum(hist.values())
    out = {}
    for q in qs:
        target, seen = q * total, 0
        for b in sorted(hist):
            seen += hist[b]
            if seen >= target:
                out[q] = b + 10  # bucket upper bound
                break
    return out


def _records(progress: dict) -> int:
    """Kafka records a batch consumed, from its offsets (numInputRows counts every scan of
    the source, and billing-agg's union scans llm_usage twice)."""
    from hanzo_stream.jobs.offsets import parse_offsets

    s = progress["sources"][0]
    start, end = parse_offsets(s.get("startOffset")), parse_offsets(s.get("endOffset"))
    return sum(o - start.get(tp, 0) for tp, o in end.items())


def catch_up_rate(metrics: list[dict]) -> tuple[int, float, dict[str, float]]:
    """(records, seconds inside micro-batches, where the time went) from query progress.

    The first batch with data pays the one-time costs (Kafka connections, code generation,
    a cold JIT) and is left out: this is the sustained rate of a running job.
    """
    rows, seconds, parts = 0, 0.0, {}
    progress = [m for m in metrics if m["kind"] == "progress"]
    first = next((i for i, m in enumerate(progress) if _records(m["progress"]) > 0), 0)
    warm = {m["progress"]["batchId"] for m in progress[:first + 1]}
    for m in progress[first + 1:]:
        p = m["progress"]
        rows += _records(p)
        seconds += p["durationMs"].get("triggerExecution", 0) / 1000
        for k, v in p["durationMs"].items():
            parts[k] = parts.get(k, 0) + v / 1000
    for m in metrics:
        if m["kind"] == "batch" and m["batch"] not in warm:
            for k in ("collect_s", "insert_s", "dead_letter_s"):
                if k in m:
                    parts[k] = parts.get(k, 0) + m[k]
    return rows, seconds, parts


# ---------------------------------------------------------------- the run

def consumer_perf(conn: Connection, topic: str, messages: int, home: Path) -> dict[str, float]:
    props = home / "perf.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in conn.java().items()))
    cmd = ["java", "-Xmx512m", "-cp", jars.kafka_classpath(), "org.apache.kafka.tools.ConsumerPerformance",
           "--bootstrap-server", conn.bootstrap, "--topic", topic, "--num-records", str(messages),
           "--command-config", str(props), "--group", f"bench-perf-{uuid.uuid4().hex[:6]}",
           "--timeout", "60000"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    header = [h.strip() for h in lines[-2].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    row = dict(zip(header, values, strict=True))
    return {"MB": float(row["data.consumed.in.MB"]), "MB/s": float(row["MB.sec"]),
            "msgs": float(row["data.consumed.in.nMsg"]), "msgs/s": float(row["nMsg.sec"]),
            "fetch MB/s": float(row["fetch.MB.sec"]), "fetch msgs/s": float(row["fetch.nMsg.sec"])}


def plot(samples, rate: float, llm_rate: float, runs: list[LiveRun], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    for group, color in (("analytics-ingest", "tab:blue"), ("billing-agg", "tab:orange")):
        xs = [t for t, lags, _ in samples if group in lags]
        ys = [lags[group] for _, lags, _ in samples if group in lags]
        ax.plot(xs, ys, label=f"{group} lag (records)", color=color)
    for i, r in enumerate(runs):
        ax.axvspan(r.start, r.produce_end, color="grey", alpha=0.12,
                   label="producers on" if i == 0 else None)
    ax.set_xlabel("seconds since producers started")
    ax.set_ylabel("consumer-group lag (records)")
    ax.set_title(f"Lag over time: {rate:,.0f} ev/s x 2 KB into {EVENTS}, {llm_rate:,.0f} ev/s into {LLM}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


@dataclass
class LiveRun:
    """One live run: what was produced, how long rows took to become queryable, how far lag rose."""

    sent: dict[str, int]
    seconds: float
    start: float  # since the first run's start (the lag plot's clock)
    produce_end: float
    drained: bool
    drain_s: float
    latency: dict[float, float]
    max_lag: dict[str, int]


def live_run(args, cluster, creds, sampler: LagSampler, t0: float, ingest_metrics: Path,
             ctx, results) -> LiveRun:
    """Producers at --rate for --duration while both jobs run, then until both caught up."""
    start = time.monotonic() - t0
    wall0 = time.time()
    procs = [ctx.Process(target=produce_at_rate, args=(
        cluster.connection("insights-capture", creds.password("insights-capture")).confluent(),
        EVENTS, args.rate / args.producers, args.duration, "insights", results))
        for _ in range(args.producers)]
    procs.append(ctx.Process(target=produce_at_rate, args=(
        cluster.connection("llm-gateway", creds.password("llm-gateway")).confluent(),
        LLM, args.llm_rate, args.duration, "usage", results)))
    for p in procs:
        p.start()
    produced = [results.get(timeout=args.duration + 300) for _ in procs]
    for p in procs:
        p.join()
    produce_end = time.monotonic() - t0
    drained = _wait_drained(sampler, args.drain_timeout, after=produce_end)
    end = time.monotonic() - t0
    batches = [m for m in read_metrics(ingest_metrics) if m["at"] >= wall0]
    in_run = [lag for t, lag, _ in sampler.samples if start <= t <= end]
    return LiveRun(sent={t: sum(n for tt, n, _ in produced if tt == t) for t in (EVENTS, LLM)},
                   seconds=max(s for _, _, s in produced), start=start, produce_end=produce_end,
                   drained=drained, drain_s=end - produce_end, latency=latency_quantiles(batches),
                   max_lag={g: max((lag.get(g, 0) for lag in in_run), default=0)
                            for g in ("analytics-ingest", "billing-agg")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=2500, help="insights events/s (2 KB each)")
    ap.add_argument("--llm-rate", type=float, default=250, help="llm.usage events/s")
    ap.add_argument("--duration", type=float, default=60, help="seconds of producing, per live run")
    ap.add_argument("--runs", type=int, default=3, help="live runs in a row")
    ap.add_argument("--trigger", help="analytics-ingest's trigger in the live runs (default: its spec's)")
    ap.add_argument("--producers", type=int, default=1, help="insights producer processes")
    ap.add_argument("--drain-timeout", type=float, default=300)
    ap.add_argument("--no-doc", action="store_true", help="print only; leave docs/ alone")
    ap.add_argument("--keep", action="store_true", help="keep the run's state directory")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="hs-bench-pipeline-"))
    registry = load_registry(ROOT / "topics.yaml")
    creds = credentials.of_home(home, registry.principal_names())
    cluster = kafka.start(home / "kafka", creds, heap_mb=1024)
    started: list[tuple[str, Path]] = []
    try:
        _apply_registry(cluster, creds, registry)
        admin = cluster.connection("admin", creds.admin)
        base_env = {"HANZO_STREAM_BOOTSTRAP": cluster.bootstrap,
                    "HANZO_STREAM_SECURITY_PROTOCOL": "SASL_SSL",
                    "HANZO_STREAM_SASL_MECHANISM": "SCRAM-SHA-512",
                    "HANZO_STREAM_CA_FILE": cluster.ca_file}
        env = base_env | {env_name(p): creds.password(p) for p in ("analytics-ingest", "billing-aggregator")}
        live = home / "live"
        metrics = {n: home / f"{n}.live.jsonl" for n in ("analytics-ingest", "billing-agg")}

        # 1. live ----------------------------------------------------------------
        live_specs = ROOT / "consumers" if args.trigger is None else _spec_copies(
            home / "consumers-live", {"analytics-ingest": {"trigger": args.trigger}})
        for name in ("analytics-ingest", "billing-agg"):
            jobs.start(name, live, env, registry=ROOT / "topics.yaml", consumers=live_specs,
                       cwd=ROOT, extra_env={"HANZO_STREAM_JOB_METRICS": str(metrics[name])})
            started.append((name, live))
        _wait_running(metrics["analytics-ingest"], metrics["billing-agg"], live)
        sampler = LagSampler(admin.confluent(), {"analytics-ingest": EVENTS, "billing-agg": LLM})
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        # Warm-up: Kafka consumers, code generation and the JIT, once, before the clock runs.
        warm = [ctx.Process(target=produce_at_rate, args=(
            cluster.connection(p, creds.password(p)).confluent(), t, 1000, 3, k, results))
            for p, t, k in (("insights-capture", EVENTS, "insights"), ("llm-gateway", LLM, "usage"))]
        for p in warm:
            p.start()
        warmed = [results.get(timeout=300) for _ in warm]
        for p in warm:
            p.join()
        sampler.samples.append((0.0, *sampler.lag()))
        if not _wait_drained(sampler, args.drain_timeout, poll=True):
            raise RuntimeError("the jobs did not catch up with the warm-up events")
        sampler.samples.clear()
        t0 = time.monotonic()
        thread = threading.Thread(target=sampler.run, args=(t0,), daemon=True)
        thread.start()
        runs = [live_run(args, cluster, creds, sampler, t0, metrics["analytics-ingest"], ctx, results)
                for _ in range(args.runs)]
        sampler.stop()
        thread.join()
        for name in ("analytics-ingest", "billing-agg"):
            jobs.stop(name, live)
        started.clear()
        total = {t: sum(r.sent[t] for r in runs) + sum(n for tt, n, _ in warmed if tt == t)
                 for t in (EVENTS, LLM)}
        plot(sampler.samples, args.rate, args.llm_rate, runs, home / PLOT.name if args.no_doc else PLOT)

        # 2. catch-up, one job at a time --------------------------------------------
        catch = {}
        specs = _spec_copies(home / "consumers-catchup",
                             {"analytics-ingest": {"max_offsets_per_trigger": 50_000},
                              "billing-agg": {"max_offsets_per_trigger": 5_000}})
        for name in ("analytics-ingest", "billing-agg"):
            m = home / f"{name}.catchup.jsonl"
            jobs.start(name, home / "catchup", env, once=True, registry=ROOT / "topics.yaml",
                       consumers=specs, cwd=ROOT,
                       extra_env={"HANZO_STREAM_JOB_METRICS": str(m)})
            started.append((name, home / "catchup"))
            if not jobs.wait(name, home / "catchup", 1800):
                raise RuntimeError(f"{name} catch-up did not finish")
            started.pop()
            catch[name] = catch_up_rate(read_metrics(m))

        # 3. Kafka's own consumer, same topic, same data -------------------------------
        perf = consumer_perf(admin, EVENTS, total[EVENTS], home)
    finally:
        for name, h in started:
            jobs.stop(name, h)
        kafka.stop(home / "kafka")

    report = _report(args, runs, catch, perf)
    print(report)
    if not args.no_doc:
        write_section("Pipeline", report)
    if args.keep:
        print(f"state kept in {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)


def _spec_copies(d: Path, overrides: dict[str, dict]) -> Path:
    """Copies of consumers/ specs with some fields changed (smaller batches for the catch-up,
    which then runs several of them; another trigger for a live run)."""
    import yaml

    d.mkdir(exist_ok=True)
    for name in ("analytics-ingest", "billing-agg"):
        doc = yaml.safe_load((ROOT / "consumers" / f"{name}.yaml").read_text())
        doc |= {"job": str(ROOT / doc["job"])} | overrides.get(name, {})
        (d / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return d


def _apply_registry(cluster, creds, registry) -> None:
    from hanzo_stream.reconcile import CountingAdmin, reconcile

    plan, result = reconcile(CountingAdmin.connect(cluster.connection("admin", creds.admin)),
                             registry, dict(creds.principals))
    if plan.errors or not result.ok:
        raise RuntimeError(f"registry apply failed: {plan.errors} {result.failed}")


def _wait_running(*paths_and_home, timeout: float = 180) -> None:
    """Both jobs have finished at least one (empty) batch: their sessions are warm."""
    *files, home = paths_and_home
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(any(m["kind"] == "progress" for m in read_metrics(f)) for f in files):
            return
        for name in ("analytics-ingest", "billing-agg"):
            if not jobs.status(name, home)["running"]:
                raise RuntimeError(f"{name} died: {jobs.log_file(name, home).read_text()[-3000:]}")
        time.sleep(1)
    raise RuntimeError("jobs did not start")


def _wait_drained(sampler: LagSampler, timeout: float, poll: bool = False, after: float = -1) -> bool:
    """Until every group's lag is 0 in a sample taken after `after` (poll: sample here, the
    sampler thread is not running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if poll:
            sampler.samples.append((0.0, *sampler.lag()))
        last = sampler.samples[-1] if sampler.samples else None
        if last and (poll or last[0] > after) and all(v == 0 for v in last[1].values()):
            return True
        time.sleep(1)
    return False


def _report(args, runs: list[LiveRun], catch, perf) -> str:
    ai_rows, ai_s, ai_parts = catch["analytics-ingest"]
    ba_rows, ba_s, ba_parts = catch["billing-agg"]
    ai_rate = ai_rows / ai_s if ai_s else 0
    ba_rate = ba_rows / ba_s if ba_s else 0
    parts = ", ".join(f"{k} {v:.1f}s" for k, v in sorted(ai_parts.items(), key=lambda kv: -kv[1])
                      if k in ("queryPlanning", "latestOffset", "addBatch", "walCommit", "commitOffsets",
                               "collect_s", "insert_s", "dead_letter_s"))
    mb = EVENT_BYTES / 1e6
    p99s = [r.latency.get(0.99, float("inf")) / 1000 for r in runs]
    met = all(p < LATENCY_GOAL_S for p in p99s) and all(r.drained for r in runs)
    lines = [
        f"`python bench/pipeline.py --rate {args.rate:g} --llm-rate {args.llm_rate:g} "
        f"--duration {args.duration:g} --runs {args.runs} --producers {args.producers}"
        f"{f' --trigger {args.trigger}' if args.trigger else ''}`: one local "
        "broker (SASL_SSL, TLS 1.3, ACLs), producers, both jobs (local[2] each, analytics-ingest's "
        f"trigger {args.trigger or 'as its spec says'}) and the lag sampler all on the same 2 "
        "cores; the live runs follow each other on the same running jobs, each once both groups "
        "have caught up. "
        f"Goal (issue 26): p99 produced -> queryable under {LATENCY_GOAL_S:g} s on {args.runs} runs "
        f"in a row: **{'met' if met else 'not met'}** (p99 "
        f"{', '.join(f'{p:.2f}' for p in p99s)} s).",
        "",
        "| measure | result |",
        "|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        ev_rate = r.sent[EVENTS] / r.seconds
        lines += [
            f"| live {i}: produced | {r.sent[EVENTS]:,} x 2 KB insights events in {r.seconds:.0f} s "
            f"({ev_rate:,.0f} ev/s, {ev_rate * mb:.1f} MB/s) + {r.sent[LLM]:,} llm.usage events |",
            f"| live {i}: analytics-ingest produced -> queryable in ClickHouse (chDB) | "
            f"p50 {r.latency.get(0.5, 0) / 1000:.2f} s, **p99 {r.latency.get(0.99, 0) / 1000:.2f} s** |",
            f"| live {i}: max lag | analytics-ingest {r.max_lag['analytics-ingest']:,}, billing-agg "
            f"{r.max_lag['billing-agg']:,} records; {'drained' if r.drained else 'NOT drained'} "
            f"{r.drain_s:.0f} s after producers stopped |",
        ]
    lines += [
        f"| catch-up: analytics-ingest alone (after its first batch) | {ai_rows:,} events in "
        f"{ai_s:.1f} s of batches: "
        f"**{ai_rate:,.0f} ev/s ({ai_rate * mb:.1f} MB/s)** |",
        f"| catch-up: billing-agg alone (after its first batch) | {ba_rows:,} events in "
        f"{ba_s:.1f} s of batches: "
        f"**{ba_rate:,.0f} ev/s** |",
        f"| ceiling: Kafka ConsumerPerformance, same topic | {perf['msgs']:,.0f} msgs, "
        f"**{perf['msgs/s']:,.0f} msgs/s ({perf['MB/s']:.1f} MB/s)**; analytics-ingest's catch-up "
        f"/ this: **{ai_rate / perf['msgs/s'] if perf['msgs/s'] else 0:.2f}x** (the goal of 0.5x is "
        "measured stage by stage in *Pipeline stages*) |",
        f"| where analytics-ingest's batch time went | {parts} |",
        "",
        f"![lag over time]({PLOT.name})",
        "",
        "Where the time goes (catch-up, per analytics-ingest batch, sequential on the driver): "
        f"Spark reading Kafka, parsing and validating in the JVM and handing Arrow to the driver "
        f"{_share(ai_parts, 'collect_s', ai_s)}; the chDB insert {_share(ai_parts, 'insert_s', ai_s)}; "
        "the rest is planning, offset fetches and checkpoint commits. Of that, the contract's "
        "checks cost more than the read (section *Pipeline stages* times each alone); Spark's "
        "Kafka source copies every 2 KB record into a row (one task per core, each reading several "
        "partitions), where ConsumerPerformance only counts bytes. The insert "
        "and the next batch's read do not overlap (foreachBatch is synchronous, which is what makes "
        "the batch's commit safe). In the live phase the producers, the broker and two job JVMs "
        "share the same 2 cores, so the sustainable live rate is below the catch-up rate; when it "
        "is exceeded, latency is queueing (lag), not processing.",
    ]
    return "\n".join(lines)


def _share(parts: dict[str, float], key: str, total: float) -> str:
    return f"{parts.get(key, 0):.1f} s ({parts.get(key, 0) / total * 100 if total else 0:.0f}%)"


if __name__ == "__main__":
    main()
