"""The fast event validator: every event type's schema compiled once, explained on failure.

Valid events (the hot path) go through fastjsonschema, which compiles each bundled schema
to Python once (about 25x faster than jsonschema here, see docs/client.md). Only a failing
event is run through jsonschema, whose structured errors name the field, so the slow path
costs nothing in the common case. Two deliberate deviations from Python's defaults, so the
Python result matches the schemas' meaning in every language:
- integers: 1.0 is not an integer (jsonschema and fastjsonschema both accept it); counts
  (tokens, milliseconds, units) must be whole JSON numbers. Money (`cost_usd`) is a decimal
  JSON number and any number passes here; the jobs read its decimal text (docs/schemas.md);
- patterns: `$` is ECMA-262's end of string, so "...Z\n" is not a valid timestamp; and a
  string longer than PATTERN_INPUT_MAX is refused before its pattern runs, as the jobs do
  (schemas/patterns.py guard_patterns: Java's engine would overflow its stack on it);
- timestamps (any string with the envelope's timestamp pattern) must also be a real date and
  time: 2025-02-30T... matches the pattern but is refused, as the Spark jobs refuse it.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import fastjsonschema
import jsonschema
from jsonschema import Draft202012Validator

from . import refusals as R
from .patterns import guard_patterns
from .refusals import Invalid, show
from .store import DEAD_LETTER_TYPE, ENVELOPE, ENVELOPE_ID, SchemaSet

__all__ = ["Invalid", "Validator"]


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
        schema = ecma_patterns(guard_patterns(bundle))
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
            return R.NOT_OBJECT.invalid("(event)", got=_type_name(event))
        t = event.get("type")
        c = self.compiled(t) if isinstance(t, str) else None
        if c is None:
            bad = self._run(self._envelope, event, "")
            if bad:
                return bad
            return R.UNKNOWN_TYPE.invalid("type", known=", ".join(sorted(self.types)), got=show(t))
        return self._run(c, event, t)

    def _run(self, c: _Compiled, event: dict, schema: str) -> Invalid | None:
        try:
            c.fast(event)
        except fastjsonschema.JsonSchemaException:
            return self.explain(c, event, schema)
        for path in c.ints:
            v = _at(event, path)
            if isinstance(v, float):
                return R.TYPE.invalid(_field(path), schema, field=_field(path),
                                      want=R.wanted("integer"), got=show(v))
        bad = self._unreal_times(c, event, schema)
        return min(bad)[1] if bad else None

    def _unreal_times(self, c: _Compiled, event: dict, schema: str) -> list[tuple[tuple, Invalid]]:
        """Timestamps that match the pattern but name no real time (2025-02-30), ranked."""
        out = []
        for path in c.times:
            v = _at(event, path)
            pattern = self._timestamp[1]
            if isinstance(v, str) and v[8:10] > "28" and re.search(pattern, v) and not real_time(v):
                out.append(((len(path), RANK_OTHER, list(path)), R.TIMESTAMP.invalid(
                    _field(path), schema, field=_field(path), got=show(v), hint="")))
        return out

    def explain(self, c: _Compiled, event: dict, schema: str) -> Invalid:
        ranked = [(_rank(e), _describe(e, schema, self._timestamp[0]))
                  for e in c.detailed.iter_errors(event)]
        ranked += self._unreal_times(c, event, schema)
        if not ranked:  # the fast and detailed validators disagree: trust neither silently
            return R.SCHEMA_INVALID.invalid("(event)", schema, event_type=schema or ENVELOPE)
        return min(ranked, key=lambda r: r[0])[1]


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


def _describe(e: jsonschema.ValidationError, schema: str, timestamp: str) -> Invalid:
    """The refusal (refusals.py) of one jsonschema error, as the jobs word its rule."""
    path = list(e.absolute_path)
    f = _field(path)
    v, inst = e.validator_value, e.instance
    got = "null" if inst is None else f"{_type_name(inst)} {show(inst)}"
    if e.validator == "required":
        missing = next((k for k in v if isinstance(inst, dict) and k not in inst), v[0])
        name = _field([*path, missing])
        if schema:
            return R.REQUIRED.invalid(name, schema, field=name, event_type=schema)
        return R.REQUIRED_ENVELOPE.invalid(name, schema, field=name)
    if e.validator == "type":
        return R.TYPE.invalid(f, schema, field=f, want=R.wanted(v), got=got)
    if e.validator == "additionalProperties":
        allowed = sorted(e.schema.get("properties", {}))
        extra = sorted(k for k in inst if k not in allowed) if isinstance(inst, dict) else []
        # the key as written, even "" (a job names it the same way)
        name = ".".join(str(p) for p in [*path, extra[0] if extra else "?"])
        close = difflib.get_close_matches(name.rsplit(".", 1)[-1], allowed, n=1)
        return R.UNKNOWN_FIELD.invalid(name, schema, field=name, allowed=", ".join(allowed),
                                       **({"close": close[0]} if close else {}))
    if e.validator == "const":
        return R.CONST.invalid(f, schema, field=f, value=show(v), got=show(inst))
    if e.validator == "enum":
        return R.ENUM.invalid(f, schema, field=f, values=", ".join(map(str, v)), got=show(inst))
    if e.validator == "pattern":
        raw = v[:-2] + "$" if v.endswith("\\Z") else v  # the schema's own (ecma_patterns)
        refusal, values = R.pattern_refusal(f, raw, timestamp)
        return refusal.invalid(f, schema, **values, got=show(inst), hint=_timestamp_hint(inst))
    if e.validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
        return R.BOUND.invalid(f, schema, field=f, op=op[e.validator], limit=v, got=show(inst))
    if e.validator in ("minLength", "maxLength"):
        word = "at least" if e.validator == "minLength" else "at most"
        return R.LENGTH.invalid(f, schema, field=f, word=word, n=v, got=show(inst))
    return R.OTHER.invalid(f, schema, field=f, message=e.message)


def _timestamp_hint(inst: Any) -> str:
    if isinstance(inst, str) and re.fullmatch(r".*T\d\d:\d\d:\d\d(Z|[+-]00:?00)", inst):
        return " (milliseconds are missing: add .000)"
    if isinstance(inst, str) and re.search(r"[+-]\d\d:?\d\d$", inst):
        return " (convert to UTC and end with Z)"
    return ""
