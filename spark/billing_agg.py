"""billing-agg: llm_usage -> one billing.usage.hourly event per (team, org, hour).

Exactness, piece by piece:
- Windows are event-time hours, aggregated with Spark's state store under a watermark of
  `watermark` (spec) behind the newest event time seen. Append mode: a window is emitted
  once, when the watermark passes its end, with final totals. Money is never a float:
  cost_usd is read from its JSON decimal text into DECIMAL(38,12) (half-up past 12 places)
  and summed exactly; cost_micros is that exact total rounded half-up to micro-dollars.
- A retried event (same envelope id) is counted once: dropDuplicatesWithinWatermark(id).
- Every emission of a window has the same key (org_id, the registry key), billing_id and
  envelope id (hanzo_stream/jobs/billing_ids.py), so Spark's at-least-once replay of a batch
  only re-sends identical records, which downstream upserts by id absorb.
- Late data is dead-lettered, never dropped silently. Spark drops a row in batch N when its
  event time is at or before the watermark of batch N-1 (the "late events" watermark of
  the first stateful operator). The raw rows travel through the same query next to the
  windows (a union), and foreachBatch reads batch N-1's watermark from the checkpoint's
  offset log and dead-letters exactly those rows (error class `event.late`) with their
  provenance. The progress listener checks the count against Spark's own
  numRowsDroppedByWatermark and logs an error if they ever disagree.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from hanzo_stream.jobs import events
from hanzo_stream.jobs.offsets import read_offset_log
from hanzo_stream.jobs.runner import JobContext
from hanzo_stream.schemas.store import ENVELOPE

OUT_TYPE = "billing.usage.hourly"
COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")

QUERY = "aggregate"
LATE = "event.late"


def _uuid7(ms, hex_id):
    """SQL twin of billing_ids.event_id: UUIDv7 from a millisecond time and a hex digest."""
    ts = F.lpad(F.lower(F.hex(ms)), 12, "0")
    variant = F.lower(F.hex(F.conv(F.substring(hex_id, 4, 1), 16, 10).cast("int")
                            .bitwiseAND(3).bitwiseOR(8)))
    return F.concat_ws("-", F.substring(ts, 1, 8), F.substring(ts, 9, 4),
                       F.concat(F.lit("7"), F.substring(hex_id, 1, 3)),
                       F.concat(variant, F.substring(hex_id, 5, 3)), F.substring(hex_id, 8, 12))


def billing_records(windows, source: str):
    """Aggregated windows -> (key, value) of billing.usage.hourly envelopes, built in the JVM."""
    ws, we = F.col("window.start"), F.col("window.end")
    ws_iso, we_iso = events.iso(ws), events.iso(we)
    bid = F.sha2(F.concat_ws("|", "team_id", "org_id", ws_iso), 256)
    micros = (F.round("cost_usd", 6) * 1_000_000).cast("long")  # half-up on a decimal
    data = F.struct(bid.alias("billing_id"), "team_id", "org_id", ws_iso.alias("window_start"),
                    we_iso.alias("window_end"), *COUNTS, "cost_usd", micros.alias("cost_micros"),
                    "request_count")
    envelope = F.struct(
        F.lit(ENVELOPE).alias("schema"),
        _uuid7(F.unix_millis(we), bid).alias("id"), F.lit(OUT_TYPE).alias("type"),
        F.lit(source).alias("source"), we_iso.alias("timestamp"), "team_id", "org_id",
        data.alias("data"))
    return windows.select(F.lit("window").alias("kind"), F.col("org_id").cast("binary").alias("key"),
                          F.to_json(envelope).cast("binary").alias("value"))


def build(ctx: JobContext) -> list:
    spec = ctx.spec
    if not (spec.window_seconds and spec.watermark_seconds):
        raise ValueError(f"{spec.source_file}: billing-agg needs `window` and `watermark`")
    (topic,) = spec.topics
    out_topic = spec.sink("billing_events").get("topic")
    c = events.contract(ctx, topic)
    checked = events.checked(events.kafka_stream(ctx, topic), c)
    ok = F.col("error_class").isNull()
    usage = checked.where(ok).select(
        F.col("e.id").alias("id"), F.col("e.team_id").alias("team_id"),
        F.col("e.org_id").alias("org_id"), "event_time",
        *(F.col(f"e.data.{n}").alias(n) for n in (*COUNTS, "cost_usd")))
    windows = (usage.withWatermark("event_time", f"{spec.watermark_seconds} seconds")
               .dropDuplicatesWithinWatermark(["id"])
               .groupBy(F.window("event_time", f"{spec.window_seconds} seconds"), "team_id", "org_id")
               .agg(*(F.sum(n).alias(n) for n in (*COUNTS, "cost_usd")),
                    F.count(F.lit(1)).alias("request_count")))
    rows = checked.select(F.lit("row").alias("kind"), "key", "value", "topic", "partition",
                          "offset", "event_time", "error_class", "error_message")
    both = billing_records(windows, f"hanzo-stream/{spec.name}").unionByName(
        rows, allowMissingColumns=True)
    late_seen: dict[int, int] = {}

    def batch(df, batch_id: int) -> None:
        prev = read_offset_log(ctx.spark, spec.checkpoint_for(QUERY), batch_id - 1)
        late_ms = prev.watermark_ms if prev else 0
        late = (F.col("kind") == "row") & F.col("error_class").isNull() & (
            F.col("event_time") <= F.timestamp_millis(F.lit(late_ms)))
        late_msg = F.concat(F.lit("event time "), events.iso(F.col("event_time")), F.lit(
            f" is at or before the watermark {events.iso_ms(late_ms)}: its hour was billed or is "
            "closing; bill it through an adjustment"))
        out = (df.where((F.col("kind") == "window") | F.col("error_class").isNotNull() | late)
               .select("kind", "key", "value", "topic", "partition", "offset",
                       F.when(late, F.lit(LATE)).otherwise(F.col("error_class")).alias("error_class"),
                       F.when(late, late_msg).otherwise(F.col("error_message")).alias("error_message"))
               .collect())
        billed = [r for r in out if r["kind"] == "window"]
        bad = [r for r in out if r["kind"] == "row"]
        for r in billed:
            ctx.kafka_out.send(out_topic, bytes(r["key"]), bytes(r["value"]))
        if bad:
            ctx.kafka_out.dead_letter(events.rejected(bad, c.schema_id), ctx.stage,
                                      events.batch_time(ctx, QUERY, batch_id))
        ctx.kafka_out.flush_or_raise()
        late_seen[batch_id] = sum(1 for r in bad if r["error_class"] == LATE)
        ctx.metrics.write("batch", batch=batch_id, windows=len(billed), rejected=len(bad),
                          late=late_seen[batch_id], late_watermark_ms=late_ms)

    def check_late(progress: dict) -> None:
        """Spark's own count of rows it dropped as late must equal what we dead-lettered."""
        if progress.get("name") != ctx.query_name(QUERY):
            return
        dropped = sum(op.get("numRowsDroppedByWatermark", 0) for op in progress.get("stateOperators", []))
        ours = late_seen.pop(progress["batchId"], None)
        if ours is not None and ours != dropped:
            import logging

            logging.getLogger("hanzo_stream.jobs").error(
                "batch %s: Spark dropped %d late rows but %d were dead-lettered",
                progress["batchId"], dropped, ours)
            ctx.metrics.write("late_mismatch", batch=progress["batchId"], spark=dropped, ours=ours)

    ctx.progress_hooks.append(check_late)
    return [ctx.start(both.writeStream.outputMode("append").foreachBatch(batch), QUERY)]


if __name__ == "__main__":  # spark-submit spark/billing_agg.py [--once]
    import sys

    from hanzo_stream.jobs.cli import main

    main(["run", "billing-agg", *sys.argv[1:]])
