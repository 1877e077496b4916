"""The fast event validator: every event type's schema compiled once, explained on failure.

Valid events (the hot path) go through fastjsonschema, which compiles each bundled schema
to Python once (about 25x faster than jsonschema here, see docs/client.md). Only a failing
event is run through jsonschema, whose structured errors name the field, so the slow path
costs nothing in the common case. Two deliberate deviations from Python's defaults, so the
Python result matches the schemas' meaning in every language:
- integers: 1.0 is not an integer (jsonschema and fastjsonschema both accept it); counts
  (tokens, milliseconds, units) must be whole JSON numbers. Money (`cost_usd`) is a decimal
  JSON number and any number passes here; the jobs read its decimal text (docs/schemas.md);
- patterns: `$` is ECMA-262's end of string, so "...Z\n" is not a valid timestamp;
- timestamps (any string with the envelope's timestamp pattern) must also be a real date and
  time: 2025-02-30T... matches the pattern but is refused, as the Spark jobs refuse it.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import fastjsonschema
import jsonschema
from jsonschema import Draft202012Validator

from ..schemas.store import DEAD_LETTER_TYPE, ENVELOPE, ENVELOPE_ID, SchemaSet

TS_EXAMPLE = "2026-11-22T10:00:00.123Z"


@dataclass(frozen=True)
class Invalid:
    """Why an event was refused: a machine class, the field, and a sentence with the fix."""

    error_class: str
    field: str
    message: str
    schema: str = ""  # the event type checked against ("" if unknown)

    def __str__(self) -> str:
        return f"{self.error_class}: {self.message}"


def _is_int(checker, instance) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_Strict = jsonschema.validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_int))


def ecma_patterns(schema: Any) -> Any:
    """Copy of a schema whose patterns end at end-of-string as in ECMA-262 (`$` -> `\\Z`)."""
    if isinstance(schema, dict):
        out = {k: ecma_patterns(v) for k, v in schema.items()}
        p = schema.get("pattern")
        if isinstance(p, str) and p.endswith("$") and not p.endswith("\\$"):
            out["pattern"] = p[:-1] + "\\Z"
        return out
    if isinstance(schema, list):
        return [ecma_patterns(v) for v in schema]
    return schema


def integer_paths(schema: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths of object members typed integer (through allOf), for the no-float check."""
    out: list[tuple[str, ...]] = []
    if not isinstance(schema, dict):
        return out
    if schema.get("type") == "integer" and prefix:
        out.append(prefix)
    for sub in schema.get("allOf", []):
        out += integer_paths(sub, prefix)
    for name, sub in schema.get("properties", {}).items():
        out += integer_paths(sub, (*prefix, name))
    return out


def pattern_paths(schema: Any, pattern: str, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths of object members whose pattern is `pattern` (through allOf)."""
    out: list[tuple[str, ...]] = []
    if not isinstance(schema, dict):
        return out
    if schema.get("pattern") == pattern and prefix:
        out.append(prefix)
    for sub in schema.get("allOf", []):
        out += pattern_paths(sub, pattern, prefix)
    for name, sub in schema.get("properties", {}).items():
        out += pattern_paths(sub, pattern, (*prefix, name))
    return out


def timestamp_pattern(schemas: SchemaSet) -> str:
    """The envelope's timestamp pattern: every field with it is a timestamp."""
    return schemas.by_id[ENVELOPE_ID]["properties"]["timestamp"]["pattern"]


def real_time(text: str) -> bool:
    try:
        datetime.strptime(text[:23], "%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        return False
    return True


def _type_name(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "an integer", float: "a decimal number", type(None): "null"}.get(type(v), type(v).__name__)


def _show(v: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


def _field(path) -> str:
    return ".".join(str(p) for p in path) or "(event)"


@dataclass
class _Compiled:
    event_type: str
    fast: Any
    ints: list[tuple[str, ...]]
    schema: dict
    times: list[tuple[str, ...]] = field(default_factory=list)

    @cached_property
    def detailed(self):
        return _Strict(self.schema)


class Validator:
    """Validate parsed events against their type's schema; build every type on first use."""

    def __init__(self, schemas: SchemaSet):
        self.schemas = schemas
        self._compiled: dict[str, _Compiled] = {}
        self.types = frozenset(t for t in schemas.events if t != DEAD_LETTER_TYPE)

    @cached_property
    def _envelope(self) -> _Compiled:
        return self._compile(ENVELOPE, self.schemas.inline(self.schemas.by_id[ENVELOPE_ID]))

    @cached_property
    def _timestamp(self) -> tuple[str, str]:
        p = timestamp_pattern(self.schemas)
        return p, ecma_patterns({"pattern": p})["pattern"]

    def _compile(self, name: str, bundle: dict) -> _Compiled:
        schema = ecma_patterns(bundle)
        return _Compiled(name, fastjsonschema.compile(schema, use_formats=False), integer_paths(schema),
                         schema, pattern_paths(schema, self._timestamp[1]))

    def compiled(self, event_type: str) -> _Compiled | None:
        c = self._compiled.get(event_type)
        if c is None and event_type in self.types:
            c = self._compiled[event_type] = self._compile(event_type, self.schemas.bundle(event_type))
        return c

    def check(self, event: Any) -> Invalid | None:
        """None if the event is valid; otherwise the first problem, explained."""
        if not isinstance(event, dict):
            return Invalid("schema.type", "(event)",
                           f"the event must be a JSON object (the {ENVELOPE} envelope), got "
                           f"{_type_name(event)}; send one object per record")
        t = event.get("type")
        c = self.compiled(t) if isinstance(t, str) else None
        if c is None:
            bad = self._run(self._envelope, event, "")
            if bad:
                return bad
            known = ", ".join(sorted(self.types))
            return Invalid("event.unknown_type", "type",
                           f"`type` {_show(t)} has no schema; use one of: {known} (a new type needs "
                           "schemas/events/<type>.json and an entry in topics.yaml)")
        return self._run(c, event, t)

    def _run(self, c: _Compiled, event: dict, schema: str) -> Invalid | None:
        try:
            c.fast(event)
        except fastjsonschema.JsonSchemaException:
            return self.explain(c, event, schema)
        for path in c.ints:
            v = _at(event, path)
            if isinstance(v, float):
                return Invalid("schema.type", _field(path),
                               f"`{_field(path)}` must be a whole JSON number (an integer), got "
                               f"{_show(v)}; send it without a decimal point", schema)
        bad = self._unreal_times(c, event, schema)
        return min(bad)[1] if bad else None

    def _unreal_times(self, c: _Compiled, event: dict, schema: str) -> list[tuple[tuple, Invalid]]:
        """Timestamps that match the pattern but name no real time (2025-02-30), ranked."""
        out = []
        for path in c.times:
            v = _at(event, path)
            pattern = self._timestamp[1]
            if isinstance(v, str) and v[8:10] > "28" and re.search(pattern, v) and not real_time(v):
                out.append(((len(path), RANK_OTHER, list(path)), Invalid(
                    "schema.value", _field(path), f"`{_field(path)}` is not a real date and time, got "
                    f"{_show(v)}", schema)))
        return out

    def explain(self, c: _Compiled, event: dict, schema: str) -> Invalid:
        ranked = [(_rank(e), _describe(e, schema)) for e in c.detailed.iter_errors(event)]
        ranked += self._unreal_times(c, event, schema)
        if not ranked:  # the fast and detailed validators disagree: trust neither silently
            return Invalid("schema.invalid", "(event)",
                           f"the event does not match {schema or ENVELOPE}; check it against "
                           f"schemas/events/{schema}.json", schema)
        return min(ranked, key=lambda r: r[0])[1]


_ARTICLE = {"integer": "an integer", "string": "a string", "object": "an object", "array": "an array",
            "number": "a number", "boolean": "a boolean", "null": "null"}
_TYPE_HINT = {"integer": " (no quotes, no decimal point)",
              "number": " (a JSON number such as 0.0038, no quotes)"}
# The order of blame, shared with the Spark jobs (hanzo_stream/jobs/contract.py): shallow
# problems first (a missing envelope field before a bad data field), then the most basic kind
# (wrong type before missing field before wrong value); every other keyword ranks RANK_OTHER.
RANK = {"type": 0, "required": 1, "const": 2, "additionalProperties": 3, "enum": 4}
RANK_OTHER = 9


def _at(event: Any, path: tuple[str, ...]) -> Any:
    for p in path:
        event = event.get(p) if isinstance(event, dict) else None
    return event


def _rank(e: jsonschema.ValidationError):
    return (len(e.absolute_path), RANK.get(e.validator, RANK_OTHER), list(map(str, e.absolute_path)))


def _describe(e: jsonschema.ValidationError, schema: str) -> Invalid:
    path = list(e.absolute_path)
    f = _field(path)
    what = schema or ENVELOPE
    v, inst = e.validator_value, e.instance
    if e.validator == "required":
        missing = next((k for k in v if isinstance(inst, dict) and k not in inst), v[0])
        name = _field([*path, missing])
        return Invalid("schema.required", name,
                       f"`{name}` is missing; {what} requires it (see schemas/events/{schema}.json)"
                       if schema else f"`{name}` is missing; every {ENVELOPE} envelope carries it",
                       schema)
    if e.validator == "type":
        want = " or ".join(_ARTICLE.get(t, t) for t in ([v] if isinstance(v, str) else v))
        hint = _TYPE_HINT.get(v, "") if isinstance(v, str) else ""
        got = "null" if inst is None else f"{_type_name(inst)} {_show(inst)}"
        return Invalid("schema.type", f, f"`{f}` must be {want}{hint}, got {got}", schema)
    if e.validator == "additionalProperties":
        allowed = sorted(e.schema.get("properties", {}))
        extra = sorted(k for k in inst if k not in allowed) if isinstance(inst, dict) else []
        name = extra[0] if extra else "?"
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        return Invalid("schema.unknown_field", _field([*path, name]),
                       f"`{_field([*path, name])}` is not a field here; {hint}allowed: "
                       f"{', '.join(allowed)} (event fields go inside `data`)", schema)
    if e.validator == "const":
        return Invalid("schema.value", f, f"`{f}` must be {_show(v)}, got {_show(inst)}", schema)
    if e.validator == "enum":
        return Invalid("schema.value", f, f"`{f}` must be one of {', '.join(map(str, v))}, got "
                       f"{_show(inst)}", schema)
    if e.validator == "pattern":
        return Invalid("schema.value", f, _pattern_message(f, inst), schema)
    if e.validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
        return Invalid("schema.value", f, f"`{f}` must be {op[e.validator]} {v}, got {_show(inst)}",
                       schema)
    if e.validator in ("minLength", "maxLength"):
        word = "at least" if e.validator == "minLength" else "at most"
        return Invalid("schema.value", f, f"`{f}` must have {word} {v} character(s), got "
                       f"{_show(inst)}", schema)
    return Invalid("schema.value", f, f"`{f}`: {e.message}", schema)


def _pattern_message(f: str, inst: Any) -> str:
    leaf = f.rsplit(".", 1)[-1]
    if leaf in ("timestamp", "window_start", "window_end", "sent_at"):
        hint = ""
        if isinstance(inst, str) and re.fullmatch(r".*T\d\d:\d\d:\d\d(Z|[+-]00:?00)", inst):
            hint = " (milliseconds are missing: add .000)"
        elif isinstance(inst, str) and re.search(r"[+-]\d\d:?\d\d$", inst):
            hint = " (convert to UTC and end with Z)"
        return (f"`{f}` must be ISO 8601 UTC with exactly milliseconds and Z, e.g. {TS_EXAMPLE}, "
                f"got {_show(inst)}{hint}")
    if leaf == "id":
        return (f"`{f}` must be 1-128 printable ASCII characters without spaces (a ULID or UUIDv7 is "
                f"recommended, e.g. evt_01HQ3X7K8M2N4P5R6S7T8U9V0W), got {_show(inst)}; generate one "
                "per event (hanzo_stream.client.envelope.new_id) and reuse it on retries")
    if leaf == "ip":
        return f"`{f}` must be an IPv4 or IPv6 address such as 203.0.113.42 or 2001:db8::1, got {_show(inst)}"
    if leaf == "email":
        return f"`{f}` must be an email address such as user456@hanzo.ai, got {_show(inst)}"
    if leaf == "billing_id":
        return f"`{f}` must be the hex sha256 of \"team_id|org_id|window_start\", got {_show(inst)}"
    if leaf == "type":
        return f"`{f}` must be a dotted lower-case event type such as llm.usage.completed, got {_show(inst)}"
    return f"`{f}` has the wrong format, got {_show(inst)}"
