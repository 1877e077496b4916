"""What every job does with its topic: read it, check each record against schemas/, read the
valid ones into typed columns, and hand the rest to the dead-letter writer.

The checks are compiled from the JSON Schemas (hanzo_stream/jobs/contract.py), so a job and
the client library refuse exactly the same records, and a schema change reaches both at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..client.envelope import iso_ms
from .contract import EVENT_AT, TS_FORMAT, Contract, classify, compile_contract
from .kafka_out import Rejected

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from .runner import JobContext

ISO_MS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
REJECT_COLUMNS = ("topic", "partition", "offset", "key", "value", "error_class", "error_message")
# Spark Kafka source options sized like Kafka's ConsumerPerformance defaults (its 1 MB fetch size
# x4 and 2 MB socket buffer) instead of the Java consumer's 1 MB / 64 KB: 2 KB events, catch-up.
# Every job's source gets them (kafka_stream); bench/pipeline_stages.py measures read vs read-tuned.
KAFKA_SOURCE_TUNING: dict[str, str] = {
    "kafka.fetch.max.bytes": "52428800",
    "kafka.max.partition.fetch.bytes": "4194304",
    "kafka.receive.buffer.bytes": "2097152",
}


def contract(ctx: JobContext, topic: str) -> Contract:
    return compile_contract(ctx.schemas, ctx.registry, topic)


def kafka_stream(ctx: JobContext, topic: str) -> DataFrame:
    """The topic as a stream, read as the job's principal; never with kafka.group.id."""
    reader = (ctx.spark.readStream.format("kafka").options(**KAFKA_SOURCE_TUNING)
              .options(**ctx.kafka_options())
              .option("subscribe", topic)
              .option("startingOffsets", "earliest")  # a new checkpoint reads everything retained
              .option("failOnDataLoss", "true")  # retention outran the job: stop, see the runbook
              .option("groupIdPrefix", f"{ctx.spec.name}-spark"))
    if ctx.spec.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(ctx.spec.max_offsets_per_trigger))
    return one_task_per_core(reader.load())


def one_task_per_core(src: DataFrame) -> DataFrame:
    """A batch in as many tasks as there are cores, not one per Kafka partition.

    Each task sets up the contract's projection (hundreds of rules: its code is generated and
    compiled per task), a cost per task, not per row: with 16 partitions on 2 cores the checks
    ran at half the rate (bench/pipeline_stages.py). coalesce only merges partitions, no
    shuffle, so a cluster with more cores than partitions keeps one task per partition."""
    return src.coalesce(src.sparkSession.sparkContext.defaultParallelism)


def checked(src: DataFrame, c: Contract) -> DataFrame:
    """Kafka rows -> provenance columns, `e` (the event, typed; null unless valid),
    `event_time`, and `error_class`/`error_message` (both null for a valid record)."""
    from pyspark.sql import functions as F

    rows = src.select("topic", "partition", "offset", "key", "value",
                      F.col("timestamp").alias("kafka_timestamp"))
    ok = F.col("error_class").isNull()
    e = F.when(ok, F.try_variant_get(F.col("event"), EVENT_AT, c.struct().simpleString()))
    return (classify(c, rows).select("topic", "partition", "offset", "key", "value", "kafka_timestamp",
                                     e.alias("e"), "error_class", "error_message")
            .withColumn("event_time", F.try_to_timestamp(F.col("e.timestamp"), F.lit(TS_FORMAT))))


FUTURE = "event.future"


def refuse_future(rows: DataFrame, seconds: int) -> DataFrame:
    """Valid rows whose event time is more than `seconds` ahead of the batch's time become
    `event.future` rejections, before any watermark sees them.

    A watermark follows the newest event time, so one producer whose clock runs ahead (Kafka
    accepts record times up to an hour ahead) would make every other producer's events late.
    The reference is the micro-batch's timestamp (current_timestamp() in a stream), the job's
    own clock recorded in the checkpoint's offset log: a replayed batch gives the same verdicts,
    and an honest event, written before its batch was planned, is never ahead of it."""
    from pyspark.sql import functions as F

    now = F.current_timestamp()
    ahead = F.coalesce(F.col("error_class").isNull() & (
        F.col("event_time") > now + F.make_dt_interval(secs=F.lit(seconds))), F.lit(False))
    message = F.concat(
        F.lit("event time "), iso(F.col("event_time")), F.lit(" is more than "),
        F.lit(f"{seconds} s ahead of the job's clock ("), iso(now),
        F.lit("): the producer's clock is wrong; fix it, then replay this letter"))
    return rows.withColumns({  # all three read the input's columns
        "error_class": F.when(ahead, F.lit(FUTURE)).otherwise(F.col("error_class")),
        "error_message": F.when(ahead, message).otherwise(F.col("error_message")),
        "e": F.when(~ahead, F.col("e"))})


def iso(col: Column) -> Column:
    """A timestamp as the contract's ISO 8601 UTC string with milliseconds."""
    from pyspark.sql import functions as F

    return F.date_format(col, ISO_MS)




def rejected(rows: Iterable, c: Contract, partition: str = "partition",
             offset: str = "offset") -> list[Rejected]:
    """Collected rows with REJECT_COLUMNS -> records for the dead-letter writer, each verdict
    final (Contract.settle)."""
    out = []
    for r in rows:
        value = bytes(r["value"]) if r["value"] is not None else None
        error_class, message = c.settle(value, r["error_class"], r["error_message"])
        out.append(Rejected(r["topic"], int(r[partition]), int(r[offset]),
                            bytes(r["key"]) if r["key"] is not None else None, value,
                            error_class, message, c.schema_id))
    return out


def batch_time(ctx: JobContext, query: str, batch_id: int) -> str:
    """The batch's own timestamp from the offset log: a replay stamps the same failed-at."""
    from .offsets import read_offset_log

    entry = read_offset_log(ctx.spark, ctx.spec.checkpoint_for(query), batch_id)
    return iso_ms(entry.timestamp_ms) if entry else iso_ms()
