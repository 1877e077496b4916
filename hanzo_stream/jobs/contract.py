"""schemas/ compiled into what a Spark job checks, so the client and the jobs share one contract.

The client decides with hanzo_stream/client/router.py; a job decides on the same bytes here,
in the JVM, with no Python per row. Both must give the same verdict (valid, or the same error
class; tests/integration/test_contract_parity.py fuzzes that). So this module follows the
client step by step:

1. no value -> json.malformed; over MAX_EVENT_BYTES -> size.too_large; invalid UTF-8 ->
   utf8.invalid; not exactly one JSON document -> json.malformed (JSON is parsed into a
   VARIANT, which keeps each value's JSON type and a number's decimal text);
2. the event type's JSON Schema, one rule per keyword, in the client's order of blame: the
   shallowest problem first, then type < required < const < unknown field < enum < the rest
   (hanzo_stream.schemas.validator.RANK); a missing or empty topic key is key.missing;
3. a type with no schema -> event.unknown_type. A type of another topic (or of none) is
   DEFERRED: the job's driver settles those rare rows with the client itself (Contract.settle),
   so the ~600 rules of the other types stay out of every task. Their size, not their
   evaluation, was the cost: each task deserializes and generates code for the whole
   projection, about 0.4 s per task per batch (docs/jobs.md, "Throughput").

Where JSON parsers differ, the client is made to agree with the JVM (documented in
docs/schemas.md): duplicate keys keep the last value in both, nesting deeper than
MAX_JSON_DEPTH is malformed in both, and timestamps must be real calendar dates in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..client.router import MAX_EVENT_BYTES, MAX_JSON_DEPTH, Router
from ..registry import Registry
from ..schemas import refusals as R
from ..schemas.patterns import PATTERN_INPUT_MAX, guard_patterns
from ..schemas.store import DEAD_LETTER_TYPE, ENVELOPE, ENVELOPE_ID, SchemaSet
from ..schemas.validator import RANK, RANK_OTHER, Validator, timestamp_pattern

MONEY = (38, 12)  # a JSON number is read as DECIMAL(38,12): exact to 1e-12, half-up beyond
TS_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSX"
_INT64_MAX, _UINT64_MAX = 2**63 - 1, 2**64 - 1
DEFERRED = "contract.deferred"  # never leaves a job: Contract.settle replaces it
EVENT_AT = "$[0]"  # where classify's `event` (the value parsed as a one-element array) holds the event
__all__ = ["DEFERRED", "EVENT_AT", "Contract", "classify", "compile_contract", "java_pattern"]


def java_pattern(p: str) -> str:
    """A schema pattern for Java's regex: `$` is ECMA-262's end of input (Java's allows a
    final line break before it, as Python's does)."""
    return p[:-1] + "\\z" if p.endswith("$") and not p.endswith("\\$") else p


@dataclass(frozen=True)
class Node:
    """All the subschemas that apply at one place in an event (allOf parts are walked in place)."""

    path: tuple[str, ...]
    schemas: tuple[dict[str, Any], ...]

    def keywords(self):
        """(subschema, keyword, value) in the order jsonschema visits them: allOf in place."""
        for s in self.schemas:
            yield from _walk(s)

    def types(self) -> set[str]:
        out: set[str] = set()
        for _, kw, t in self.keywords():
            if kw == "type":
                out |= {t} if isinstance(t, str) else set(t)
        return out

    def children(self) -> dict[str, Node]:
        names: dict[str, list[dict]] = {}
        for _, kw, props in self.keywords():
            if kw == "properties":
                for n, sub in props.items():
                    names.setdefault(n, []).append(sub)
        return {n: Node((*self.path, n), tuple(subs)) for n, subs in names.items()}


def _walk(schema: dict[str, Any]):
    for kw, val in schema.items():
        if kw == "allOf":
            for part in val:
                yield from _walk(part)
        else:
            yield schema, kw, val



@dataclass
class Rule:
    """One keyword at one place: `failed` is true when a record breaks it."""

    depth: int
    rank: int
    path: tuple[str, ...]
    error_class: str
    field: str | Any  # the field the client names (text, or a Column for unknown fields)
    message: Any  # text or Column
    failed: Any  # Column
    order: int = 0

    def key(self) -> tuple:
        return (self.depth, self.rank, self.path, self.order)


@dataclass
class Contract:
    """What a job on `topic` checks, and the StructType its valid events are read into."""

    topic: str
    event_types: tuple[str, ...]
    schemas: SchemaSet
    registry: Registry
    key_of: dict[str, str] = field(default_factory=dict)

    @cached_property
    def router(self) -> Router:
        return Router(self.registry, Validator(self.schemas))

    def settle(self, value: bytes | None, error_class: str | None,
               error_message: str | None) -> tuple[str | None, str | None]:
        """A DEFERRED verdict made final by the client, which is the contract's reference."""
        if error_class != DEFERRED:
            return error_class, error_message
        out = self.router.route_bytes(value, topic=self.topic)
        if not hasattr(out, "error"):
            raise RuntimeError(f"contract: the client accepts on {self.topic} an event the job "
                               "deferred as another topic's type; schemas/ and the job disagree")
        return out.error.error_class, out.error.rule

    @property
    def schema_id(self) -> str:
        return self.event_types[0] if len(self.event_types) == 1 else ENVELOPE

    def struct(self):
        """Envelope + the union of the topic's data fields, as Spark types (valid rows only)."""
        from pyspark.sql import types as T

        env = Node((), (self.schemas.inline(self.schemas.by_id[ENVELOPE_ID]),))
        fields = [T.StructField(n, _spark_type(c)) for n, c in env.children().items() if n != "data"]
        data: dict[str, Any] = {}
        for t in self.event_types:
            node = _root(self.schemas, t).children()["data"]
            for n, c in node.children().items():
                st = _spark_type(c)
                if data.setdefault(n, st) != st:
                    raise ValueError(f"schemas/: data.{n} has different types across {self.event_types}")
        return T.StructType([*fields, T.StructField("data", T.StructType(
            [T.StructField(n, st) for n, st in data.items()]))])


def compile_contract(schemas: SchemaSet, registry: Registry, topic: str) -> Contract:
    types = registry.topic(topic).event_types
    missing = [t for t in types if t not in schemas.events]
    if missing:
        raise ValueError(f"topics.yaml: topic {topic} lists {missing} but schemas/events/ has no "
                         "schema for them; add schemas/events/<type>.json")
    key_of = {t: tp.key for tp in registry.topics for t in tp.event_types}
    return Contract(topic, tuple(types), schemas, registry, key_of)


def _root(schemas: SchemaSet, event_type: str) -> Node:
    return Node((), (guard_patterns(schemas.bundle(event_type)),))


def _spark_type(node: Node):
    from pyspark.sql import types as T

    ts = node.types() - {"null"}
    if ts == {"integer"}:
        return T.LongType()
    if ts == {"number"}:
        return T.DecimalType(*MONEY)
    if ts == {"boolean"}:
        return T.BooleanType()
    return T.StringType()  # strings, and free-form objects as their JSON text


# --- the rules ------------------------------------------------------------------------------

class _Place:
    """One place in the event, as columns materialized once per row (parents first), so rules
    stay small column references instead of repeating the path's expression tree."""

    def __init__(self, path: tuple[str, ...], places: dict[tuple[str, ...], _Place]):
        from pyspark.sql import functions as F

        self.F = F
        self.path = path
        self.name = ".".join(path) or "(event)"
        self.places = places
        tag = "__".join(path) or "root"
        self.cols = {k: f"_c_{k}_{tag}" for k in ("v", "map", "kind", "text")}
        self.v, self.map = F.col(self.cols["v"]), F.col(self.cols["map"])
        self.kind, self.text = F.col(self.cols["kind"]), F.col(self.cols["text"])
        self.present = self.v.isNotNull()
        self.casts: dict[str, str] = {}  # SQL type -> column, for the casts several rules share
        places.setdefault(path, self)

    def cast(self, sql_type: str):
        """The value cast to `sql_type`, materialized once for every rule that reads it (each
        variant cast builds a Literal and evaluates a Cast per row)."""
        name = self.casts.setdefault(sql_type, f"_c_{len(self.casts)}_{self.cols['v'][3:]}")
        return self.F.col(name)

    def columns(self, parent: _Place | None, doc=None) -> list:
        """(this place's value, what derives from it). The root's derive from the parsed
        document at EVENT_AT: its value as a VARIANT of its own is a copy of the whole event,
        which a job needs only when a rule asks for it."""
        F = self.F
        src, at = (doc, EVENT_AT) if parent is None else (self.v, "$")
        v = F.try_variant_get(doc, EVENT_AT, "variant") if parent is None else \
            parent.map.getItem(self.path[-1])
        return [v.alias(self.cols["v"])], [
            F.try_variant_get(src, at, "map<string,variant>").alias(self.cols["map"]),
            F.schema_of_variant(self.v).alias(self.cols["kind"]),
            F.try_variant_get(src, at, "string").alias(self.cols["text"]),
            *(F.try_variant_get(src, at, t).alias(c) for t, c in self.casts.items())]

    def is_type(self, t: str):
        F, k = self.F, self.kind
        if t == "object":
            return self.map.isNotNull()
        if t == "string":
            return k == "STRING"
        if t == "boolean":
            return k == "BOOLEAN"
        if t == "null":
            return F.is_variant_null(self.v)
        if t == "array":
            return k.startswith("ARRAY")
        big = F.try_variant_get(self.v, "$", "decimal(38,0)")
        if t == "integer":  # what Python's JSON reader makes an int: BIGINT, or 2^63..2^64-1
            lo, hi = (F.lit(str(n)).cast("decimal(38,0)") for n in (_INT64_MAX + 1, _UINT64_MAX))
            return (k == "BIGINT") | (k.rlike(r"^DECIMAL\([0-9]+,0\)$") & big.between(lo, hi))
        if t == "number":
            return k.isin("BIGINT", "DOUBLE", "FLOAT") | k.startswith("DECIMAL")
        raise ValueError(f"schemas/: type {t!r} is outside the keyword subset docs/schemas.md allows")

    def child(self, name: str) -> _Place:
        path = (*self.path, name)
        return self.places.get(path) or _Place(path, self.places)


def _not_in(allowed: list[str]):
    from pyspark.sql import functions as F

    known = F.array(*map(F.lit, allowed))
    return lambda k: ~F.array_contains(known, k)


def rules_for(place: _Place, node: Node, event_type: str, counter: list[int], ts: str) -> list[Rule]:
    """Every keyword of `node` as a Rule, children included (JSON Schema semantics: a keyword
    only applies to values of its own kind, and only when the value is there)."""
    F = place.F
    path, name = place.path, place.name
    out: list[Rule] = []

    def add(kw: str, refusal: R.Refusal, fld: Any, failed: Any, at: tuple[str, ...] = path,
            **values: Any) -> None:
        """A rule whose message is the refusal's (schemas/refusals.py), as the client words it."""
        counter[0] += 1
        out.append(Rule(len(at), RANK.get(kw, RANK_OTHER), at, refusal.error_class, fld,
                        refusal.column(F, **values), failed, counter[0]))

    for s, kw, val in node.keywords():
        if kw == "type":
            want = {val} if isinstance(val, str) else set(val)
            ok = F.lit(False)
            for t in want:
                ok = ok | place.is_type(t)
            add(kw, R.TYPE, name, place.present & ~ok, field=name, want=R.wanted(val))
        elif kw == "required":
            for r in val:
                fld = ".".join((*path, r))
                missing = place.map.isNotNull() & place.map.getItem(r).isNull()
                if event_type:
                    add(kw, R.REQUIRED, fld, missing, field=fld, event_type=event_type)
                else:
                    add(kw, R.REQUIRED_ENVELOPE, fld, missing, field=fld)
        elif kw == "const":
            if not isinstance(val, str):
                raise ValueError(f"schemas/: const {val!r} at {name}: only string consts are supported")
            add(kw, R.CONST, name, place.present & ~(place.is_type("string") & (place.text == val)),
                field=name, value=R.show(val))
        elif kw == "enum":
            vals = [v for v in val if isinstance(v, str)]
            if len(vals) != len(val):
                raise ValueError(f"schemas/: enum at {name}: only string values are supported")
            add(kw, R.ENUM, name, place.present & ~(place.is_type("string") & place.text.isin(*vals)),
                field=name, values=", ".join(vals))
        elif kw == "additionalProperties":
            if val is not False:
                raise ValueError(f"schemas/: additionalProperties at {name} must be false or absent")
            allowed = sorted(s.get("properties", {}))
            # Counted, not listed: an object has an unknown field when it has more keys (unique in
            # a map) than allowed fields present. Array functions run interpreted, element by
            # element, so the sorted list is built only for a failing row's message.
            known = sum((place.child(k).present.cast("int") for k in allowed), F.lit(0))
            keys = F.array_sort(F.filter(F.map_keys(place.map), _not_in(allowed)))
            first = F.concat(F.lit(f"{name}." if path else ""), F.try_element_at(keys, F.lit(1)))
            add(kw, R.UNKNOWN_FIELD, first, place.map.isNotNull() & (F.size(place.map) > known),
                field=first, allowed=", ".join(allowed))
        elif kw == "pattern":
            is_ts = val == ts
            # never on a longer value (the maxLength guard_patterns puts first refuses it): Java's
            # engine recurses per repetition of a group and would overflow the task's stack
            bad = F.when(F.length(place.text) > PATTERN_INPUT_MAX, F.lit(True)).otherwise(
                ~place.text.rlike(java_pattern(val)))
            if is_ts:  # a real calendar date and time, as the client also checks
                bad = bad | F.try_to_timestamp(place.text, F.lit(TS_FORMAT)).isNull()
            refusal, values = R.pattern_refusal(name, val, ts)
            add(kw, refusal, name, place.present & place.is_type("string") & bad, **values)
        elif kw in ("minLength", "maxLength"):
            n = F.length(place.text)
            bad = n < val if kw == "minLength" else n > val
            word = "at least" if kw == "minLength" else "at most"
            add(kw, R.LENGTH, name, place.present & place.is_type("string") & bad,
                field=name, word=word, n=val)
        elif kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if node.types() == {"integer"}:  # integers compare exactly
                num, val = place.cast("decimal(38,0)"), F.lit(str(val)).cast("decimal(38,0)")
            else:
                num = place.cast("double")
            bad = {"minimum": num < val, "maximum": num > val, "exclusiveMinimum": num <= val,
                   "exclusiveMaximum": num >= val}[kw]
            op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[kw]
            add(kw, R.BOUND, name, place.present & place.is_type("number") & bad,
                field=name, op=op, limit=s[kw])
        elif kw in ("properties", "$schema", "$id", "title", "description", "examples",
                    "deprecated", "default", "$comment"):
            continue
        else:
            raise ValueError(f"schemas/: keyword {kw!r} at {name} has no Spark rule; "
                             "add one to hanzo_stream/jobs/contract.py or use the documented subset")
    for n, c in node.children().items():
        out += rules_for(place.child(n), c, event_type, counter, ts)
    return out


def _key_missing(root: _Place, key: str):
    """The client's key test (hanzo_stream/client/keying.py): the envelope's field, else data's."""
    F = root.F
    data = root.child("data")
    v = F.when(root.map.getItem(key).isNotNull(), root.map.getItem(key)).otherwise(data.map.getItem(key))
    empty = (F.schema_of_variant(v) == "STRING") & (F.try_variant_get(v, "$", "string") == "")
    return v.isNull() | F.is_variant_null(v) | empty


@dataclass
class _Entry:
    """One outcome in the job's order of blame: the first entry whose `when` holds decides."""

    when: Any
    error_class: str | None
    message: Any
    field: Any = None
    key: str | None = None


def _refused(F: Any, when: Any, refusal: R.Refusal, **values: Any) -> _Entry:
    return _Entry(when, refusal.error_class, refusal.column(F, **values))


def _entries(contract: Contract, root: _Place) -> list[_Entry]:
    F = root.F
    ts = timestamp_pattern(contract.schemas)
    type_text = root.child("type").text
    known = sorted(t for t in contract.schemas.events if t != DEAD_LETTER_TYPE)
    out: list[_Entry] = []
    # This topic's types first (a valid event stops the search early); every other known type
    # is checked against its own schema by the client, as it does before saying where it belongs.
    for t in contract.event_types:
        is_t = type_text == t
        rules = sorted(rules_for(root, _root(contract.schemas, t), t, [0], ts), key=Rule.key)
        key = contract.key_of.get(t)
        out += [_Entry(is_t & r.failed, r.error_class, r.message, r.field, key) for r in rules]
        out.append(_Entry(is_t, None, None))
    others = [t for t in known if t not in contract.event_types]
    if others:
        out.append(_Entry(type_text.isin(*others), DEFERRED, "another topic's event type; the job "
                          "settles it with the client (Contract.settle)"))
    env = Node((), (guard_patterns(contract.schemas.inline(contract.schemas.by_id[ENVELOPE_ID])),))
    out += [_Entry(r.failed, r.error_class, r.message, r.field)
            for r in sorted(rules_for(root, env, "", [0], ts), key=Rule.key)]
    out.append(_Entry(F.lit(True), R.UNKNOWN_TYPE.error_class, R.UNKNOWN_TYPE.text(known=", ".join(known))))
    return out


def classify(contract: Contract, df):
    """df (with a binary `value`) + `event` (the value parsed as a one-element VARIANT array,
    the event at EVENT_AT), `error_class`, `error_message`."""
    from pyspark.sql import functions as F

    raw = F.col("value").cast("string")
    wrapped = F.try_parse_json(F.concat(F.lit("["), raw, F.lit("]")))
    places: dict[tuple[str, ...], _Place] = {}
    root = _Place((), places)
    # The document's top-level values, counted without copying them (an object cast to a
    # boolean is null at once): one is the event, a second means two documents.
    docs = F.coalesce(F.size(F.try_variant_get(wrapped, "$", "array<boolean>")), F.lit(0))
    df = df.select("*", wrapped.alias("_c_doc"), docs.alias("_c_docs"))
    root.present = F.col("_c_docs") >= 1
    # A JSON parser reads one value and may ignore what follows; both wrappers must parse, so
    # `{...} x`, `{...}}` and `{...}] [` are all malformed, as they are for the client.
    one_doc = (root.present & (F.col("_c_docs") == 1)
               & (~raw.contains("]")
                  | F.json_object_keys(F.concat(F.lit('{"x":'), raw, F.lit("}"))).isNotNull()))
    # String values blanked in two linear passes (escapes out, then each quoted run): the one
    # pattern `"(?:[^"\\]|\\.)*"` recurses once per character in Java's regex engine and
    # overflows the task's stack on a long string value.
    unescaped = F.regexp_replace(raw, r"(?s)\\.", "_")
    stripped = F.regexp_replace(unescaped, r'"[^"]*"', '""')
    huge = F.exists(F.regexp_extract_all(stripped, F.lit(r"-?[0-9.]+[eE][+-]?[0-9]+"), F.lit(0)),
                    lambda n: F.abs(n.try_cast("double")) == float("inf"))
    entries = [
        _refused(F, F.col("value").isNull(), R.TOMBSTONE),
        _refused(F, F.octet_length("value") > MAX_EVENT_BYTES, R.TOO_LARGE,
                 size=F.octet_length("value").cast("string"), limit=MAX_EVENT_BYTES),
        _refused(F, ~F.is_valid_utf8("value"), R.NOT_UTF8),
        _refused(F, ~one_doc, R.NOT_JSON, depth=MAX_JSON_DEPTH),
        # Only a DOUBLE can be infinite; the regex scans the whole value, so it runs only then.
        _refused(F, F.schema_of_variant("_c_doc").contains("DOUBLE") & raw.rlike(r"[eE]\+?[0-9]{3}") & huge,
                 R.INFINITE),
        _refused(F, ~root.is_type("object"), R.NOT_OBJECT),
        *_entries(contract, root),
    ]
    # Materialize every place the rules read, parents first.
    for depth in range(0, max(len(p) for p in places) + 1):
        level = [p for path, p in places.items() if len(path) == depth]
        vs, derived = [], []
        for p in level:
            a, b = p.columns(places.get(p.path[:-1]) if p.path else None, F.col("_c_doc"))
            vs += a
            derived += b
        if vs:
            df = df.select("*", *vs)
        df = df.select("*", *derived)
    idx = F.when(entries[0].when, F.lit(0))  # one flat CASE: the first entry that holds
    for i, e in enumerate(entries[1:], 1):
        idx = idx.when(e.when, F.lit(i))
    df = df.withColumn("_c_idx", idx)
    at = F.col("_c_idx") + 1
    cls = F.try_element_at(F.array(*(F.lit(e.error_class).cast("string") for e in entries)), at)
    static = F.try_element_at(F.array(*(F.lit(e.message if isinstance(e.message, str) else None)
                                    .cast("string") for e in entries)), at)
    dynamic = [(i, e.message) for i, e in enumerate(entries)
               if e.message is not None and not isinstance(e.message, str)]
    msg = F.when(F.col("_c_idx") == dynamic[0][0], dynamic[0][1])
    for i, m in dynamic[1:]:
        msg = msg.when(F.col("_c_idx") == i, m)
    msg = msg.otherwise(static)
    for key in sorted({e.key for e in entries if e.key}):
        missing = _key_missing(root, key)
        blamed = F.lit(False)
        for i, e in enumerate(entries):
            if e.key != key or e.field is None:
                continue
            if isinstance(e.field, str):
                if e.field in (key, f"data.{key}"):
                    blamed = blamed | (F.col("_c_idx") == i)
            else:
                blamed = blamed | ((F.col("_c_idx") == i) & e.field.isin(key, f"data.{key}"))
        hit = blamed & missing
        cls = F.when(hit, F.lit(R.KEY_MISSING.error_class)).otherwise(cls)
        msg = F.when(hit, F.lit(R.KEY_MISSING.text(field=key, topic=contract.topic))).otherwise(msg)
    keep = [c for c in df.columns if not c.startswith("_c_")]
    return df.select(*keep, F.col("_c_doc").alias("event"), cls.alias("error_class"),
                     msg.alias("error_message"))
