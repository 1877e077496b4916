"""Every way an event is refused, once: its error class and the sentence that says the fix.

The validator (validator.py), the client (client/router.py, client/keying.py) and the Spark
jobs' compiled contract (jobs/contract.py) all build their messages from this table, so a dead
letter reads the same whoever wrote it. A message is a `rule`, which only needs what the schema
and the topic know (the field, the allowed values, the limit), then for the client a `detail`
about the value it saw ("; got ..."), which the jobs leave out: the JVM would have to re-render
the value as Python does. tests/integration/test_contract_parity.py holds both sides to exactly
that: the job's message is the client's without its detail.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from typing import Any

from .store import ENVELOPE

TS_EXAMPLE = "2026-11-22T10:00:00.123Z"
ARTICLE = {"integer": "an integer", "string": "a string", "object": "an object", "array": "an array",
           "number": "a number", "boolean": "a boolean", "null": "null"}
TYPE_HINT = {"integer": " (no quotes, no decimal point)",
             "number": " (a JSON number such as 0.0038, no quotes)"}
GOT = "; got {got}"


@dataclass(frozen=True)
class Invalid:
    """Why an event was refused: a machine class, the field, and a sentence with the fix."""

    error_class: str
    field: str
    message: str
    schema: str = ""  # the event type checked against ("" if unknown)
    detail: str = ""  # the end of `message` about the value seen (what a job's message lacks)

    def __str__(self) -> str:
        return f"{self.error_class}: {self.message}"

    @property
    def rule(self) -> str:
        """The message without its detail: what a job's dead letter says of the same bytes."""
        return self.message[:len(self.message) - len(self.detail)] if self.detail else self.message


@dataclass(frozen=True)
class Refusal:
    error_class: str
    rule: str  # a str.format template of what the schema and the topic know
    detail: str = ""  # the client's addition about the value it saw

    def names(self, template: str) -> list[str]:
        return [f for _, f, _, _ in string.Formatter().parse(template) if f]

    def text(self, **values: Any) -> str:
        """The rule: the whole message of a job, the start of the client's."""
        return self.rule.format(**values)

    def detail_text(self, **values: Any) -> str:
        """The client's addition, when it has every value the detail names."""
        names = self.names(self.detail)
        return self.detail.format(**values) if self.detail and all(n in values for n in names) else ""

    def invalid(self, at: str, schema: str = "", /, **values: Any) -> Invalid:
        """The client's verdict on the field `at`: the rule, then the detail when it has the values."""
        detail = self.detail_text(**values)
        return Invalid(self.error_class, at, self.text(**values) + detail, schema, detail)

    def column(self, F: Any, **values: Any) -> Any:
        """The rule as a Spark expression: a plain string when every value is a Python value
        (the jobs keep those in one literal array), else a concatenation with the columns."""
        if not any(hasattr(v, "alias") for v in values.values()):
            return self.text(**values)
        parts = []
        for literal, name, _, _ in string.Formatter().parse(self.rule):
            if literal:
                parts.append(F.lit(literal))
            if name:
                v = values[name]
                parts.append(v if hasattr(v, "alias") else F.lit(str(v)))
        return F.concat(*parts)


def show(v: Any, limit: int = 60) -> str:
    """A value as the client quotes it in a detail: JSON, cut at `limit` characters."""
    try:
        text = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


def wanted(types: str | list[str]) -> str:
    """`integer` -> "an integer (no quotes, no decimal point)"; a list in the schema's order."""
    listed = [types] if isinstance(types, str) else list(types)
    hint = TYPE_HINT.get(listed[0], "") if len(listed) == 1 else ""
    return " or ".join(ARTICLE.get(t, t) for t in listed) + hint


# -- the record as bytes ---------------------------------------------------------------------
TOMBSTONE = Refusal("json.malformed", "the record has no value (a tombstone); send the event JSON "
                    "as the value")
TOO_LARGE = Refusal("size.too_large", "the event is {size} bytes, over the {limit}-byte limit; keep "
                    "events small", " and put large payloads in object storage, sending their URL")
NOT_UTF8 = Refusal("utf8.invalid", "the value is not valid UTF-8; encode the event JSON as UTF-8",
                   " (byte 0x{byte} at offset {offset}: {reason})")
NOT_JSON = Refusal("json.malformed", "the value is not one JSON document (or nests deeper than "
                   "{depth} levels); send one UTF-8 JSON object per record", " ({problem})")
INFINITE = Refusal("json.malformed", "a number is too large for a double; send finite numbers")
UNSERIALIZABLE = Refusal("json.unserializable", "the event cannot be written as JSON ({kind}); use "
                         "only strings, integers, booleans, null, lists and objects")
# -- the event against its schema ------------------------------------------------------------
NOT_OBJECT = Refusal("schema.type", f"the event must be a JSON object (the {ENVELOPE} envelope); "
                     "send one object per record", GOT)
UNKNOWN_TYPE = Refusal("event.unknown_type", "the event's `type` has no schema; use one of: {known} "
                       "(a new type needs schemas/events/<type>.json and an entry in topics.yaml)", GOT)
TYPE = Refusal("schema.type", "`{field}` must be {want}", GOT)
REQUIRED = Refusal("schema.required", "`{field}` is missing; {event_type} requires it (see "
                   "schemas/events/{event_type}.json)")
REQUIRED_ENVELOPE = Refusal("schema.required", f"`{{field}}` is missing; every {ENVELOPE} envelope "
                            "carries it")
UNKNOWN_FIELD = Refusal("schema.unknown_field", "`{field}` is not a field here; allowed: {allowed} "
                        "(event fields go inside `data`)", "; did you mean `{close}`?")
CONST = Refusal("schema.value", "`{field}` must be {value}", GOT)
ENUM = Refusal("schema.value", "`{field}` must be one of {values}", GOT)
BOUND = Refusal("schema.value", "`{field}` must be {op} {limit}", GOT)
LENGTH = Refusal("schema.value", "`{field}` must have {word} {n} character(s)", GOT)
TIMESTAMP = Refusal("schema.value", "`{field}` must be ISO 8601 UTC with exactly milliseconds and Z, "
                    f"and a real date and time, e.g. {TS_EXAMPLE}", GOT + "{hint}")
PATTERN = Refusal("schema.value", "`{field}` has the wrong format (pattern {pattern})", GOT)
# What a field of a known name must look like: a sentence better than its pattern.
FORMATS = {
    "id": "1-128 printable ASCII characters without spaces (a ULID or UUIDv7 is recommended, e.g. "
          "evt_01HQ3X7K8M2N4P5R6S7T8U9V0W); generate one per event "
          "(hanzo_stream.client.envelope.new_id) and reuse it on retries",
    "ip": "an IPv4 or IPv6 address such as 203.0.113.42 or 2001:db8::1",
    "email": "an email address such as user456@hanzo.ai",
    "billing_id": 'the hex sha256 of "team_id|org_id|window_start"',
    "type": "a dotted lower-case event type such as llm.usage.completed",
}
FORMAT = Refusal("schema.value", "`{field}` must be {format}", GOT)
OTHER = Refusal("schema.value", "`{field}`: {message}")  # a keyword the jobs refuse to compile
SCHEMA_INVALID = Refusal("schema.invalid", "the event does not match {event_type}; check it against "
                         "schemas/events/{event_type}.json")
# -- the event against its topic -------------------------------------------------------------
NO_TOPIC = Refusal("event.unknown_type", "event type {type} is in schemas/ but no topic in topics.yaml "
                   "lists it; add it to a topic's event_types")
TOPIC_MISMATCH = Refusal("topic.mismatch", "`type` {type} belongs on topic {home}, not {topic}; "
                         "produce it to {home}")
KEY_MISSING = Refusal("key.missing", "`{field}` is missing or empty; it is the key of topic {topic} "
                      "(events of one {field} stay in order on one partition): set it on the envelope "
                      "or in data")
KEY_NOT_STRING = Refusal("key.invalid", "`{field}` must be a string to key topic {topic}", GOT)
KEY_SURROGATE = Refusal("key.invalid", "`{field}` holds an unpaired UTF-16 surrogate escape; send the "
                        "key as valid Unicode text")
KEY_MISMATCH = Refusal("key.mismatch", "the record key differs from `{field}`; key topic {topic} by "
                       "{field}", " (record key {key}, `{field}` {want})")


def pattern_refusal(field: str, pattern: str, timestamp_pattern: str) -> tuple[Refusal, dict[str, str]]:
    """The refusal of a value that misses its pattern, and the rule's values: the envelope's
    timestamp pattern and the named formats get their sentence, any other its pattern."""
    leaf = field.rsplit(".", 1)[-1]
    if pattern == timestamp_pattern:
        return TIMESTAMP, {"field": field}
    if leaf in FORMATS:
        return FORMAT, {"field": field, "format": FORMATS[leaf]}
    return PATTERN, {"field": field, "pattern": pattern}
