"""Where analytics-ingest's time goes: each stage of its batch alone, on the same data, side by side.

    python bench/pipeline_stages.py [--events 80000] [--rounds 3] [--no-doc]

One local broker (SASL_SSL, TLS 1.3), --events 2 KB insights events in events_plugin_ingestion
(16 partitions, lz4, as bench/pipeline.py produces them). Then, per round, in a rotating order:
  raw       Kafka's ConsumerPerformance (one Java consumer): the ceiling
  read      Spark's Kafka source alone (local[2]; every value's bytes touched, nothing parsed)
  batch     read + the contract's checks (VARIANT parse, one rule per keyword) + Arrow to the driver:
            what the job's foreachBatch gets, one task per core as the job reads
  batch-16  the same in one task per Kafka partition (16), as the job read before
  parse     the checks + Arrow on the same rows cached in memory: the JVM's share without Kafka
  insert    the valid rows into chDB (the job's sink), rows/s
  read-tuned  `read` with the job's KAFKA_SOURCE_TUNING fetch/receive sizes (ConsumerPerformance-like)
  plain     the peer baseline: one confluent-kafka consumer, the client library's Router verdict per
            record, orjson, Arrow batches of 50,000 into the same chDB table DDL with insert tokens
  plain-noval the same without the Router (what validation costs)
  clickhouse-kafka  ClickHouse's Kafka table engine in a chDB process of its own, a materialized
            view into the same events DDL, until count() reaches --events (no schema validation)
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

from hanzo_stream.client.producer import producer_config  # noqa: E402
from hanzo_stream.local import credentials, kafka  # noqa: E402


def produce(conf: dict, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer(producer_config(conf))
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


PLAIN_BATCH = 50_000
# librdkafka fetch settings for the plain consumer, the same sizes as events.KAFKA_SOURCE_TUNING.
PLAIN_FETCH = {"fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 4194304,
               "socket.receive.buffer.bytes": 2097152}
PARTITIONS = 16
GOAL_RATIO = 0.5  # of ConsumerPerformance, for the batch then insert (issue 26)
STAGE_NAMES = {"read-tuned": "the Kafka read", "parse": "parse + checks + Arrow", "insert": "the insert"}


def plain(conf: dict, router, sink, n: int, validate: bool = True) -> tuple[int, float]:
    """A user's plain consumer: poll, validate with the client library, parse, insert in batches.

    Returns (rows inserted, seconds from the first poll to the last insert done)."""
    import uuid

    import orjson
    import pyarrow as pa
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from hanzo_stream.client.router import Accepted
    from hanzo_stream.jobs.clickhouse import EVENTS_COLUMNS, insert_token

    group = f"bench-plain-{uuid.uuid4().hex[:8]}"
    c = Consumer(conf | PLAIN_FETCH | {"group.id": group, "enable.auto.commit": False,
                                       "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(EVENTS, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    cols: dict[str, list] = {name: [] for name, _ in EVENTS_COLUMNS}  # the job's table columns
    ranges: dict[int, tuple[int, int]] = {}
    ts = pa.timestamp("ms", "UTC")

    def flush() -> int:
        if not cols["id"]:
            return 0
        table = pa.table({
            **{k: pa.array(cols[k], pa.string()) for k in ("id", "team_id", "org_id", "event", "distinct_id",
                                                           "session_id", "ip", "source")},
            "timestamp": pa.array(cols["timestamp"], pa.string()).cast(ts),
            "sent_at": pa.array(cols["sent_at"], pa.string()).cast(ts),
            "properties": pa.array(cols["properties"], pa.binary()),
            "_partition": pa.array(cols["_partition"], pa.uint16()),
            "_offset": pa.array(cols["_offset"], pa.uint64()),
            "_kafka_timestamp": pa.array(cols["_kafka_timestamp"], pa.int64()).cast(ts),
        })
        sink.write(table, insert_token(group, ranges))
        for v in cols.values():
            v.clear()
        ranges.clear()
        return table.num_rows

    seen = inserted = 0
    t0 = time.perf_counter()  # the first poll: connecting and the first fetch are in the time
    try:
        while seen < n:
            for m in c.consume(min(10_000, n - seen), 1.0):  # never wait out the timeout at the end
                if m.error():
                    raise RuntimeError(m.error())
                seen += 1
                value = m.value()
                if validate and not isinstance(router.route_bytes(value, EVENTS, m.key()), Accepted):
                    continue  # a real consumer dead-letters it; the bench data has none
                e = orjson.loads(value)
                d = e["data"]
                part, off = m.partition(), m.offset()
                lo, hi = ranges.get(part, (off, off))
                ranges[part] = (min(lo, off), max(hi, off))
                cols["id"].append(e["id"])
                cols["team_id"].append(e["team_id"])
                cols["org_id"].append(e.get("org_id"))
                cols["event"].append(d["event"])
                cols["distinct_id"].append(d["distinct_id"])
                cols["timestamp"].append(e["timestamp"])
                cols["properties"].append(orjson.dumps(d.get("properties", {})))
                cols["session_id"].append(d.get("session_id"))
                cols["ip"].append(d.get("ip"))
                cols["sent_at"].append(d.get("sent_at"))
                cols["source"].append(e["source"])
                cols["_partition"].append(part)
                cols["_offset"].append(off)
                cols["_kafka_timestamp"].append(m.timestamp()[1])
                if len(cols["id"]) >= PLAIN_BATCH:
                    inserted += flush()
        inserted += flush()
        return inserted, time.perf_counter() - t0
    finally:
        c.close()


def ch_kafka_worker(pipe, chdb_path: str, config: str, broker: dict, n_timeout: float = 600) -> None:
    """ClickHouse's Kafka table engine in a chDB of its own (one embedded server per process and
    the CA file must be in its start-up config). Per request: a fresh events table, Kafka table
    (new group) and materialized view; answers (rows, seconds from the view's creation until
    count() reached n)."""
    from chdb import session

    from hanzo_stream.jobs.clickhouse import events_ddl

    s = session.Session(f"{chdb_path}?config-file={config}")
    select = (
        "SELECT JSONExtractString(raw, 'id') AS id, JSONExtractString(raw, 'team_id') AS team_id, "
        "JSONExtract(raw, 'org_id', 'Nullable(String)') AS org_id, "
        "JSONExtractString(raw, 'data', 'event') AS event, "
        "JSONExtractString(raw, 'data', 'distinct_id') AS distinct_id, "
        "parseDateTime64BestEffort(JSONExtractString(raw, 'timestamp'), 3, 'UTC') AS timestamp, "
        "JSONExtractRaw(raw, 'data', 'properties') AS properties, "
        "JSONExtract(raw, 'data', 'session_id', 'Nullable(String)') AS session_id, "
        "JSONExtract(raw, 'data', 'ip', 'Nullable(String)') AS ip, "
        "parseDateTime64BestEffortOrNull(JSONExtractString(raw, 'data', 'sent_at'), 3, 'UTC') AS sent_at, "
        "JSONExtractString(raw, 'source') AS source, _partition, _offset, "
        "toDateTime64(assumeNotNull(_timestamp_ms), 3, 'UTC') AS _kafka_timestamp FROM {k}")
    i = 0
    while (req := pipe.recv()) is not None:
        i += 1
        dst, k, mv = f"events_ck{i}", f"kafka_ck{i}", f"mv_ck{i}"
        s.query(events_ddl(dst))
        try:
            s.query(f"CREATE TABLE {k} (raw String) ENGINE = Kafka SETTINGS "
                    f"kafka_broker_list = '{broker['bootstrap']}', kafka_topic_list = '{EVENTS}', "
                    f"kafka_group_name = 'bench-ck-{time.time_ns()}', kafka_format = 'JSONAsString', "
                    "kafka_security_protocol = 'sasl_ssl', kafka_sasl_mechanism = 'PLAIN', "
                    f"kafka_sasl_username = '{broker['username']}', "
                    f"kafka_sasl_password = '{broker['password']}', "
                    f"kafka_max_block_size = {PLAIN_BATCH}, kafka_flush_interval_ms = 1000")
        except Exception as e:  # chDB 4.4: "Shutdown was called" (LOGICAL_ERROR), the table is attached
            if "Shutdown was called" not in str(e):
                raise
        t0 = time.perf_counter()
        s.query(f"CREATE MATERIALIZED VIEW {mv} TO {dst} AS {select.format(k=k)}")
        count = 0
        while count < req and time.perf_counter() - t0 < n_timeout:
            time.sleep(0.05)
            count = int(str(s.query(f"SELECT count() FROM {dst}", "CSV")).strip())
        took = time.perf_counter() - t0
        empty = str(s.query(f"SELECT countIf(id = '' OR event = '' OR properties = '' OR sent_at IS NULL) "
                            f"FROM {dst}", "CSV")).strip()
        assert empty == "0", f"{empty} rows the view did not parse"
        s.query(f"DROP TABLE {mv}")
        s.query(f"DROP TABLE {k}")
        s.query(f"DROP TABLE {dst}")
        pipe.send((count, took))
    s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=80_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()

    import multiprocessing as mp

    import analytics_ingest as ai
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from hanzo_stream.client.router import Router
    from hanzo_stream.jobs import events
    from hanzo_stream.jobs.clickhouse import ChdbSink
    from hanzo_stream.jobs.contract import compile_contract
    from hanzo_stream.jobs.spark import connector_jars
    from hanzo_stream.registry import load_registry
    from hanzo_stream.schemas.store import load_schemas
    from hanzo_stream.schemas.validator import Validator

    home = Path(tempfile.mkdtemp(prefix="hs-stages-"))
    creds = credentials.of_home(home)
    cluster = kafka.start(home / "kafka", creds, heap_mb=1024)
    worker = None
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
        def source(**tuning: str):
            return (spark.read.format("kafka").options(**tuning)
                    .options(**{f"kafka.{k}": v for k, v in conn.java().items()})
                    .option("subscribe", EVENTS).option("startingOffsets", "earliest").load())

        src, tuned = source(), source(**events.KAFKA_SOURCE_TUNING)  # tuning first, as kafka_stream
        c = compile_contract(load_schemas(ROOT / "schemas"), load_registry(ROOT / "topics.yaml"), EVENTS)
        cached = src.localCheckpoint(eager=True)  # a copy in memory; `src` itself stays uncached
        sink = ChdbSink(home / "chdb")
        plain_sink = ChdbSink(home / "chdb", table="events_plain")  # same DDL, same embedded server
        router = Router(load_registry(ROOT / "topics.yaml"), Validator(load_schemas(ROOT / "schemas")))
        # ClickHouse's Kafka engine: chDB 4.4's librdkafka has SASL PLAIN only (no SCRAM), and the
        # CA file goes in the embedded server's start-up config, so it runs in a process of its own.
        ca_config = home / "chdb-kafka.xml"
        ca_config.write_text(f"<clickhouse><kafka><ssl_ca_location>{cluster.ca_file}</ssl_ca_location>"
                             "<ssl_endpoint_identification_algorithm>https</ssl_endpoint_identification_algorithm>"
                             + "".join(f"<{k.replace('.', '_')}>{v}</{k.replace('.', '_')}>"
                                       for k, v in PLAIN_FETCH.items())
                             + "</kafka></clickhouse>")
        ctx = mp.get_context("spawn")
        pipe, child = ctx.Pipe()
        worker = ctx.Process(target=ch_kafka_worker, daemon=True, args=(
            child, str(home / "chdb-kafka"), str(ca_config),
            {"bootstrap": conn.bootstrap, "username": conn.username, "password": conn.password}))
        worker.start()

        def ch_kafka() -> tuple[int, float]:
            pipe.send(args.events)
            return pipe.recv()

        def rows(df):
            return ai._rows(events.checked(df, c))

        def arrow(q) -> int:
            return sum(b.num_rows for b in q._collect_as_arrow())

        # Built once, as the job builds its query once (building the checks' expression tree
        # takes seconds of py4j calls); each run still plans and executes, as a micro-batch does.
        batch_q, batch16_q = rows(events.one_task_per_core(tuned)), rows(tuned)
        parse_q = rows(events.one_task_per_core(cached))

        def read(df) -> int:  # every value's bytes touched, nothing parsed
            return args.events if df.select(F.sum(F.length("value"))).collect()[0][0] else 0

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
            "read": lambda: read(src),
            "read-tuned": lambda: read(tuned),
            "batch": lambda: arrow(batch_q),  # as the job reads: tuned, one task per core
            "batch-16": lambda: arrow(batch16_q),  # one task per Kafka partition, as before
            "parse": lambda: arrow(parse_q),
            "insert": insert,
            "plain": lambda: plain(conn.confluent(), router, plain_sink, args.events),
            "plain-noval": lambda: plain(conn.confluent(), router, plain_sink, args.events, validate=False),
            "clickhouse-kafka": ch_kafka,
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
                took = time.perf_counter() - t
                if isinstance(n, tuple):  # (rows, seconds the stage timed itself)
                    n, took = n
                got[name] = n / took
                assert n == args.events or name == "raw" and n >= args.events, (name, n)
            for name in names:
                rates[name].append(got[name])
                ratios[name].append(got[name] / got["raw"])
            print(f"round {r + 1}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in got.items()), flush=True)
        pipe.send(None)
        worker.join(60)
        sink.close()
        plain_sink.close()
        spark.stop()
    finally:
        if worker is not None and worker.is_alive():
            worker.kill()
        kafka.stop(home / "kafka")

    med = {k: statistics.median(v) for k, v in rates.items()}
    ratio = {k: statistics.median(v) for k, v in ratios.items()}
    combined = 1 / (1 / med["batch"] + 1 / med["insert"])
    labels = {"raw": "Kafka ConsumerPerformance (one Java consumer)",
              "read": "Spark Kafka source alone (local[2])",
              "batch": "read + parse + checks + Arrow to the driver, one task per core (the job)",
              "batch-16": "the same, one task per Kafka partition (16; before)",
              "parse": "parse + checks + Arrow, rows cached (no Kafka)",
              "insert": "chDB insert of the valid rows",
              "read-tuned": "`read` with KAFKA_SOURCE_TUNING (4 MB partition fetch, 2 MB socket buffer)",
              "plain": "peer baseline: one confluent-kafka consumer, Router verdict, orjson, "
                       "chDB insert per 50,000",
              "plain-noval": "the same plain consumer without validation",
              "clickhouse-kafka": "ClickHouse Kafka table engine (chDB) + materialized view, "
                                  "no schema validation"}
    goal = combined / med["raw"] >= GOAL_RATIO and combined / med["raw"] > ratio["clickhouse-kafka"]
    us = {k: 1e6 / med[k] for k in STAGE_NAMES}  # wall µs per event, 2 cores
    body = (f"Goal (issue 26): analytics-ingest's batch then insert at {GOAL_RATIO:g}x of "
            f"ConsumerPerformance or more, and past the ClickHouse Kafka engine's ratio: "
            f"**{'met' if goal else 'not met'}** ({combined / med['raw']:.2f}x; the engine "
            f"{ratio['clickhouse-kafka']:.2f}x). Per event, each stage alone (wall time on the 2 cores): "
            f"Kafka read {us['read-tuned']:.1f} µs, parse + checks + Arrow {us['parse']:.1f} µs, "
            f"insert {us['insert']:.1f} µs; the largest is "
            f"{STAGE_NAMES[max(us, key=us.get)]}.\n\n")
    body += (f"`python bench/pipeline_stages.py --events {args.events} --rounds {args.rounds}` — "
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
    body += (f"\nOurs vs the plain-consumer peer baseline, same data and machine in the same run: "
             f"{combined:,.0f} vs {med['plain']:,.0f} events/s, {combined / med['plain']:.2f}x "
             "(the plain consumer validates every record with the client library's Router, builds the "
             "same columns and inserts into the same chDB table DDL with offset-range tokens; "
             "its rate runs from its first poll to its last insert done). `read-tuned` is `read` with "
             "KAFKA_SOURCE_TUNING, the source settings the job (and `batch`) uses. "
             "The Kafka engine inside chDB needs SASL PLAIN (its librdkafka "
             "has no SCRAM) and logs \"Shutdown was called\" on CREATE TABLE, yet its view consumes.\n")
    print(body)
    if not args.no_doc:
        write_section("Pipeline stages", body)


if __name__ == "__main__":
    main()
