"""Spark 4 against the 3.5 line, side by side: the same code, the same data, one run.

    python bench/spark_versions.py [--insights 80000] [--llm 600000] [--rounds 3] [--no-doc]

The jobs' contract checks parse into VARIANT, which Spark 3.5 does not have, so the jobs
themselves cannot run on 3.5. What this measures is what both lines run unchanged, shaped like
each job's batch:
  read       the Kafka source alone (the job's fetch sizes; every value's bytes touched)
  analytics  read + from_json into the event's columns (data.properties kept as its JSON text)
             + a null check per required field + Arrow to the driver, one task per core:
             analytics-ingest's batch as a 3.5 job would write it
  billing    a streaming query over llm_usage at the production maxOffsetsPerTrigger (200,000):
             from_json (cost_usd as DECIMAL(38,12)), watermark, dropDuplicatesWithinWatermark(id),
             one-hour windows per (team_id, org_id) with integer and exact decimal sums, unioned
             with the unparsable rows, foreachBatch collecting, RocksDB state with changelog
             checkpointing: billing-agg's query without the VARIANT checks. events/s over the
             batches after the first (records / triggerExecution), as bench/billing.py counts them
Each version runs in its own Python: versions.SPARK_VERSION is this environment's PySpark,
versions.SPARK_BASELINE_VERSION a virtualenv under ~/.cache/hanzo-stream/bench that this script
makes; each gets the connector jars its own POM names, from Maven Central. One local broker
(SASL_SSL, TLS 1.3); per round the two versions run one after the other, in alternating order,
each after its own warm-up. Every billing run's emitted windows are checked against the totals
produced (exact, same on both lines). Writes the "Spark versions" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("read", "analytics", "billing")
WATERMARK, WINDOW = "10 minutes", "1 hour"
STATE_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.shuffle.partitions": "8",
}


# ---------------------------------------------------------------- the worker (any PySpark)

def worker(cfg: dict) -> dict:
    """Runs in the Python of the version under test: imports nothing but PySpark."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    b = (SparkSession.builder.master("local[2]").config("spark.jars", ",".join(cfg["jars"]))
         .config("spark.driver.memory", "2g").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    for k, v in STATE_CONF.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    tasks = spark.sparkContext.defaultParallelism
    kafka = {f"kafka.{k}": v for k, v in cfg["kafka"].items()} | cfg["tuning"]

    def envelope(data: list) -> T.StructType:
        return T.StructType([T.StructField(n, T.StringType()) for n in
                             ("schema", "id", "type", "source", "timestamp", "team_id", "org_id")]
                            + [T.StructField("data", T.StructType(data))])

    s = T.StringType()
    insights = envelope([T.StructField(n, s) for n in
                         ("event", "distinct_id", "ip", "session_id", "sent_at", "properties")])
    usage = envelope([T.StructField(n, s) for n in ("request_id", "model", "provider")]
                     + [T.StructField(n, T.LongType()) for n in
                        ("prompt_tokens", "completion_tokens", "total_tokens")]
                     + [T.StructField("cost_usd", T.DecimalType(38, 12))])

    def read() -> int:
        df = spark.read.format("kafka").options(**kafka).option("subscribe", cfg["insights_topic"]).load()
        return cfg["insights"] if df.select(F.sum(F.length("value"))).collect()[0][0] else 0

    def analytics() -> int:
        df = (spark.read.format("kafka").options(**kafka).option("subscribe", cfg["insights_topic"])
              .load().coalesce(tasks))
        e = F.from_json(F.col("value").cast("string"), insights).alias("e")
        required = ("id", "type", "timestamp", "team_id", "data.event", "data.distinct_id")
        ok = F.lit(True)
        for name in required:
            ok = ok & F.col(f"e.{name}").isNotNull()
        rows = df.select("partition", "offset", e).select(
            "partition", "offset", F.col("e.id").alias("id"), F.col("e.team_id").alias("team_id"),
            F.col("e.data.event").alias("event"), F.col("e.data.distinct_id").alias("distinct_id"),
            F.to_timestamp("e.timestamp").alias("timestamp"),
            F.col("e.data.properties").alias("properties"), ok.alias("ok"))
        return sum(batch.num_rows for batch in rows._collect_as_arrow())

    def billing(checkpoint: str) -> dict:
        src = (spark.readStream.format("kafka").options(**kafka).option("subscribe", cfg["llm_topic"])
               .option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", str(cfg["max_offsets"])).load().coalesce(tasks))
        parsed = src.select("key", "value", F.from_json(F.col("value").cast("string"), usage).alias("e"))
        ok = F.col("e.id").isNotNull() & F.col("e.team_id").isNotNull() & F.col("e.org_id").isNotNull()
        sums = ("prompt_tokens", "completion_tokens", "total_tokens", "cost_usd")
        windows = (parsed.where(ok).select(
            F.col("e.id").alias("id"), F.to_timestamp("e.timestamp").alias("event_time"),
            F.col("e.team_id").alias("team_id"), F.col("e.org_id").alias("org_id"),
            *(F.col(f"e.data.{n}").alias(n) for n in sums))
            .withWatermark("event_time", WATERMARK).dropDuplicatesWithinWatermark(["id"])
            .groupBy(F.window("event_time", WINDOW), "team_id", "org_id")
            .agg(*(F.sum(n).alias(n) for n in sums), F.count(F.lit(1)).alias("request_count")))
        out = windows.select(F.lit("window").alias("kind"), F.to_json(F.struct(
            "team_id", "org_id", F.unix_timestamp("window.start").alias("start"), "request_count",
            *sums)).alias("record")).unionByName(
            parsed.where(~ok).select(F.lit("row").alias("kind"),
                                     F.col("value").cast("string").alias("record")))
        emitted: list[dict] = []

        def batch(df, _batch_id: int) -> None:
            emitted.extend(json.loads(r["record"], parse_float=str)  # exact decimal text
                           for r in df.collect() if r["kind"] == "window")

        q = (out.writeStream.outputMode("append").foreachBatch(batch)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        q.awaitTermination()
        batches = [p for p in q.recentProgress if p["numInputRows"]][1:]  # the first is warm-up
        return {"records": sum(p["numInputRows"] for p in batches),
                "seconds": sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000,
                "windows": emitted}

    def timed(fn) -> float:
        t = time.perf_counter()
        n = fn()
        assert n == cfg["insights"], (fn.__name__, n)
        return n / (time.perf_counter() - t)

    read(), analytics()  # warm-up: JIT, the consumer pool, code generation
    got = {"version": spark.version,
           "read": statistics.median(timed(read) for _ in range(cfg["runs"])),
           "analytics": statistics.median(timed(analytics) for _ in range(cfg["runs"]))}
    b_out = billing(cfg["checkpoint"])
    got["billing"] = b_out["records"] / b_out["seconds"]
    got["billing_batches"] = b_out["records"], b_out["seconds"]
    got["windows"] = b_out["windows"]
    spark.stop()
    return got


# ---------------------------------------------------------------- the parent

def baseline_python() -> Path:
    """A virtualenv with the 3.5 line's PySpark (and pyarrow, for Arrow to the driver)."""
    from hanzo_stream.artifacts.jars import cache_dir
    from hanzo_stream.artifacts.versions import SPARK_BASELINE_VERSION

    env = cache_dir() / "bench" / f"spark-{SPARK_BASELINE_VERSION}"
    python = env / "bin" / "python"
    if not (env / ".complete").exists():
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"pyspark=={SPARK_BASELINE_VERSION}",
                        "pyarrow"], check=True)
        (env / ".complete").write_text(SPARK_BASELINE_VERSION + "\n")
    return python


def baseline_jars() -> list[str]:
    from hanzo_stream.artifacts import versions
    from hanzo_stream.jobs.spark import connector_jars

    return [str(p) for p in connector_jars(versions.SPARK_BASELINE_VERSION, versions.SPARK_BASELINE_SCALA,
                                           versions.SPARK_BASELINE_KAFKA_CLIENTS,
                                           versions.SPARK_BASELINE_COMMONS_POOL2)]


def run_worker(python: Path, cfg: dict) -> dict:
    """The worker in `python`; the config (with the password) goes over stdin, not argv."""
    proc = subprocess.run([str(python), __file__, "--worker"], input=json.dumps(cfg), text=True,
                          capture_output=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{python} worker failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_windows(windows: list[dict], totals: dict, version: str, job) -> int:
    """Every emitted window carries exactly the totals produced for it; returns how many."""
    problems, seen = [], set()
    for w in windows:
        key = (w["team_id"], w["org_id"], w["start"] * 1000)
        if key in seen:
            problems.append(f"{key}: emitted twice")
        seen.add(key)
        want = totals[key].expected(job)
        got = {"request_count": w["request_count"], "prompt_tokens": w["prompt_tokens"],
               "completion_tokens": w["completion_tokens"], "total_tokens": w["total_tokens"],
               "cost_usd": Decimal(w["cost_usd"])}
        if any(got[k] != want[k] for k in got):
            problems.append(f"{key}: {got} != {want}")
    if problems or not windows:
        raise AssertionError(f"Spark {version}: {len(problems)} wrong windows of {len(windows)}: "
                             f"{problems[:3]}")
    return len(windows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--insights", type=int, default=80_000)
    ap.add_argument("--llm", type=int, default=600_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3, help="timed runs of read and analytics per worker")
    ap.add_argument("--max-offsets", type=int, default=200_000, help="billing's maxOffsetsPerTrigger "
                    "(consumers/billing-agg.yaml's production size)")
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

    import billing as bb
    import pipeline_stages as ps
    from confluent_kafka.admin import AdminClient, NewTopic
    from pipeline import EVENTS, LLM
    from report import write_section

    from hanzo_stream.artifacts.versions import SPARK_BASELINE_VERSION, SPARK_VERSION
    from hanzo_stream.jobs import events
    from hanzo_stream.jobs.spark import connector_jars
    from hanzo_stream.local import credentials, kafka

    pythons = {SPARK_VERSION: Path(sys.executable), SPARK_BASELINE_VERSION: baseline_python()}
    jar_sets = {SPARK_VERSION: [str(p) for p in connector_jars()], SPARK_BASELINE_VERSION: baseline_jars()}
    home = Path(tempfile.mkdtemp(prefix="hs-spark-versions-"))
    creds = credentials.of_home(home)
    cluster = kafka.start(home / "kafka", creds, heap_mb=1024)
    hours = 24.0
    job = bb.load_job("billing-agg", bb.llm_usage)
    totals: dict = {}
    results: dict[str, list[dict]] = {v: [] for v in pythons}
    try:
        conn = cluster.connection("admin", creds.admin)
        admin = AdminClient(conn.confluent())
        for f in admin.create_topics([NewTopic(EVENTS, ps.PARTITIONS, 1), NewTopic(LLM, 8, 1)]).values():
            f.result(30)
        del admin
        ps.produce(conn.confluent(), args.insights)
        bb.produce(job, conn.confluent(), 0, args.llm, args.llm, hours, totals)
        base = {"kafka": conn.java(), "tuning": events.KAFKA_SOURCE_TUNING, "insights_topic": EVENTS,
                "llm_topic": LLM, "insights": args.insights, "runs": args.runs,
                "max_offsets": args.max_offsets}
        versions = list(pythons)
        for r in range(args.rounds):
            for v in versions[r % 2:] + versions[:r % 2]:
                cfg = base | {"jars": jar_sets[v], "checkpoint": str(home / f"ckpt-{v}-{r}")}
                got = run_worker(pythons[v], cfg)
                got["checked"] = check_windows(got.pop("windows"), totals, v, job)
                results[v].append(got)
                print(f"round {r + 1} Spark {got['version']}: " + ", ".join(
                    f"{s} {got[s]:,.0f} ev/s" for s in STAGES) + f", {got['checked']} windows exact",
                    flush=True)
    finally:
        kafka.stop(home / "kafka")

    new, old = SPARK_VERSION, SPARK_BASELINE_VERSION
    med = {v: {s: statistics.median(g[s] for g in results[v]) for s in STAGES} for v in results}
    ratio = {s: statistics.median(results[new][i][s] / results[old][i][s] for i in range(args.rounds))
             for s in STAGES}
    windows = {v: {g["checked"] for g in results[v]} for v in results}
    body = (f"`python bench/spark_versions.py --insights {args.insights} --llm {args.llm} "
            f"--rounds {args.rounds}` — Spark {new} (the jobs' version) and {old} (the newest 3.5 "
            "release whose Kafka connector Maven Central serves) running the same PySpark code on "
            f"the same data, one local broker over SASL_SSL/TLS 1.3, local[2]: {args.insights:,} "
            f"insights events of 2 KB (16 partitions) and {args.llm:,} llm.usage.completed events "
            f"(8 partitions, {hours:.0f} hours of event time). Per round the versions alternate "
            "which goes first, each in its own JVM after its own warm-up; rates are medians over "
            "rounds, the ratio the median of per-round ratios. The jobs' VARIANT checks are Spark 4 "
            "only, so these are the jobs' shapes written as a 3.5 job would (see the script).\n\n"
            f"| stage | Spark {new} events/s | Spark {old} events/s | {new} / {old} |\n|---|---|---|---|\n")
    labels = {"read": "Kafka source alone (job's fetch sizes)",
              "analytics": "read + from_json + checks + Arrow to the driver (analytics-ingest's batch)",
              "billing": f"billing-agg's query at {args.max_offsets:,} records a batch "
                         "(dedupe, windows, union)"}
    for s in STAGES:
        body += f"| {labels[s]} | {med[new][s]:,.0f} | {med[old][s]:,.0f} | **{ratio[s]:.2f}x** |\n"
    body += (f"\nEvery billing run's windows were exact against the produced totals "
             f"({', '.join(f'{v}: {sorted(w)}' for v, w in windows.items())} windows per run). Per round: "
             + "; ".join(f"{v} " + ", ".join(f"{s} {g[s]:,.0f}" for s in STAGES)
                         for i in range(args.rounds) for v in results for g in [results[v][i]]) + ".\n")
    print(body)
    if not args.no_doc:
        write_section("Spark versions", body)


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        print(json.dumps(worker(json.loads(sys.stdin.read())), default=str))
    else:
        main()
