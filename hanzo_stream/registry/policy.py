"""The Event Streaming Standard's rules for topics.yaml.

Each rule yields (path, message, fix); the loader turns paths into file lines. Rules are
plain functions so each can be tested with one passing and one failing registry.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from typing import Any

from . import platform
from .model import ADMIN, BATCH_OVERDUE, WILDCARD, Group, Registry

Finding = tuple[tuple[str | int, ...], str, str]

SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
ENV_PREFIXES = ("prod", "production", "stg", "staging", "stage", "dev", "development",
                "test", "qa", "uat", "sandbox", "preprod", "local")
ENV_PATTERN = re.compile(rf"^({'|'.join(ENV_PREFIXES)})(_|$)|_({'|'.join(ENV_PREFIXES)})$")
#: A segment that names a version or an instance, not a function: v2, 2, 7f3a9c, a UUID's part.
VERSION_OR_INSTANCE = re.compile(r"^(v\d+|\d+|(?=[a-z]*\d)[0-9a-f]{6,})$")
KNOWN_KEYS = ("team_id", "org_id", "agent_id", "source_topic", "user_id", "session_id")
#: Topic configs the registry may not set: they would change semantics the standard fixes.
FORBIDDEN_CONFIGS = {
    "cleanup.policy": "the standard fixes cleanup.policy=delete (no compaction)",
    "retention.ms": "set `retention:` instead (e.g. 7d)",
    "unclean.leader.election.enable": "unclean leader election loses acknowledged writes",
    "min.insync.replicas": "min ISR follows the replication profile (`replication:`, "
                           "docs/reconciler.md#replication-factor)",
    "leader.replication.throttled.replicas": "the reconciler sets it only while it moves replicas",
    "follower.replication.throttled.replicas": "the reconciler sets it only while it moves replicas",
}


BATCH_MIN_EVERY_MS = 3_600_000


#: Topic configs the registry may set, each within bounds that keep the cluster healthy (a
#: `retention.bytes: 1` empties a topic, `segment.ms: 1` opens a file per millisecond, a 100 MB
#: `max.message.bytes` outgrows the replica fetches). Anything else is refused.
MiB = 1024 * 1024
HOUR_MS = 3_600_000
INT_CONFIGS: dict[str, tuple[int, int, str]] = {  # name: (low, high, why)
    "max.message.bytes": (512 * 1024, 8 * MiB, "an event is at most 256 KiB (the standard)"),
    "retention.bytes": (100 * MiB, 2**62, "per partition; -1 (no size bound) is also allowed"),
    "segment.bytes": (MiB, 1024 * MiB, "Kafka's default is 1 GiB"),
    "segment.ms": (10 * 60_000, 365 * 24 * HOUR_MS, "each segment is an open file"),
    "message.timestamp.before.max.ms": (60_000, 2**62, "how old a producer's timestamp may be"),
    "message.timestamp.after.max.ms": (60_000, 2**62, "how far ahead a producer's clock may be"),
}
ENUM_CONFIGS: dict[str, tuple[str, ...]] = {
    "compression.type": ("producer", "uncompressed", "lz4", "zstd", "gzip", "snappy"),
    "message.timestamp.type": ("CreateTime", "LogAppendTime"),
}
RETENTION_MS = (HOUR_MS, 3650 * 24 * HOUR_MS)  # 1h to 10 years
#: The standard's topics whose loss or silent change costs money or compliance evidence.
PROTECTED_TOPICS = ("billing_events", "audit_log", "dead_letter")
DESTRUCTIVE = frozenset({"DELETE", "ALTER", "ALTER_CONFIGS", "ALL"})
RESERVED_PRINCIPALS = {
    ADMIN: "it is the platform's super user",
    "anonymous": "it is Kafka's unauthenticated principal (User:ANONYMOUS)",
    **{p.name: f"it is the platform's own ({p.description}; hanzo_stream/registry/platform.py)"
       for p in platform.PRINCIPALS},
}


def _index(data: dict, section: str, name: str) -> int:
    return next(i for i, x in enumerate(data[section]) if x.get("name") == name)


def topic_names(reg: Registry, data: dict) -> Iterator[Finding]:
    for i, t in enumerate(reg.topics):
        p = ("topics", i, "name")
        if not SNAKE.match(t.name):
            fixed = re.sub(r"[^a-z0-9]+", "_", t.name.lower()).strip("_")
            yield p, f"topic name {t.name!r} is not snake_case", f"rename it to {fixed!r}"
        if ENV_PATTERN.search(t.name):
            yield (p, f"topic name {t.name!r} carries an environment prefix or suffix",
                   "drop it: environments are separate clusters (one Pulumi stack each)")


def group_names(reg: Registry, data: dict) -> Iterator[Finding]:
    for i, g in enumerate(reg.groups):
        if not KEBAB.match(g.name):
            fixed = re.sub(r"[^a-z0-9]+", "-", g.name.lower()).strip("-")
            yield (("groups", i, "name"), f"group name {g.name!r} is not kebab-case",
                   f"rename it to {fixed!r}")
        if ENV_PATTERN.search(g.name.replace("-", "_")):
            yield (("groups", i, "name"), f"group name {g.name!r} carries an environment prefix",
                   "drop it: environments are separate clusters")
        parts = g.name.split("-")
        if len(parts) > 1 and (odd := [s for s in parts[1:] if VERSION_OR_INSTANCE.match(s)]):
            kept = "-".join(s for s in parts if s not in odd)
            yield (("groups", i, "name"),
                   f"group name {g.name!r} carries a version or instance id ({', '.join(odd)})",
                   f"name it for what it does, {kept!r}: every instance shares the group, and "
                   "a new version keeps its committed offsets under the same name")


def duplicates(reg: Registry, data: dict) -> Iterator[Finding]:
    for section, items in (("topics", reg.topics), ("groups", reg.groups),
                           ("principals", reg.principals)):
        counts = Counter(x.name for x in items)
        for i, x in enumerate(items):
            if counts[x.name] > 1:
                yield ((section, i, "name"), f"{x.name!r} is declared {counts[x.name]} times",
                       "keep one declaration")
    seen: dict[str, str] = {}
    for i, t in enumerate(reg.topics):
        for j, et in enumerate(t.event_types):
            if et in seen and seen[et] != t.name:
                yield (("topics", i, "event_types", j),
                       f"event type {et!r} is already mapped to topic {seen[et]!r}",
                       "an event type lives on exactly one topic; remove one mapping")
            seen[et] = t.name


def partitions(reg: Registry, data: dict) -> Iterator[Finding]:
    readers: dict[str, list[Group]] = {}  # one pass over the groups: 10,000 topics stay linear
    for g in reg.groups:
        for name in g.topics:
            readers.setdefault(name, []).append(g)
    for i, t in enumerate(reg.topics):
        consumers = max((g.consumers for g in readers.get(t.name, ())), default=0)
        guideline = max(2 * consumers, 4)
        if t.partitions < guideline and "partitions" not in t.exceptions:
            yield (("topics", i, "partitions"),
                   f"{t.partitions} partitions is below the guideline "
                   f"max(2 x {consumers} consumers, 4) = {guideline}",
                   f"set partitions: {guideline}, or document why not under "
                   f"exceptions.partitions")
        for g in readers.get(t.name, ()):
            if g.consumers > t.partitions:
                yield (("topics", i, "partitions"),
                       f"group {g.name!r} expects {g.consumers} consumers but the topic has "
                       f"only {t.partitions} partitions, so {g.consumers - t.partitions} would idle",
                       f"set partitions >= {g.consumers} or lower the group's consumers")


def keys(reg: Registry, data: dict) -> Iterator[Finding]:
    for i, t in enumerate(reg.topics):
        if t.key not in KNOWN_KEYS:
            yield (("topics", i, "key"),
                   f"key {t.key!r} is not an envelope field the standard keys by",
                   f"use one of: {', '.join(KNOWN_KEYS)}")


def configs(reg: Registry, data: dict) -> Iterator[Finding]:
    allowed = ", ".join(sorted([*INT_CONFIGS, *ENUM_CONFIGS]))
    for i, t in enumerate(reg.topics):
        for key, value in t.config.items():
            p = ("topics", i, "config", key)
            if key in FORBIDDEN_CONFIGS:
                yield p, f"config {key!r} may not be set here", FORBIDDEN_CONFIGS[key]
            elif key in ENUM_CONFIGS:
                if value not in ENUM_CONFIGS[key]:
                    yield p, f"{key} {value!r} is not one Kafka knows", \
                        f"use one of: {', '.join(ENUM_CONFIGS[key])}"
            elif key in INT_CONFIGS:
                low, high, why = INT_CONFIGS[key]
                n = int(value) if re.fullmatch(r"-?[0-9]{1,19}", value) else None
                if n is None or not (low <= n <= high or (n == -1 and key == "retention.bytes")):
                    yield p, f"{key} {value} is outside {low:,} to {high:,} ({why})", \
                        f"set a whole number from {low:,} to {high:,}"
            else:
                yield p, f"config {key!r} is not one the registry manages", \
                    f"use one of: {allowed}; anything else is the platform team's (docs/registry.md)"


def retention(reg: Registry, data: dict) -> Iterator[Finding]:
    low, high = RETENTION_MS
    for i, t in enumerate(reg.topics):
        if not low <= t.retention_ms <= high:
            yield (("topics", i, "retention"),
                   f"retention {data['topics'][i]['retention']} is outside 1h to 3650d",
                   "keep events at least an hour (consumers must be able to catch up) and at "
                   "most ten years; archive older ones (audit-archive)")


def reserved_principals(reg: Registry, data: dict) -> Iterator[Finding]:
    for i, p in enumerate(reg.principals):
        if p.name.lower() in RESERVED_PRINCIPALS:
            yield (("principals", i, "name"),
                   f"principal name {p.name!r} is reserved: {RESERVED_PRINCIPALS[p.name.lower()]}",
                   "give the service a name of its own")


def prefix_reach(reg: Registry, data: dict) -> Iterator[Finding]:
    """A prefix grant may cover only what its principal already owns: topics it produces, groups
    it runs. Names that begin with `_` are Kafka's and the tools' own (__consumer_offsets,
    __transaction_state, _schemas)."""
    for i, e in enumerate(reg.extra_grants):
        if e.pattern_type != "PREFIXED":
            continue
        kind = "topic" if e.resource_type == "TOPIC" else "group"
        p = ("acls", i, f"{kind}_prefix")
        if e.resource_name.startswith("_"):
            yield (p, f"{kind}_prefix {e.resource_name!r} reaches Kafka's internal {kind}s",
                   "internal topics and groups are the brokers' and the platform's; grant nothing there")
            continue
        if kind == "topic":
            others = [t.name for t in reg.topics
                      if t.name.startswith(e.resource_name) and e.principal not in t.producers]
        else:
            others = [g.name for g in reg.groups
                      if g.name.startswith(e.resource_name) and g.principal != e.principal]
        if others:
            yield (p, f"{kind}_prefix {e.resource_name!r} reaches {', '.join(sorted(others))}, "
                      f"which {e.principal} does not own",
                   f"grant those {kind}s by name ({kind}: NAME) so their owners can review it, or "
                   f"narrow the prefix to {e.principal}'s own")


def protected_topics(reg: Registry, data: dict) -> Iterator[Finding]:
    for i, e in enumerate(reg.extra_grants):
        ops = sorted(DESTRUCTIVE & set(e.operations))
        if e.resource_type != "TOPIC" or not ops:
            continue
        for name in PROTECTED_TOPICS:
            reached = (name == e.resource_name if e.pattern_type == "LITERAL"
                       else name.startswith(e.resource_name))
            documented = any(t.name == name and "destructive_acls" in t.exceptions
                             for t in reg.topics)
            if reached and not documented:
                yield (("acls", i, "operations"),
                       f"{', '.join(ops)} on {name} lets {e.principal} delete or rewrite it",
                       f"drop {', '.join(ops)}, or document why under "
                       f"topics[{name}].exceptions.destructive_acls")


def references(reg: Registry, data: dict) -> Iterator[Finding]:
    principals = reg.declared_names()
    topics = {t.name for t in reg.topics}
    declare = "declare it under principals: (name, description)"
    for i, t in enumerate(reg.topics):
        for j, p in enumerate(t.producers):
            if p != WILDCARD and p not in principals:
                yield (("topics", i, "producers", j), f"producer {p!r} is not a declared principal",
                       declare)
    for i, g in enumerate(reg.groups):
        if g.principal not in principals:
            yield (("groups", i, "principal"), f"principal {g.principal!r} is not declared",
                   declare)
        for j, t in enumerate(g.topics):
            if t not in topics:
                yield (("groups", i, "topics", j), f"topic {t!r} does not exist in the registry",
                       f"declare it under topics:, or fix the name (known: {', '.join(sorted(topics))})")
    for i, e in enumerate(reg.extra_grants):
        if e.principal != WILDCARD and e.principal not in principals:
            yield (("acls", i, "principal"), f"principal {e.principal!r} is not declared", declare)
        if e.resource_type == "TOPIC" and e.pattern_type == "LITERAL" and e.resource_name not in topics:
            yield (("acls", i, "topic"), f"topic {e.resource_name!r} does not exist in the registry",
                   "declare the topic first")


def least_privilege(reg: Registry, data: dict) -> Iterator[Finding]:
    for i, t in enumerate(reg.topics):
        if WILDCARD in t.producers:
            if t.name != "dead_letter":
                yield (("topics", i, "producers"),
                       f"wildcard producer '*' on {t.name!r}: only dead_letter may be written by "
                       "every principal", "list the producing principals by name")
            elif "wildcard_producers" not in t.exceptions:
                yield (("topics", i, "producers"), "wildcard producer '*' needs a documented reason",
                       "add exceptions.wildcard_producers: <why>")
    for i, e in enumerate(reg.extra_grants):
        if "ALL" in e.operations:
            yield (("acls", i, "operations"), "operation ALL is not least privilege",
                   "grant the specific operations needed (READ, WRITE, DESCRIBE, ...)")
        if e.principal == WILDCARD or e.resource_name in ("", WILDCARD) or (
            e.pattern_type == "PREFIXED" and len(e.resource_name) < 3
        ):
            yield (("acls", i), f"wildcard access ({e.principal} on {e.resource_name!r}) is refused",
                   "name the principal and the resource; dead_letter's rule lives on the topic")


def lag_thresholds(reg: Registry, data: dict) -> Iterator[Finding]:
    for i, g in enumerate(reg.groups):
        if g.lag.warning >= g.lag.critical:
            yield (("groups", i, "lag"),
                   f"warning ({g.lag.warning}) must be below critical ({g.lag.critical})",
                   "lower warning or raise critical")


def batch_readers(reg: Registry, data: dict) -> Iterator[Finding]:
    """A scheduled reader must run more often than its topics keep records: the missed-run
    alert fires at BATCH_OVERDUE x `every`, and by then a shorter retention has lost events."""
    topics = {t.name: t for t in reg.topics}
    written = {t["name"]: t["retention"] for t in data["topics"]}
    for i, g in enumerate(reg.groups):
        if g.batch_every_ms is None:
            continue
        every = data["groups"][i]["batch"]["every"]
        if g.batch_every_ms < BATCH_MIN_EVERY_MS:
            yield (("groups", i, "batch", "every"), f"a batch reader running every {every} is a "
                   "continuous one", "remove `batch`: a continuous group is watched for stalls "
                   "within minutes; use `batch` for runs an hour or more apart")
        if "lag" in data["groups"][i]:
            yield (("groups", i, "lag"), "lag thresholds do not apply to a batch reader (its lag "
                   "grows between runs by design)", "remove `lag`, or remove `batch` if the group "
                   "reads continuously")
        for name in g.topics:
            t = topics.get(name)
            if t is not None and g.batch_overdue_ms >= t.retention_ms:
                yield (("groups", i, "batch", "every"),
                       f"runs every {every} but {name} keeps records for {written[name]}: a "
                       f"missed run is noticed after {BATCH_OVERDUE:g} x {every}, when events are "
                       "already gone", f"run more often, or raise {name}'s retention")


def dead_letter_thresholds(reg: Registry, data: dict) -> Iterator[Finding]:
    for i, t in enumerate(reg.topics):
        if t.dead_letters.warning > t.dead_letters.critical:
            yield (("topics", i, "dead_letters"),
                   f"warning ({t.dead_letters.warning}) must not be above critical "
                   f"({t.dead_letters.critical})", "lower warning or raise critical")


LEGACY_MAX_DAYS = 180


def today() -> date:
    return datetime.now(UTC).date()


def legacy_window(reg: Registry, data: dict) -> Iterator[Finding]:
    """`legacy_plaintext:` is a window with an end: anonymous access must not become the norm."""
    legacy = reg.legacy
    if legacy is None:
        return
    for j, p in enumerate(legacy.stands_in_for):
        if p not in reg.declared_names():
            yield (("legacy_plaintext", "stands_in_for", j), f"principal {p!r} is not declared",
                   "name a principal of principals: whose access the anonymous clients had")
    where = ("legacy_plaintext", "until")
    if legacy.until is None:
        yield where, "is not a date", "write the last day of the window as YYYY-MM-DD"
    elif legacy.until < today():
        yield (where, f"the LEGACY PLAINTEXT window closed on {legacy.until}",
               "move the clients still on PLAINTEXT to their principals (docs/takeover.md), then "
               "remove legacy_plaintext: and the LEGACY listener; or set a new date deliberately")
    elif (legacy.until - today()).days > LEGACY_MAX_DAYS:
        yield (where, f"a window of {(legacy.until - today()).days} days; the most is "
               f"{LEGACY_MAX_DAYS}", "set an earlier date; extend it later if clients need it")


RULES: tuple[Callable[[Registry, dict], Iterator[Finding]], ...] = (
    topic_names, group_names, duplicates, partitions, keys, configs, retention, references,
    reserved_principals, least_privilege, prefix_reach, protected_topics, lag_thresholds,
    batch_readers, dead_letter_thresholds, legacy_window,
)


def check(reg: Registry, data: dict[str, Any]) -> list[Finding]:
    return [f for rule in RULES for f in rule(reg, data)]
