"""consumers/<group>.yaml: how one consumer-group job runs, checked against the registry.

The registry stays the one source of group facts (principal, topics, lag thresholds): a spec
names its group and adds only what the registry cannot know (entry point, sinks, checkpoint,
trigger, time-based lag SLA). Loading resolves relative paths against the state directory
and refuses specs whose outputs the group's principal may not write.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..registry import Group, Registry, parse_retention
from ..registry.model import WILDCARD
from .postgres import DSN_ENV

SINK_TYPES = {"clickhouse", "kafka", "parquet", "dead_letter", "postgres"}
IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # a PostgreSQL table name, unquoted
TOP_KEYS = {"group", "job", "description", "checkpoint", "trigger", "max_offsets_per_trigger",
            "lag_sla", "window", "watermark", "sinks", "spark_conf", "aggregate", "runtime",
            "metrics", "dedupe_window", "future"}
RUNTIMES = ("spark", "consumer")  # a PySpark job, or a plain consumer (hanzo_stream/jobs/consumer.py)
REQUIRED = ("group", "job", "checkpoint", "sinks")
AGGREGATE_KEYS = {"output": str, "sink": str, "by": list, "id_field": str, "sum": list,
                  "money": str, "micros": str, "count": str}


class SpecInvalid(Exception):
    """Every problem of a spec at once, each naming the file, field and fix."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Sink:
    name: str
    type: str
    options: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        value = self.options.get(key)
        return default if value is None else value


@dataclass(frozen=True)
class Aggregate:
    """`aggregate:`: exact event-time window totals (hanzo_stream/jobs/totals.py), one record
    per `by` values and window, emitted to the kafka sink `sink` as event type `output`."""

    output: str  # the emitted event type (schemas/events/<output>.json)
    sink: str  # a `kafka` sink of the spec
    by: tuple[str, ...]  # input fields one record is per: envelope fields, else data fields
    id_field: str  # data field of the deterministic record id: sha256 of by values + window start
    sums: tuple[str, ...]  # integer data fields, summed
    money: str  # a decimal data field (USD), summed exactly
    micros: str  # data field of that sum rounded half-up to micro-dollars
    count: str  # data field of the number of input events


@dataclass(frozen=True)
class JobSpec:
    """A consumer-group job: registry facts plus the spec's run settings, paths resolved."""

    name: str
    group: Group
    job: Path  # the entry point: spark/<name>.py, or the module of a `runtime: consumer` job
    checkpoint: str  # absolute local path or a Hadoop URL (s3a://, hdfs://)
    home: Path  # state directory the relative paths were resolved against
    sinks: dict[str, Sink]
    description: str = ""
    trigger_seconds: float = 1.0
    max_offsets_per_trigger: int | None = None
    lag_sla_seconds: float = 300.0
    window_seconds: int | None = None
    watermark_seconds: int | None = None
    # How far ahead of the job's clock an event time may be (windowed jobs): one producer with
    # a fast clock would otherwise push the watermark ahead and make everyone's events late.
    future_seconds: int | None = None
    # How long the job remembers an envelope id to drop a second copy (producer retries,
    # librdkafka's epoch-bump resends): at-least-once delivery, deduplicated by id.
    dedupe_window_seconds: int | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    aggregate: Aggregate | None = None
    runtime: str = "spark"
    metrics: dict[str, Any] | None = None  # a consumer job's `metrics:` block (its own module checks it)
    source_file: str = ""

    @property
    def principal(self) -> str:
        return self.group.principal

    @property
    def topics(self) -> tuple[str, ...]:
        return self.group.topics

    @property
    def state_dir(self) -> Path:
        """Where this job keeps local state besides the checkpoint (logs, metrics, pid)."""
        return self.home / "jobs" / self.name

    def checkpoint_for(self, query: str) -> str:
        """One checkpoint per query: a job with two queries keeps them apart."""
        return f"{self.checkpoint.rstrip('/')}/{query}"

    def sink(self, name: str) -> Sink:
        try:
            return self.sinks[name]
        except KeyError:
            raise SpecInvalid([f"{self.source_file}: sinks.{name}: missing; the job "
                               f"{self.job.name} needs it (see docs/jobs.md)"]) from None

    def resolve(self, value: str) -> str:
        return resolve_path(value, self.home)


def resolve_path(value: str, home: Path) -> str:
    """Relative paths live under the state directory; URLs and absolute paths stay as they are."""
    if "://" in value or os.path.isabs(value):
        return value
    return str((home / value).resolve())


def seconds(value: str | int | float) -> float:
    """'500ms', '10s', '15m', '1h', '2d' -> seconds; numbers are seconds already."""
    if isinstance(value, int | float):
        return float(value)
    return parse_retention(str(value)) / 1000.0


def list_specs(consumers_dir: Path) -> list[str]:
    """The job names under consumers_dir; SpecInvalid when it is not a directory (an empty list
    would read as "no jobs")."""
    if not Path(consumers_dir).is_dir():
        what = "not a directory" if Path(consumers_dir).exists() else "no such directory"
        raise SpecInvalid([f"{consumers_dir}: {what}; pass the directory of job specs "
                           "(--consumers consumers)"])
    return sorted(p.stem for p in Path(consumers_dir).glob("*.yaml"))


def load_spec(name: str, registry: Registry, consumers_dir: Path = Path("consumers"),
              home: Path | None = None) -> JobSpec:
    """Read consumers/<name>.yaml and check it against the registry; raise SpecInvalid."""
    from ..core.paths import state_dir

    home = (home or state_dir()).resolve()
    path = Path(consumers_dir) / f"{name}.yaml"
    file = str(path)
    if not path.exists():
        known = ", ".join(list_specs(consumers_dir)) or "none"
        raise SpecInvalid([f"{file}: no such job spec; known jobs: {known}"])
    doc = yaml.safe_load(path.read_text()) or {}
    problems = _check_shape(doc, file)
    if problems:
        raise SpecInvalid(problems)

    group = next((g for g in registry.groups if g.name == doc["group"]), None)
    if group is None:
        raise SpecInvalid([f"{file}: group: {doc['group']!r} is not a group in {registry.path}; "
                           "add it to topics.yaml groups first"])
    if doc["group"] != name:
        problems.append(f"{file}: group: the file must be named after its group "
                        f"({doc['group']}.yaml)")
    job = (Path(consumers_dir).resolve().parent / doc["job"]).resolve()
    if not job.exists():
        problems.append(f"{file}: job: {doc['job']} does not exist (relative to the repository root)")
    sinks = {k: Sink(k, v["type"], {kk: vv for kk, vv in v.items() if kk != "type"})
             for k, v in doc["sinks"].items()}
    problems += _check_sinks(sinks, group, registry, file)
    aggregate, agg_problems = _aggregate(doc, sinks, registry, file)
    problems += agg_problems
    problems += _check_future(doc, file)
    problems += _check_postgres(sinks, aggregate, file)
    try:
        spec = JobSpec(
            name=name, group=group, job=job, checkpoint=resolve_path(doc["checkpoint"], home),
            home=home, sinks=sinks, description=doc.get("description", ""),
            trigger_seconds=seconds(doc.get("trigger", "1s")),
            max_offsets_per_trigger=doc.get("max_offsets_per_trigger"),
            lag_sla_seconds=seconds(doc.get("lag_sla", "5m")),
            window_seconds=int(seconds(doc["window"])) if "window" in doc else None,
            watermark_seconds=int(seconds(doc["watermark"])) if "watermark" in doc else None,
            future_seconds=_future(doc),
            dedupe_window_seconds=(int(seconds(doc["dedupe_window"])) if "dedupe_window" in doc
                                   else None),
            spark_conf={k: str(v) for k, v in (doc.get("spark_conf") or {}).items()},
            aggregate=aggregate, runtime=doc.get("runtime", "spark"), metrics=doc.get("metrics"),
            source_file=file,
        )
    except ValueError as e:
        problems.append(f"{file}: {e}; durations look like 500ms, 10s, 15m, 1h")
        spec = None
    if problems:
        raise SpecInvalid(problems)
    assert spec is not None
    return spec


DEFAULT_FUTURE = "1m"


def _future(doc: dict[str, Any]) -> int | None:
    """`future` of a windowed job: as given, else DEFAULT_FUTURE; none without a watermark or
    when `off`."""
    if "watermark" not in doc or _off(doc.get("future")):
        return None
    return int(seconds(doc.get("future", DEFAULT_FUTURE)))


def _off(value: Any) -> bool:
    return value is False or value == "off"  # YAML 1.1 reads a bare `off` as false


def _check_future(doc: dict[str, Any], file: str) -> list[str]:
    if "future" not in doc or _off(doc["future"]):
        return []
    if "watermark" not in doc:
        return [f"{file}: future: only a job with a `watermark` checks event times; remove it"]
    try:
        future, watermark = seconds(doc["future"]), seconds(doc["watermark"])
    except (TypeError, ValueError):
        return []  # the JobSpec build reports the bad duration
    if not 0 < future < watermark:
        return [f"{file}: future: {doc['future']} must be more than 0 and less than the watermark "
                f"({doc['watermark']}), or a producer's clock that far ahead makes every other "
                "producer's events late; 1m allows for clock drift"]
    return []


def _check_shape(doc: Any, file: str) -> list[str]:
    if not isinstance(doc, dict):
        return [f"{file}: the spec must be a YAML mapping"]
    problems = [f"{file}: {k}: unknown key; allowed: {', '.join(sorted(TOP_KEYS))}"
                for k in doc if k not in TOP_KEYS]
    problems += [f"{file}: {k}: required" for k in REQUIRED if k not in doc]
    sinks = doc.get("sinks")
    if "sinks" in doc and not (isinstance(sinks, dict) and sinks):
        problems.append(f"{file}: sinks: must map sink names to {{type: ...}}")
    elif isinstance(sinks, dict):
        for k, v in sinks.items():
            if not isinstance(v, dict) or v.get("type") not in SINK_TYPES:
                problems.append(f"{file}: sinks.{k}.type: use one of {', '.join(sorted(SINK_TYPES))}")
    if doc.get("runtime", "spark") not in RUNTIMES:
        problems.append(f"{file}: runtime: use one of {', '.join(RUNTIMES)} (see docs/jobs.md)")
    if "metrics" in doc and not isinstance(doc["metrics"], dict):
        problems.append(f"{file}: metrics: a mapping (see docs/jobs.md, llm-metrics)")
    mopt = doc.get("max_offsets_per_trigger")
    if mopt is not None and (not isinstance(mopt, int) or mopt <= 0):
        problems.append(f"{file}: max_offsets_per_trigger: a positive integer")
    return problems


def _check_sinks(sinks: dict[str, Sink], group: Group, registry: Registry, file: str) -> list[str]:
    """Least privilege is the registry's: a job may only write where its principal may."""
    problems = []
    topics = {t.name: t for t in registry.topics}
    for s in sinks.values():
        if s.type == "kafka":
            topic = topics.get(s.get("topic", ""))
            if topic is None:
                problems.append(f"{file}: sinks.{s.name}.topic: {s.get('topic')!r} is not a "
                                "registry topic")
            elif group.principal not in topic.producers and WILDCARD not in topic.producers:
                problems.append(f"{file}: sinks.{s.name}.topic: principal {group.principal} is not "
                                f"a producer of {topic.name}; add it to the topic's producers in "
                                "topics.yaml")
        if s.type == "dead_letter":
            from ..core.dead_letter import TOPIC

            dl = topics.get(TOPIC)
            if dl is None or (WILDCARD not in dl.producers and group.principal not in dl.producers):
                problems.append(f"{file}: sinks.{s.name}: the registry does not let "
                                f"{group.principal} write {TOPIC}")
    return problems


def _check_postgres(sinks: dict[str, Sink], aggregate: Aggregate | None, file: str) -> list[str]:
    """A `postgres` sink copies the aggregate's records (hanzo_stream/jobs/postgres.py)."""
    problems = []
    for s in sinks.values():
        if s.type != "postgres":
            continue
        where = f"{file}: sinks.{s.name}"
        if aggregate is None:
            problems.append(f"{where}: a postgres sink copies an `aggregate:`'s records; this spec "
                            "has none")
        if not IDENTIFIER.fullmatch(str(s.get("table", ""))):
            problems.append(f"{where}.table: the table to upsert into, a lower-case SQL name "
                            "(e.g. billing_usage_hourly)")
        env = s.get("dsn_env", DSN_ENV)
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(env)):
            problems.append(f"{where}.dsn_env: the environment variable holding the DSN, "
                            "e.g. HANZO_STREAM_POSTGRES_DSN")
        unknown = set(s.options) - {"table", "dsn_env"}
        if unknown:
            problems.append(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: "
                            "type, table, dsn_env")
    return problems


def _aggregate(doc: dict, sinks: dict[str, Sink], registry: Registry,
               file: str) -> tuple[Aggregate | None, list[str]]:
    """The `aggregate:` block, checked against the spec's sinks and the registry."""
    block = doc.get("aggregate")
    if block is None:
        return None, []
    where = f"{file}: aggregate"
    if not isinstance(block, dict):
        return None, [f"{where}: a mapping with {', '.join(AGGREGATE_KEYS)} (see docs/jobs.md)"]
    problems = [f"{where}.{k}: unknown key; allowed: {', '.join(AGGREGATE_KEYS)}"
                for k in block if k not in AGGREGATE_KEYS]
    for k, kind in AGGREGATE_KEYS.items():
        v = block.get(k)
        if v is None:
            problems.append(f"{where}.{k}: required")
        elif kind is list and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            problems.append(f"{where}.{k}: a list of field names")
        elif kind is str and not isinstance(v, str):
            problems.append(f"{where}.{k}: a field name")
    problems += [f"{where}: `{k}` needs `window` and `watermark` too" for k in ("window", "watermark")
                 if k not in doc]
    if problems:
        return None, problems
    agg = Aggregate(block["output"], block["sink"], tuple(block["by"]), block["id_field"],
                    tuple(block["sum"]), block["money"], block["micros"], block["count"])
    sink = sinks.get(agg.sink)
    if sink is None or sink.type != "kafka":
        return agg, [f"{where}.sink: {agg.sink!r} must name a `kafka` sink of this spec"]
    topic = next((t for t in registry.topics if t.name == sink.get("topic")), None)
    if topic is None:
        return agg, []  # _check_sinks already named the unknown topic
    if agg.output not in topic.event_types:
        problems.append(f"{where}.output: {agg.output} is not an event type of {topic.name}; add it "
                        f"to the topic's event_types in topics.yaml")
    if topic.key not in agg.by:
        problems.append(f"{where}.by: records are keyed by {topic.name}'s key {topic.key!r} "
                        f"(topics.yaml), so `by` must include it")
    return agg, problems
