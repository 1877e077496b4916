"""Check schemas/ on its own and against topics.yaml (`hanzo-stream validate`, `schemas check`).

Beyond meta-validation, the schemas keep to a keyword subset whose meaning is identical in
draft 2020-12 and draft-07. That is what lets the same files drive fastjsonschema (the
validator's hot path), the BACKWARD gate, and a registry whose JSON compatibility checker
only speaks draft-07 (Apicurio 3.0, see docs/schemas.md), with no semantic drift.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from ..registry import Registry
from .patterns import backtracking_risk
from .store import (
    BASE_ID,
    DEAD_LETTER_TYPE,
    ENVELOPE_ID,
    EXAMPLES_DIR,
    SchemaFileError,
    SchemaSet,
    load,
)

DIALECT = "https://json-schema.org/draft/2020-12/schema"
ALLOWED = {"$schema", "$id", "$ref", "$comment", "title", "description", "default", "examples",
           "deprecated", "type", "properties", "required", "additionalProperties", "enum", "const",
           "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
           "maxLength", "minItems", "maxItems", "uniqueItems", "items", "allOf"}
DOCS = {"$comment", "title", "description", "default", "examples", "deprecated"}


@dataclass(frozen=True)
class SchemaProblem:
    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}"


def _keywords(node: Any, rel: str, where: str, out: list[SchemaProblem]) -> None:
    if isinstance(node, list):
        for i, v in enumerate(node):
            _keywords(v, rel, f"{where}[{i}]", out)
        return
    if not isinstance(node, dict):
        return
    for k in node:
        if k not in ALLOWED:
            out.append(SchemaProblem(rel, where or "(root)", f"keyword {k!r} is outside the supported "
                                     f"subset ({', '.join(sorted(ALLOWED - DOCS))}); see docs/schemas.md"))
    if isinstance(node.get("pattern"), str) and (risk := backtracking_risk(node["pattern"])):
        out.append(SchemaProblem(rel, where or "(root)", f"pattern {node['pattern']!r} can backtrack "
                                 f"for a long time on a crafted value: {risk}. Rewrite it so no two "
                                 "parts can match the same characters (docs/schemas.md#patterns)"))
    if "$ref" in node and set(node) - DOCS - {"$ref"}:
        out.append(SchemaProblem(rel, where or "(root)", "put `$ref` alone in its object (wrap it in "
                                 "allOf to add constraints): draft-07 ignores $ref's siblings"))
    for k in ("properties",):
        for name, sub in node.get(k, {}).items():
            _keywords(sub, rel, f"{where}.{name}" if where else name, out)
    for k in ("items", "additionalProperties", "allOf"):
        if k in node:
            _keywords(node[k], rel, where, out)


def check_files(schemas: SchemaSet) -> list[SchemaProblem]:
    out: list[SchemaProblem] = []
    for rel, s in schemas.files.items():
        try:
            Draft202012Validator.check_schema(s)
        except SchemaError as e:
            out.append(SchemaProblem(rel, "/".join(map(str, e.absolute_path)) or "(root)",
                                     f"not a valid JSON Schema: {e.message}"))
            continue
        if s.get("$schema") != DIALECT:
            out.append(SchemaProblem(rel, "$schema", f"must be {DIALECT}"))
        if s.get("$id") != BASE_ID + rel:
            out.append(SchemaProblem(rel, "$id", f"must be {BASE_ID + rel} (its path under schemas/)"))
        _keywords(s, rel, "", out)
        for ref in _refs(s):
            if ref not in schemas.by_id:
                out.append(SchemaProblem(rel, "$ref", f"{ref} names no file under schemas/; refer to "
                                         f"another schema by its $id ({BASE_ID}...)"))
    if ENVELOPE_ID not in schemas.by_id:
        out.append(SchemaProblem("hanzo.stream.v1.json", "(file)", "the envelope schema is missing"))
    for t, s in schemas.events.items():
        rel = f"events/{t}.json"
        if s.get("title") != t:
            out.append(SchemaProblem(rel, "title", f"must be the event type {t!r}"))
        if t == DEAD_LETTER_TYPE:
            continue
        if {"$ref": ENVELOPE_ID} not in s.get("allOf", []):
            out.append(SchemaProblem(rel, "allOf", f'must include {{"$ref": "{ENVELOPE_ID}"}}'))
        if s.get("properties", {}).get("type", {}).get("const") != t:
            out.append(SchemaProblem(rel, "properties.type", f'must be {{"const": "{t}"}}'))
    return out


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def check_registry(schemas: SchemaSet, registry: Registry) -> list[SchemaProblem]:
    """Every registry event type has a schema, every schema a topic, every key is required."""
    out: list[SchemaProblem] = []
    mapped = {t: topic for topic in registry.topics for t in topic.event_types}
    for t, topic in sorted(mapped.items()):
        if t not in schemas.events:
            out.append(SchemaProblem(f"events/{t}.json", "(file)", f"topic {topic.name} in "
                                     f"{registry.path} lists {t} but it has no schema; add the file"))
            continue
        if t == DEAD_LETTER_TYPE:
            continue
        b = schemas.bundle(t)
        env_req = set(b.get("required", [])) | {
            r for sub in b.get("allOf", []) for r in sub.get("required", [])}
        data_req = set(b.get("properties", {}).get("data", {}).get("required", []))
        if topic.key not in env_req | data_req:
            out.append(SchemaProblem(f"events/{t}.json", "required", f"`{topic.key}` keys topic "
                                     f"{topic.name}, so the schema must require it (envelope or data)"))
    for t in sorted(set(schemas.events) - set(mapped)):
        out.append(SchemaProblem(f"events/{t}.json", "(file)", f"no topic in {registry.path} lists "
                                 f"event type {t}; add it to a topic's event_types"))
    return out


def check_examples(schemas: SchemaSet) -> list[SchemaProblem]:
    """Valid examples pass and invalid ones fail with the error they declare."""
    from .validator import Validator

    v = Validator(schemas)
    out: list[SchemaProblem] = []
    ex_root = schemas.root / EXAMPLES_DIR
    for t in sorted(schemas.events):
        for kind in ("valid", "invalid"):
            files = sorted((ex_root / t / kind).glob("*.json"))
            where = f"{EXAMPLES_DIR}/{t}/{kind}"
            if not files:
                out.append(SchemaProblem(where, "(dir)", f"add at least one {kind} example for {t}"))
            for f in files:
                rel = f"{where}/{f.name}"
                try:
                    doc = json.loads(f.read_text(encoding="utf-8"))
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    out.append(SchemaProblem(rel, "(file)", f"not valid JSON: {e}"))
                    continue
                wrapped = kind == "invalid" and isinstance(doc, dict) and "event" in doc
                event = doc["event"] if wrapped else doc
                got = _check(v, schemas, t, event)
                if kind == "valid" and got is not None:
                    out.append(SchemaProblem(rel, got[1], f"should be valid but: {got[2]}"))
                elif kind == "invalid":
                    want = doc.get("expect", {}) if isinstance(doc, dict) else {}
                    if got is None:
                        out.append(SchemaProblem(rel, "(event)", "should be invalid but passes"))
                    elif want and (want.get("error_class"), want.get("field")) != got[:2]:
                        out.append(SchemaProblem(rel, got[1], f"expected {want} but got {got[0]} on "
                                                 f"{got[1]}: {got[2]}"))
    return out


def _check(v, schemas: SchemaSet, t: str, event: Any) -> tuple[str, str, str] | None:
    if t == DEAD_LETTER_TYPE:  # a header view, not an envelope
        errors = list(Draft202012Validator(schemas.events[t]).iter_errors(event))
        if not errors:
            return None
        e = errors[0]
        return (f"schema.{e.validator}", ".".join(map(str, e.absolute_path)) or "(event)", e.message)
    bad = v.check(event)
    if bad is None:
        if isinstance(event, dict) and event.get("type") != t:
            return ("example.type", "type", f"example of {t} has type {event.get('type')!r}")
        return None
    return (bad.error_class, bad.field, bad.message)


def validate_schemas(schemas_dir: Path, registry: Registry | None) -> list[SchemaProblem]:
    try:
        schemas = load(schemas_dir)
    except SchemaFileError as e:
        return [SchemaProblem(str(schemas_dir), "(file)", str(e))]
    if not schemas.files:
        return [SchemaProblem(str(schemas_dir), "(dir)", "no schema files found")]
    out = check_files(schemas)
    if out:
        return out  # examples and registry checks need sound schemas
    if registry is not None:
        out += check_registry(schemas, registry)
    return out + check_examples(schemas)


def validate_all(registry: Registry) -> list[SchemaProblem]:
    """Called by `hanzo-stream validate`: schemas/ next to the registry file."""
    return validate_schemas(Path(registry.path).resolve().parent / "schemas", registry)
