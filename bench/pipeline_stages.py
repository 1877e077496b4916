"""Where analytics-ingest's time goes: each stage of its batch alone, on the same data, side by side.

    python bench/pipeline_stages.py [--events 80000] [--rounds 3] [--no-doc]

One local broker (SASL_SSL, TLS 1.3), --events 2 KB insights events in events_plugin_ingestion
(16 partitions, lz4, as bench/pipeline.py produces them). Then, per round, in a rotating order:
  raw       Kafka's ConsumerPerformance (one Java consumer): the ceiling
  read      Spark's Kafka source alone (local[2]; every value's bytes touched, nothing parsed)
  batch     read + from_json + the SQL checks + Arrow to the driver: what the job's foreachBatch gets
  parse     from_json + checks + Arrow on the same rows cached in memory: the JVM's share without Kafka
  insert    the valid rows into chDB (the job's sink), rows/s
Rates are medians over rounds; ratios are to `raw` of the same round. Writes the
"Pipeline stages" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "spark"), str(ROOT / "bench")]

from pipeline import EVENTS, _insights, consumer_perf  # noqa: E402
from report import write_section  # noqa: E402

from hanzo_stream.local import credentials, kafka  # noqa: E402


def produce(conf: dict, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer(conf | {"linger.ms": 5, "compression.type": "lz4", "batch.size": 16384, "acks": "all"})
    pad = "abcdefghij" * 820
    for i in range(n):
        team, value = _insights(i, pad)
        while True:
            try:
                p.produce(EVENTS, value.encode(), team.encode())
                break
            except BufferError:
                p.poll(0.1)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=80_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()

    import analytics_ingest as ai
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from hanzo_stream.jobs import events
    from hanzo_stream.jobs.clickhouse import ChdbSink
    from hanzo_stream.jobs.contract import compile_contract
    from hanzo_stream.jobs.spark import connector_jars
    from hanzo_stream.registry import load_registry
    from hanzo_stream.schemas.store import load_schemas

    home = Path(tempfile.mkdtemp(prefix="hs-stages-"))
    creds = credentials.load_or_create(home / "credentials.json", [])
    cluster = kafka.start(home / "kafka", creds, heap_mb=1024)
    try:
        conn = cluster.connection("admin", creds.admin)
        admin = AdminClient(conn.confluent())  # must outlive its futures
        for f in admin.create_topics([NewTopic(EVENTS, 16, 1)]).values():
            f.result(30)
        del admin
        produce(conn.confluent(), args.events)
        spark = (SparkSession.builder.master("local[2]")
                 .config("spark.jars", ",".join(map(str, connector_jars())))
                 .config("spark.driver.memory", "2g").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        src = (spark.read.format("kafka").options(**{f"kafka.{k}": v for k, v in conn.java().items()})
               .option("subscribe", EVENTS).option("startingOffsets", "earliest").load())
        c = compile_contract(load_schemas(ROOT / "schemas"), load_registry(ROOT / "topics.yaml"), EVENTS)
        cached = src.localCheckpoint(eager=True)  # a copy in memory; `src` itself stays uncached
        sink = ChdbSink(home / "chdb")

        def rows(df):
            return ai._rows(events.checked(df, c))

        def arrow(df) -> int:
            return sum(b.num_rows for b in rows(df)._collect_as_arrow())

        table = None

        def insert() -> int:
            import pyarrow as pa

            nonlocal table
            if table is None:
                table = pa.Table.from_batches(rows(cached)._collect_as_arrow()).select(list(ai.EVENT_COLUMNS))
            sink.write(table, f"bench-{time.monotonic_ns()}")
            return table.num_rows

        stages = {
            "raw": lambda: int(consumer_perf(conn, EVENTS, args.events, home)["msgs"]),
            "read": lambda: args.events if src.select(F.sum(F.length("value"))).collect()[0][0] else 0,
            "batch": lambda: arrow(src),
            "parse": lambda: arrow(cached),
            "insert": insert,
        }
        for fn in stages.values():  # warm-up: JIT, consumer pool, chDB tables
            fn()
        rates: dict[str, list[float]] = {k: [] for k in stages}
        ratios: dict[str, list[float]] = {k: [] for k in stages}
        names = list(stages)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            got = {}
            for name in order:
                t = time.perf_counter()
                n = stages[name]()
                got[name] = n / (time.perf_counter() - t)
                assert n == args.events or name == "raw" and n >= args.events, (name, n)
            for name in names:
                rates[name].append(got[name])
                ratios[name].append(got[name] / got["raw"])
            print(f"round {r + 1}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in got.items()), flush=True)
        sink.close()
        spark.stop()
    finally:
        kafka.stop(home / "kafka")

    med = {k: statistics.median(v) for k, v in rates.items()}
    ratio = {k: statistics.median(v) for k, v in ratios.items()}
    combined = 1 / (1 / med["batch"] + 1 / med["insert"])
    labels = {"raw": "Kafka ConsumerPerformance (one Java consumer)",
              "read": "Spark Kafka source alone (local[2])",
              "batch": "read + parse + checks + Arrow to the driver",
              "parse": "parse + checks + Arrow, rows cached (no Kafka)",
              "insert": "chDB insert of the valid rows"}
    body = (f"`python bench/pipeline_stages.py --events {args.events} --rounds {args.rounds}` — "
            f"{args.events:,} insights events of 2 KB (lz4, 16 partitions) on one local broker over "
            "SASL_SSL/TLS 1.3; each stage of an analytics-ingest batch timed alone on the same data, "
            "rounds in rotating order after a warm-up, medians; `vs raw` is the median of per-round "
            "ratios.\n\n| stage | events/s | MB/s | vs raw |\n|---|---|---|---|\n")
    for k in stages:
        body += f"| {labels[k]} | {med[k]:,.0f} | {med[k] * 2048 / 1e6:,.1f} | {ratio[k]:.2f}x |\n"
    body += (f"\nA batch then an insert, back to back as foreachBatch runs them: "
             f"{combined:,.0f} events/s ({combined / med['raw']:.0%} of raw). Per round: "
             + "; ".join(", ".join(f"{k} {rates[k][i]:,.0f}" for k in stages) for i in range(args.rounds))
             + ".\n")
    print(body)
    if not args.no_doc:
        write_section("Pipeline stages", body)


if __name__ == "__main__":
    main()
