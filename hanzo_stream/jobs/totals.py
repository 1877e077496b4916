"""One engine for exact event-time window totals, configured by a spec's `aggregate:` block.

billing-agg (llm_usage -> billing.usage.hourly per team and org) and rpc-billing
(agent_rpc_metering -> agent.rpc.settled per agent) are this engine with two specs
(consumers/*.yaml); spark/<job>.py only hands the JobContext over. Exactness, piece by piece:

- Windows are event-time windows (`window`, one hour), aggregated in Spark's state store
  under a watermark of `watermark` behind the newest event time seen. Append mode: a window
  is emitted once, when the watermark passes its end, with final totals. Money is never a
  float: the `money` field is read from its JSON decimal text into DECIMAL(38,12) (half-up
  past 12 places) and summed exactly; `micros` is that exact total rounded half-up to
  micro-dollars; `sum` fields are integer sums and `count` counts events.
- A retried event (same envelope id) is counted once: dropDuplicatesWithinWatermark(id).
- Every emission of a window has the same key (the output topic's registry key, one of
  `by`), the same `id_field` (hex sha256 of the `by` values and the window start, joined by
  "|") and the same envelope id (a UUIDv7 of the window end and that digest,
  hanzo_stream/jobs/billing_ids.py), so Spark's at-least-once replay of a batch only
  re-sends identical records, which downstream upserts by id absorb.
- Late data is dead-lettered, never dropped silently. Spark drops a row in batch N when its
  event time is at or before the watermark of batch N-1 (the "late events" watermark of the
  first stateful operator). The raw rows travel through the same query next to the windows
  (a union), and foreachBatch reads batch N-1's watermark from the checkpoint's offset log
  and dead-letters exactly those rows (error class `event.late`) with their provenance. The
  progress listener checks the count against Spark's own numRowsDroppedByWatermark and logs
  an error if they ever disagree.
- An event time more than `future` (1 minute) ahead of the batch's own time is dead-lettered
  (`event.future`) before the watermark sees it: one producer's fast clock cannot move the
  watermark and make everyone else's events late (events.refuse_future).
- A `postgres` sink gets the same records after Kafka has them, upserted by `id_field` in one
  transaction (hanzo_stream/jobs/postgres.py): a replay rewrites identical rows.

`check_fields()` holds a spec against schemas/ before any query starts, so a `by` field that
may be missing, a summed field that is not an integer, or an output schema that does not
match what the engine writes fails the job at start with the file and field to fix.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from ..client.envelope import iso_ms
from ..schemas.store import ENVELOPE, ENVELOPE_ID, SchemaSet
from .spec import Aggregate, JobSpec

if TYPE_CHECKING:
    from .runner import JobContext

log = logging.getLogger("hanzo_stream.jobs")

QUERY = "aggregate"
LATE = "event.late"
WINDOW_FIELDS = ("window_start", "window_end")


# ---------------------------------------------------------------- the spec against schemas/

def _props(schema: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Properties and required names of a schema, allOf parts included (the schema's own
    properties win: an event type narrows the envelope's `data`)."""
    props: dict[str, Any] = {}
    required: set[str] = set()
    for part in [*schema.get("allOf", []), schema]:
        props |= part.get("properties", {})
        required |= set(part.get("required", []))
    return props, required


def locate(schemas: SchemaSet, event_type: str, name: str) -> tuple[str, dict[str, Any], bool] | None:
    """Where an event type carries `name`: ("envelope" | "data", its schema, required?)."""
    env_props, env_required = _props(schemas.inline(schemas.by_id[ENVELOPE_ID]))
    root_props, root_required = _props(schemas.bundle(event_type))
    if name in env_props and name != "data":
        return "envelope", env_props[name], name in env_required | root_required
    data_props, data_required = _props(root_props.get("data", {}))
    if name in data_props:
        return "data", data_props[name], name in data_required
    return None


def output_data_fields(agg: Aggregate) -> tuple[str, ...]:
    """The output event's data fields, in the order the engine writes them."""
    return (agg.id_field, *agg.by, *WINDOW_FIELDS, *agg.sums, agg.money, agg.micros, agg.count)


def check_fields(spec: JobSpec, schemas: SchemaSet, input_types: tuple[str, ...]) -> list[str]:
    """Problems between the spec's `aggregate:` and the input and output schemas."""
    agg = spec.aggregate
    assert agg is not None
    where = f"{spec.source_file}: aggregate"
    problems = []

    def want(field: str, role: str, types: set[str], required: bool) -> None:
        for t in input_types:
            found = locate(schemas, t, field)
            if found is None:
                problems.append(f"{where}.{role}: {t} has no field {field!r} (schemas/events/{t}.json)")
                continue
            _, sub, is_required = found
            if required and not is_required:
                problems.append(f"{where}.{role}: {field!r} is optional in {t}; a record is per "
                                "`by` values, so each must be required by the schema")
            got = sub.get("type")
            if types and got not in types:
                problems.append(f"{where}.{role}: {t}'s {field!r} is {got!r}, "
                                f"not {' or '.join(sorted(types))}")

    for b in agg.by:
        want(b, "by", {"string"}, True)
    for s in agg.sums:
        want(s, "sum", {"integer"}, True)
    want(agg.money, "money", {"number"}, True)
    if agg.output not in schemas.events:
        return [*problems, f"{where}.output: schemas/events/{agg.output}.json does not exist"]
    out_props, out_required = _props(_props(schemas.bundle(agg.output))[0].get("data", {}))
    written = set(output_data_fields(agg))
    if set(out_props) != written or not written <= out_required:
        problems.append(f"{where}.output: schemas/events/{agg.output}.json's data must require exactly "
                        f"the fields the engine writes: {', '.join(output_data_fields(agg))} "
                        f"(it has {', '.join(out_props)})")
    return problems


# ---------------------------------------------------------------- the query

def _uuid7(ms, hex_id):
    """SQL twin of billing_ids.event_id: UUIDv7 from a millisecond time and a hex digest."""
    from pyspark.sql import functions as F

    ts = F.lpad(F.lower(F.hex(ms)), 12, "0")
    variant = F.lower(F.hex(F.conv(F.substring(hex_id, 4, 1), 16, 10).cast("int")
                            .bitwiseAND(3).bitwiseOR(8)))
    return F.concat_ws("-", F.substring(ts, 1, 8), F.substring(ts, 9, 4),
                       F.concat(F.lit("7"), F.substring(hex_id, 1, 3)),
                       F.concat(variant, F.substring(hex_id, 5, 3)), F.substring(hex_id, 8, 12))


def records(windows, agg: Aggregate, key: str, envelope_fields: tuple[str, ...], source: str):
    """Aggregated windows -> (key, value) of `agg.output` envelopes, built in the JVM."""
    from pyspark.sql import functions as F

    from . import events

    ws, we = F.col("window.start"), F.col("window.end")
    ws_iso, we_iso = events.iso(ws), events.iso(we)
    rid = F.sha2(F.concat_ws("|", *agg.by, ws_iso), 256)  # `by` fields are required: never null
    micros = (F.round(agg.money, 6) * 1_000_000).cast("long")  # half-up on a decimal
    data = F.struct(rid.alias(agg.id_field), *agg.by, ws_iso.alias("window_start"),
                    we_iso.alias("window_end"), *agg.sums, agg.money, micros.alias(agg.micros),
                    agg.count)
    envelope = F.struct(
        F.lit(ENVELOPE).alias("schema"), _uuid7(F.unix_millis(we), rid).alias("id"),
        F.lit(agg.output).alias("type"), F.lit(source).alias("source"), we_iso.alias("timestamp"),
        *envelope_fields, data.alias("data"))
    return windows.select(F.lit("window").alias("kind"), F.col(key).cast("binary").alias("key"),
                          F.to_json(envelope).cast("binary").alias("value"))


def postgres_sinks(spec: JobSpec, environ: dict[str, str]) -> list:
    """The spec's postgres sinks whose DSN variable is set; each is migrated and checked now."""
    from .postgres import DSN_ENV, PostgresSink

    agg = spec.aggregate
    assert agg is not None
    out = []
    for s in spec.sinks.values():
        if s.type != "postgres":
            continue
        var = s.get("dsn_env", DSN_ENV)
        dsn = environ.get(var)
        if not dsn:
            log.info("sink %s is off: %s is not set (docs/jobs.md, postgres)", s.name, var)
            continue
        sink = PostgresSink(s.name, dsn, s.get("table"), output_data_fields(agg),
                            f"{spec.source_file}: sinks.{s.name}")
        applied = sink.prepare()
        log.info("sink %s: table %s ready%s", s.name, sink.table,
                 f" (migrations {', '.join(applied)} applied)" if applied else "")
        out.append(sink)
    return out


def build(ctx: JobContext) -> list:
    """The job's one query: checked input -> windows + rejected rows -> foreachBatch."""
    from pyspark.sql import functions as F

    from . import events
    from .offsets import read_offset_log

    spec = ctx.spec
    agg = spec.aggregate
    if agg is None or not (spec.window_seconds and spec.watermark_seconds):
        raise ValueError(f"{spec.source_file}: {spec.name} needs `aggregate`, `window` and `watermark`")
    (topic,) = spec.topics
    out_topic = spec.sink(agg.sink).get("topic")
    c = events.contract(ctx, topic)
    assert ctx.schemas is not None
    problems = check_fields(spec, ctx.schemas, c.event_types)
    if problems:
        raise ValueError("\n".join(problems))
    place = {f: locate(ctx.schemas, c.event_types[0], f)[0] for f in agg.by}  # type: ignore[index]
    checked = events.checked(events.kafka_stream(ctx, topic), c)
    if spec.future_seconds:
        checked = events.refuse_future(checked, spec.future_seconds)
    ok = F.col("error_class").isNull()
    inputs = checked.where(ok).select(
        F.col("e.id").alias("id"), "event_time",
        *(F.col(f"e.{f}" if place[f] == "envelope" else f"e.data.{f}").alias(f) for f in agg.by),
        *(F.col(f"e.data.{n}").alias(n) for n in (*agg.sums, agg.money)))
    windows = (inputs.withWatermark("event_time", f"{spec.watermark_seconds} seconds")
               .dropDuplicatesWithinWatermark(["id"])
               .groupBy(F.window("event_time", f"{spec.window_seconds} seconds"), *agg.by)
               .agg(*(F.sum(n).alias(n) for n in (*agg.sums, agg.money)),
                    F.count(F.lit(1)).alias(agg.count)))
    rows = checked.select(F.lit("row").alias("kind"), "key", "value", "topic", "partition",
                          "offset", "event_time", "error_class", "error_message")
    key = ctx.registry.topic(out_topic).key
    envelope_fields = tuple(f for f in agg.by if place[f] == "envelope")
    both = records(windows, agg, key, envelope_fields, f"hanzo-stream/{spec.name}").unionByName(
        rows, allowMissingColumns=True)
    late_seen: dict[int, int] = {}
    tables = postgres_sinks(spec, dict(os.environ))

    def batch(df, batch_id: int) -> None:
        prev = read_offset_log(ctx.spark, spec.checkpoint_for(QUERY), batch_id - 1)
        late_ms = prev.watermark_ms if prev else 0
        late = (F.col("kind") == "row") & F.col("error_class").isNull() & (
            F.col("event_time") <= F.timestamp_millis(F.lit(late_ms)))
        late_msg = F.concat(F.lit("event time "), events.iso(F.col("event_time")), F.lit(
            f" is at or before the watermark {iso_ms(late_ms)}: its hour was settled or is "
            "closing; settle it through an adjustment"))
        out = (df.where((F.col("kind") == "window") | F.col("error_class").isNotNull() | late)
               .select("kind", "key", "value", "topic", "partition", "offset",
                       F.when(late, F.lit(LATE)).otherwise(F.col("error_class")).alias("error_class"),
                       F.when(late, late_msg).otherwise(F.col("error_message")).alias("error_message"))
               .collect())
        emitted = [r for r in out if r["kind"] == "window"]
        bad = [r for r in out if r["kind"] == "row"]
        for r in emitted:
            ctx.kafka_out.send(out_topic, bytes(r["key"]), bytes(r["value"]))
        if bad:
            ctx.kafka_out.dead_letter(events.rejected(bad, c), ctx.stage,
                                      events.batch_time(ctx, QUERY, batch_id))
        ctx.kafka_out.flush_or_raise()
        rows: dict[str, int] = {}
        for t in tables if emitted else ():  # after Kafka: a crash here replays both
            rows[t.name] = t.write([bytes(r["value"]) for r in emitted])[0]
        late_seen[batch_id] = sum(1 for r in bad if r["error_class"] == LATE)
        ctx.metrics.write("batch", batch=batch_id, windows=len(emitted), rejected=len(bad),
                          late=late_seen[batch_id], late_watermark_ms=late_ms,
                          **{f"{k}_inserted": n for k, n in rows.items()})

    def check_late(progress: dict) -> None:
        """Spark's own count of rows it dropped as late must equal what we dead-lettered."""
        if progress.get("name") != ctx.query_name(QUERY):
            return
        dropped = sum(op.get("numRowsDroppedByWatermark", 0) for op in progress.get("stateOperators", []))
        ours = late_seen.pop(progress["batchId"], None)
        if ours is not None and ours != dropped:
            log.error("batch %s: Spark dropped %d late rows but %d were dead-lettered",
                      progress["batchId"], dropped, ours)
            ctx.metrics.write("late_mismatch", batch=progress["batchId"], spark=dropped, ours=ours)

    ctx.progress_hooks.append(check_late)
    return [ctx.start(both.writeStream.outputMode("append").foreachBatch(batch), QUERY)]
