"""audit-archive: audit_log -> Parquet partitioned by org_id and date; invalid -> dead_letter.

Two queries over the one topic, each with its own checkpoint:
- `archive`: valid events through Spark's file sink. Exactly once for Spark readers: a
  batch's files count only once the batch is recorded in <path>/_spark_metadata.
  Readers that list the directory instead (pyarrow, Athena, ClickHouse's s3()) can also see
  files of a batch that failed half-way and was then rewritten under new names; they must
  read the metadata log (hanzo_stream.jobs.archive.committed_files) or dedupe by `id`.
- `dead-letter`: invalid records to dead_letter with provenance.
The group's committed offset of a partition is the smaller of the two queries' progress.

Duplicates: Kafka delivery is at least once (a producer's resend, librdkafka re-writing a
batch), so the same envelope `id` can arrive twice. The archive keeps the first copy seen
within `dedupe_window` of processing time (dropDuplicatesWithinWatermark on the batch's
arrival time, not the event's: no audit event is ever too late to be archived) and reports
the copies dropped (hanzo_stream_spark_duplicates_dropped_total). A checkpoint written before
deduplication existed holds no state and Spark cannot add it: that query archives as before,
with a warning, until it is given a new archive path and checkpoint (docs/jobs.md).
"""

from __future__ import annotations

import logging

from pyspark.sql import functions as F

from hanzo_stream.jobs import events
from hanzo_stream.jobs.archive import archive_path
from hanzo_stream.jobs.runner import JobContext

log = logging.getLogger("hanzo_stream.jobs")
ARRIVED = "_arrived"  # the batch's processing time: the dedupe window's clock
DEDUPE_WINDOW_S = 3600  # when the spec names none


def build(ctx: JobContext) -> list:
    (topic,) = ctx.spec.topics
    c = events.contract(ctx, topic)
    checked = events.checked(events.kafka_stream(ctx, topic), c)
    ok = F.col("error_class").isNull()
    data_fields = [f.name for f in c.struct()["data"].dataType.fields]  # every field of schemas/
    archived = checked.where(ok).select(
        F.col("e.id").alias("id"), F.col("e.type").alias("type"), F.col("e.source").alias("source"),
        F.col("event_time").alias("timestamp"), F.col("e.team_id").alias("team_id"),
        *(F.col(f"e.data.{n}").alias(n) for n in data_fields),
        F.col("value").cast("string").alias("raw"),  # the event as received, for forensics
        F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"),
        F.col("e.org_id").alias("org_id"), F.to_date("event_time").alias("date"))
    if ctx.checkpoint_without_state("archive"):
        log.warning("audit-archive: the archive checkpoint %s predates deduplication; archiving "
                    "without it (docs/jobs.md: audit-archive, duplicates)",
                    ctx.spec.checkpoint_for("archive"))
    else:
        window = ctx.spec.dedupe_window_seconds or DEDUPE_WINDOW_S
        archived = (archived.withColumn(ARRIVED, F.current_timestamp())
                    .withWatermark(ARRIVED, f"{window} seconds")
                    .dropDuplicatesWithinWatermark(["id"]).drop(ARRIVED))
    archive = ctx.start(archived.writeStream.format("parquet").option("path", archive_path(ctx.spec))
                        .partitionBy("org_id", "date").outputMode("append"), "archive")

    bad = checked.where(~ok).select(*events.REJECT_COLUMNS)

    def dead_letter(df, batch_id: int) -> None:
        rows = df.collect()
        if rows:
            ctx.kafka_out.dead_letter(events.rejected(rows, c), ctx.stage,
                                      events.batch_time(ctx, "dead-letter", batch_id))
            ctx.kafka_out.flush_or_raise()

    rejects = ctx.start(bad.writeStream.foreachBatch(dead_letter), "dead-letter")
    return [archive, rejects]


if __name__ == "__main__":  # spark-submit spark/audit_archive.py [--once]
    import sys

    from hanzo_stream.jobs.cli import main

    main(["run", "audit-archive", *sys.argv[1:]])
