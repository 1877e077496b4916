"""Shared code of the PySpark jobs: read a topic, parse and validate events in the JVM,
hand rejected records to the dead-letter writer.

Validation is from_json with an explicit StructType plus SQL checks, evaluated per row in
the JVM; no Python UDF touches the hot path. Each check is (failure condition, error
class, message) and the first failing check names the record's error, as the client
library does when it refuses to produce. Spark's JSON reader is lenient in one way the
client is not: a number where a string is expected is read as its text; integers, objects
and enums are strict (a mismatched type lands in the `_corrupt` column and is rejected).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hanzo_stream.jobs.kafka_out import Rejected
from hanzo_stream.jobs.runner import JobContext

ENVELOPE = "hanzo.stream.v1"
ISO_MS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
ISO_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"
ULID_PATTERN = r"^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$"
UUID7_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-7[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$"

S = T.StringType()
L = T.LongType()


def envelope_schema(data: T.StructType) -> T.StructType:
    return T.StructType([
        T.StructField("schema", S), T.StructField("id", S), T.StructField("type", S),
        T.StructField("source", S), T.StructField("timestamp", S), T.StructField("team_id", S),
        T.StructField("org_id", S), T.StructField("data", data), T.StructField("_corrupt", S),
    ])


@dataclass(frozen=True)
class Check:
    """A rule a record must pass: `failed` is true when it does not."""

    failed: Column
    error_class: str
    message: str


@dataclass(frozen=True)
class EventContract:
    """What a topic's events must look like: data schema, key fields, data checks."""

    event_types: tuple[str, ...]
    data: T.StructType
    required_envelope: tuple[str, ...] = ()  # e.g. ("team_id",): the registry key
    data_checks: tuple[Check, ...] = ()

    @property
    def schema_id(self) -> str:
        return self.event_types[0] if len(self.event_types) == 1 else "hanzo.stream.v1"

    def integer_fields(self) -> list[str]:
        return [f"data.{f.name}" for f in self.data.fields if isinstance(f.dataType, T.LongType)]


def kafka_stream(ctx: JobContext, topic: str) -> DataFrame:
    """The topic as a stream, read as the job's principal; never with kafka.group.id."""
    reader = (ctx.spark.readStream.format("kafka").options(**ctx.kafka_options())
              .option("subscribe", topic)
              .option("startingOffsets", "earliest")  # a new checkpoint reads everything retained
              .option("failOnDataLoss", "true")  # retention outran the job: stop, see the runbook
              .option("groupIdPrefix", f"{ctx.spec.name}-spark"))
    if ctx.spec.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(ctx.spec.max_offsets_per_trigger))
    return reader.load()


def parse(src: DataFrame, contract: EventContract) -> DataFrame:
    """Kafka rows -> provenance columns + `e`, the envelope parsed with the contract's schema."""
    raw = F.col("value").cast("string")
    return src.select(
        "topic", "partition", "offset", "key", "value",
        F.col("timestamp").alias("kafka_timestamp"),
        F.from_json(raw, envelope_schema(contract.data),
                    {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}).alias("e"),
    ).withColumn("event_time", F.to_timestamp(F.col("e.timestamp"), "yyyy-MM-dd'T'HH:mm:ss.SSSX"))


def _missing(c: str) -> Column:
    col = F.col(f"e.{c}")
    return col.isNull() | (F.length(col) == 0)


def _type_error_message(contract: EventContract) -> Column:
    """Name the first integer or object field whose JSON type is wrong (rare path only)."""
    raw = F.col("value").cast("string")
    msg = F.lit(f"a field has the wrong JSON type for {contract.schema_id}; check the event "
                "against its JSON Schema in schemas/")
    for name in reversed(contract.integer_fields()):
        text = F.get_json_object(raw, f"$.{name}")
        msg = F.when(text.isNotNull() & ~text.rlike(r"^-?[0-9]{1,18}$"),
                     F.lit(f"`{name}` must be a JSON integer (no quotes, no decimals); "
                           f"send it as a whole number")).otherwise(msg)
    data = F.get_json_object(raw, "$.data")
    return F.when(data.isNotNull() & ~data.startswith("{"),
                  F.lit("`data` must be a JSON object; wrap the event's fields in {...}")
                  ).otherwise(msg)


def envelope_checks(contract: EventContract) -> list[Check]:
    raw = F.col("value").cast("string")
    types = ", ".join(contract.event_types)
    checks = [
        Check(F.col("value").isNull(), "json.malformed",
              "the record has no value (a tombstone); produce the event JSON as the value"),
        Check(F.col("e").isNull() | (F.col("e._corrupt").isNotNull() & F.json_object_keys(raw).isNull()),
              "json.malformed", "the value is not a JSON object; produce one UTF-8 JSON "
              "object per record"),
        Check(F.col("e._corrupt").isNotNull(), "schema.type", ""),  # message: _type_error_message
    ]
    for name in ("schema", "id", "type", "source", "timestamp"):
        checks.append(Check(_missing(name), "schema.required",
                            f"`{name}` is missing; every {ENVELOPE} envelope carries it"))
    checks += [
        Check(F.col("e.data").isNull(), "schema.required",
              "`data` is missing; put the event's fields in a `data` object"),
        Check(F.col("e.schema") != ENVELOPE, "schema.value",
              f"`schema` must be \"{ENVELOPE}\""),
        Check(~(F.col("e.id").rlike(ULID_PATTERN) | F.col("e.id").rlike(UUID7_PATTERN)),
              "schema.value", "`id` must be a ULID or a UUIDv7; generate one per event and "
              "reuse it on retries"),
        Check(~F.col("e.type").isin(*contract.event_types), "schema.value",
              f"`type` must be one of {types} on this topic; produce other types to their own topic"),
        Check(~F.col("e.timestamp").rlike(ISO_PATTERN) | F.col("event_time").isNull(),
              "schema.value", "`timestamp` must be ISO 8601 UTC with milliseconds, e.g. "
              "2026-11-22T10:00:00.123Z"),
    ]
    for name in contract.required_envelope:
        checks.append(Check(_missing(name), "schema.required",
                            f"`{name}` is missing; it is this topic's key and is required"))
    return checks


def validate(df: DataFrame, contract: EventContract) -> DataFrame:
    """Add error_class and error_message (both null for a valid record)."""
    checks = envelope_checks(contract) + list(contract.data_checks)
    cls: Column = F.lit(None).cast("string")
    msg: Column = F.lit(None).cast("string")
    type_msg = _type_error_message(contract)
    for c in reversed(checks):
        cls = F.when(c.failed, F.lit(c.error_class)).otherwise(cls)
        msg = F.when(c.failed, type_msg if c.error_class == "schema.type" and not c.message
                     else F.lit(c.message)).otherwise(msg)
    return df.withColumn("error_class", cls).withColumn("error_message", msg)


def required_strings(names: Iterable[str], event: str) -> list[Check]:
    return [Check(F.col(f"e.data.{n}").isNull() | (F.length(F.col(f"e.data.{n}")) == 0),
                  "schema.required", f"`data.{n}` is missing; {event} requires it")
            for n in names]


def non_negative_ints(names: Iterable[str], event: str, required: bool = True) -> list[Check]:
    out = []
    for n in names:
        col = F.col(f"e.data.{n}")
        if required:
            out.append(Check(col.isNull(), "schema.required",
                             f"`data.{n}` is missing; {event} requires it as an integer >= 0"))
        out.append(Check(col < 0, "schema.value", f"`data.{n}` must be >= 0"))
    return out


def one_of(name: str, values: Sequence[str], required: bool = True) -> list[Check]:
    col = F.col(f"e.data.{name}")
    out = []
    if required:
        out.append(Check(col.isNull(), "schema.required", f"`data.{name}` is missing"))
    out.append(Check(col.isNotNull() & ~col.isin(*values), "schema.value",
                     f"`data.{name}` must be one of {', '.join(values)}"))
    return out


def iso(col: Column) -> Column:
    """A timestamp as the contract's ISO 8601 UTC string with milliseconds."""
    return F.date_format(col, ISO_MS)


def iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


REJECT_COLUMNS = ("topic", "partition", "offset", "key", "value", "error_class", "error_message")


def rejected(rows: Iterable, schema_id: str, partition: str = "partition",
             offset: str = "offset") -> list[Rejected]:
    """Collected rows with REJECT_COLUMNS -> records for the dead-letter writer."""
    return [Rejected(r["topic"], int(r[partition]), int(r[offset]),
                     bytes(r["key"]) if r["key"] is not None else None,
                     bytes(r["value"]) if r["value"] is not None else None,
                     r["error_class"], r["error_message"], schema_id) for r in rows]


def batch_time(ctx: JobContext, query: str, batch_id: int) -> str:
    """The batch's own timestamp from the offset log: a replay stamps the same failed-at."""
    from hanzo_stream.jobs.offsets import read_offset_log

    entry = read_offset_log(ctx.spark, ctx.spec.checkpoint_for(query), batch_id)
    return iso_ms(entry.timestamp_ms) if entry else iso_ms(int(datetime.now(UTC).timestamp() * 1000))
