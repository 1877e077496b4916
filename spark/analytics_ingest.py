"""analytics-ingest: events_plugin_ingestion -> ClickHouse `events`, invalid -> dead_letter.

One query. Each micro-batch is validated in the JVM, collected to the driver as Arrow
(one copy, no per-row Python), inserted into ClickHouse in one block whose deduplication
token names the batch's Kafka offsets, and its invalid records are dead-lettered. Spark
commits the batch only after both succeed; a replay is absorbed by the token (and by the
ReplacingMergeTree key for producer retries). See hanzo_stream/jobs/clickhouse.py.

With the embedded chDB, the driver also answers read-only SQL over ClickHouse's HTTP interface
on 127.0.0.1 (hanzo_stream/jobs/chdb_http.py; `hanzo-stream local sql "SELECT ..."`).

Local: hanzo-stream jobs run analytics-ingest [--once]
Cluster: spark-submit --jars <connector jars> --py-files hanzo_stream.zip spark/analytics_ingest.py
"""

from __future__ import annotations

import os
import time

from pyspark.sql import functions as F

from hanzo_stream.jobs import chdb_http, events
from hanzo_stream.jobs.clickhouse import EVENTS_COLUMNS, ChdbSink, insert_token, open_sink
from hanzo_stream.jobs.runner import JobContext

EVENT_COLUMNS = [n for n, _ in EVENTS_COLUMNS]


def _rows(checked):
    """Event columns for valid rows, raw bytes only for invalid ones (keeps Arrow small).

    The validity test is evaluated once per row (one struct per side), not once per column.
    """
    ok = F.col("error_class").isNull()
    event = F.struct(
        F.col("e.id").alias("id"), F.col("e.team_id").alias("team_id"),
        F.col("e.org_id").alias("org_id"), F.col("e.data.event").alias("event"),
        F.col("e.data.distinct_id").alias("distinct_id"), F.col("event_time").alias("timestamp"),
        F.coalesce(F.col("e.data.properties"), F.lit("{}")).alias("properties"),
        F.col("e.data.session_id").alias("session_id"), F.col("e.data.ip").alias("ip"),
        F.try_to_timestamp(F.col("e.data.sent_at"), F.lit(events.TS_FORMAT)).alias("sent_at"),
        F.col("e.source").alias("source"))
    raw = F.struct(F.col("key").alias("key"), F.col("value").alias("value"))
    return checked.select(
        F.when(ok, event).alias("ev"), F.when(~ok, raw).alias("raw"),
        F.col("partition").alias("_partition"), F.col("offset").alias("_offset"),
        F.col("kafka_timestamp").alias("_kafka_timestamp"), "topic", "error_class", "error_message",
    ).select("ev.*", "_partition", "_offset", "_kafka_timestamp", "topic", "raw.*",
             "error_class", "error_message")


def build(ctx: JobContext) -> list:
    import pyarrow as pa
    import pyarrow.compute as pc

    (topic,) = ctx.spec.topics
    sink_spec = ctx.spec.sink("events")
    sink = open_sink(os.environ.get("HANZO_STREAM_CLICKHOUSE_URL") or sink_spec.get("url"),
                     ctx.spec.resolve(sink_spec.get("chdb_path", f"jobs/{ctx.spec.name}/chdb")),
                     sink_spec.get("table", "events"))
    ctx.on_close(sink.close)
    if isinstance(sink, ChdbSink):  # this driver owns the embedded ClickHouse: serve it read-only
        sql = chdb_http.serve(sink.path, sink.lock, int(os.environ.get(chdb_http.PORT_ENV) or 0),
                              ctx.spec.state_dir)
        ctx.on_close(sql.close)  # closed first: before the sink's own session
    c = events.contract(ctx, topic)
    rows = _rows(events.checked(events.kafka_stream(ctx, topic), c))

    def batch(df, batch_id: int) -> None:
        t0 = time.time()
        arrow = df._collect_as_arrow()
        t1 = time.time()
        if not arrow:
            return
        table = pa.Table.from_batches(arrow)
        bad = pc.is_valid(table["error_class"])
        valid = table.filter(pc.invert(bad)).select(EVENT_COLUMNS)
        invalid = table.filter(bad)
        if valid.num_rows:
            sink.write(valid, insert_token(ctx.spec.name, _ranges(table)))
            ctx.report(clickhouse_rows=sink.count())
        t2 = time.time()
        if invalid.num_rows:
            failed_at = events.batch_time(ctx, "ingest", batch_id)
            ctx.kafka_out.dead_letter(events.rejected(invalid.to_pylist(), c,
                                                      "_partition", "_offset"),
                                      ctx.stage, failed_at)
            ctx.kafka_out.flush_or_raise()
        done = time.time()
        if ctx.metrics.path is not None:
            lat = pc.subtract(pa.scalar(int(done * 1000), pa.int64()),
                              pc.cast(pc.cast(valid["_kafka_timestamp"], pa.timestamp("ms", "UTC")),
                                      pa.int64())).to_numpy(zero_copy_only=False)
            ctx.metrics.write("batch", batch=batch_id, rows=table.num_rows,
                              valid=valid.num_rows, invalid=invalid.num_rows,
                              collect_s=t1 - t0, insert_s=t2 - t1, dead_letter_s=done - t2,
                              latency_ms=_histogram(lat))

    return [ctx.start(rows.writeStream.foreachBatch(batch), "ingest")]


def _ranges(table) -> dict[int, tuple[int, int]]:
    g = table.group_by("_partition").aggregate([("_offset", "min"), ("_offset", "max")])
    return {int(p): (int(lo), int(hi)) for p, lo, hi in
            zip(g["_partition"].to_pylist(), g["_offset_min"].to_pylist(),
                g["_offset_max"].to_pylist(), strict=True)}


def _histogram(latencies_ms) -> dict[int, int]:
    """Counts per 10 ms bucket: merged across batches, exact enough for p50/p99."""
    import numpy as np

    buckets, counts = np.unique(np.asarray(latencies_ms) // 10 * 10, return_counts=True)
    return {int(b): int(c) for b, c in zip(buckets, counts, strict=True)}


if __name__ == "__main__":  # spark-submit spark/analytics_ingest.py [--once]
    import sys

    from hanzo_stream.jobs.cli import main

    main(["run", "analytics-ingest", *sys.argv[1:]])
