"""The BACKWARD gate, rule by rule: each table row is (old, new, expected rule or None)."""

from __future__ import annotations

import copy

import pytest

from hanzo_stream.schemas.compat import compare, compare_files

BASE = {
    "$id": "https://schemas.hanzo.ai/stream/events/x.json",
    "type": "object",
    "required": ["team_id"],
    "properties": {
        "team_id": {"type": "string"},
        "data": {
            "type": "object",
            "required": ["model", "cost_usd"],
            "additionalProperties": False,
            "properties": {
                "model": {"type": "string", "minLength": 1, "maxLength": 100},
                "cost_usd": {"type": "number", "minimum": 0, "maximum": 1000},
                "total_tokens": {"type": "integer", "minimum": 0},
                "tier": {"enum": ["free", "pro"]},
                "region": {"type": "string", "pattern": "^[a-z]+$"},
                "note": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
                "kind": {"const": "a"},
                "meta": {"type": "object", "properties": {"origin": {"type": "string"}}},
            },
        },
    },
}


def data(schema):
    return schema["properties"]["data"]


def props(schema):
    return data(schema)["properties"]


def edit(fn):
    new = copy.deepcopy(BASE)
    fn(new)
    return new


# (id, change, rule expected: None when the change is BACKWARD compatible)
CASES = [
    # fields
    ("add optional field to a closed object", lambda s: props(s).update(latency_ms={"type": "integer"}),
     None),
    ("add field to an open object",
     lambda s: props(s)["meta"]["properties"].update(region={"type": "string"}), "field.added_open"),
    ("add field at the open top level", lambda s: s["properties"].update(org_id={"type": "string"}),
     "field.added_open"),
    ("remove field", lambda s: props(s).pop("note"), "field.removed"),
    ("remove two fields", lambda s: (props(s).pop("note"), props(s).pop("region")), "field.removed"),
    ("rename field", lambda s: props(s).update(comment=props(s).pop("note")), "field.renamed"),
    ("remove envelope field", lambda s: s["properties"].pop("team_id"), "field.removed"),
    # types
    ("change type string->integer", lambda s: props(s)["note"].update(type="integer"), "type.changed"),
    ("widen type with null", lambda s: props(s)["note"].update(type=["string", "null"]), None),
    ("widen integer->number", lambda s: props(s)["total_tokens"].update(type="number"), None),
    ("narrow number->integer", lambda s: props(s)["cost_usd"].update(type="integer"), "type.changed"),
    ("add type to untyped field", lambda s: props(s)["tier"].update(type="string"), "type.changed"),
    ("array items type change", lambda s: props(s)["tags"]["items"].update(type="integer"), "type.changed"),
    # required
    ("new required without default",
     lambda s: (props(s).update(provider={"type": "string"}), data(s)["required"].append("provider")),
     "required.added"),
    ("new required with default",
     lambda s: (props(s).update(provider={"type": "string", "default": "openai"}),
                data(s)["required"].append("provider")), None),
    ("optional made required", lambda s: data(s)["required"].append("note"), "required.added"),
    ("required made optional", lambda s: data(s)["required"].remove("model"), None),
    ("envelope field made required", lambda s: s["required"].append("org_id"), "required.added"),
    # enums and consts
    ("narrow enum", lambda s: props(s)["tier"].update(enum=["pro"]), "enum.narrowed"),
    ("widen enum", lambda s: props(s)["tier"].update(enum=["free", "pro", "team"]), None),
    ("enum added to free string", lambda s: props(s)["note"].update(enum=["a", "b"]), "enum.narrowed"),
    ("const changed", lambda s: props(s)["kind"].update(const="b"), "enum.narrowed"),
    ("const widened to enum", lambda s: props(s).update(kind={"enum": ["a", "b"]}), None),
    # constraints
    ("raise minimum", lambda s: props(s)["cost_usd"].update(minimum=0.01), "constraint.tightened"),
    ("lower minimum", lambda s: props(s)["cost_usd"].update(minimum=-1), None),
    ("lower maximum", lambda s: props(s)["cost_usd"].update(maximum=999.99), "constraint.tightened"),
    ("raise maximum", lambda s: props(s)["cost_usd"].update(maximum=10_000), None),
    ("add exclusiveMaximum", lambda s: props(s)["cost_usd"].update(exclusiveMaximum=500),
     "constraint.tightened"),
    ("add maximum to an unbounded count", lambda s: props(s)["total_tokens"].update(maximum=10**9),
     "constraint.tightened"),
    ("raise minLength", lambda s: props(s)["model"].update(minLength=2), "constraint.tightened"),
    ("lower maxLength", lambda s: props(s)["model"].update(maxLength=50), "constraint.tightened"),
    ("raise maxLength", lambda s: props(s)["model"].update(maxLength=200), None),
    ("drop maxLength", lambda s: props(s)["model"].pop("maxLength"), None),
    ("add pattern", lambda s: props(s)["note"].update(pattern="^x"), "constraint.tightened"),
    ("change pattern", lambda s: props(s)["region"].update(pattern="^[a-z]{2}$"), "constraint.tightened"),
    ("drop pattern", lambda s: props(s)["region"].pop("pattern"), None),
    ("add format", lambda s: props(s)["note"].update(format="email"), "constraint.tightened"),
    ("lower maxItems", lambda s: props(s)["tags"].update(maxItems=5), "constraint.tightened"),
    ("add uniqueItems", lambda s: props(s)["tags"].update(uniqueItems=True), "constraint.tightened"),
    ("add multipleOf", lambda s: props(s)["cost_usd"].update(multipleOf=0.000001), "constraint.tightened"),
    # content model
    ("close an open object", lambda s: props(s)["meta"].update(additionalProperties=False),
     "content.closed"),
    ("close the top level", lambda s: s.update(additionalProperties=False), "content.closed"),
    ("constrain additional", lambda s: props(s)["meta"].update(additionalProperties={"type": "string"}),
     "content.closed"),
    ("open a closed object", lambda s: data(s).pop("additionalProperties"), None),
    # structure
    ("add allOf entry", lambda s: s.update(allOf=[{"required": ["data"]}]), "structure.changed"),
    ("change $id", lambda s: s.update({"$id": "https://schemas.hanzo.ai/stream/events/y.json"}),
     "structure.changed"),
    ("unknown keyword", lambda s: props(s)["note"].update(contentEncoding="base64"), "structure.changed"),
    # documentation never matters
    ("edit description", lambda s: props(s)["note"].update(description="free text"), None),
    ("add title and examples", lambda s: s.update(title="x", examples=[{}]), None),
    ("no change", lambda s: None, None),
]


@pytest.mark.parametrize(("change", "rule"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_rule(change, rule):
    violations = compare(BASE, edit(change), "events/x.json")
    if rule is None:
        assert violations == [], [str(v) for v in violations]
    else:
        assert violations, f"expected {rule}"
        assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


def test_narrowing_number_to_integer_is_refused():
    # money back to integer micro-dollars would refuse every old cost_usd such as 0.0038
    (v,) = compare(BASE, edit(lambda s: props(s)["cost_usd"].update(type="integer")), "events/x.json")
    assert (v.rule, v.field) == ("type.changed", "data.cost_usd")
    assert "number" in v.message


def test_messages_name_the_field_and_the_fix():
    (v,) = compare(BASE, edit(lambda s: props(s).pop("note")), "events/x.json")
    assert v.field == "data.note"
    assert "Keep it" in v.message and "deprecated" in v.message
    (v,) = compare(BASE, edit(lambda s: props(s).update(comment=props(s).pop("note"))), "events/x.json")
    assert "`data.note` was renamed to `comment`" in v.message
    (v,) = compare(BASE, edit(lambda s: props(s)["tier"].update(enum=["pro"])), "events/x.json")
    assert v.field == "data.tier" and '"free"' in v.message
    assert str(v).startswith("events/x.json: data.tier: ")


def test_one_violation_per_problem():
    def many(s):
        props(s).pop("note")
        props(s)["tier"].update(enum=["pro"])
        props(s)["meta"].update(additionalProperties=False)

    rules = sorted(v.rule for v in compare(BASE, edit(many), "events/x.json"))
    assert rules == ["content.closed", "enum.narrowed", "field.removed"]


def test_refs_into_shared_definitions():
    old = {"properties": {"data": {"$ref": "https://schemas.hanzo.ai/stream/defs/a.json"}}}
    new = {"properties": {"data": {"$ref": "https://schemas.hanzo.ai/stream/defs/b.json"}}}
    (v,) = compare(old, new, "events/x.json")
    assert v.rule == "structure.changed" and v.field == "data"


def test_files_removed_and_added():
    old = {"events/a.json": BASE, "events/b.json": BASE}
    new = {"events/a.json": BASE, "events/c.json": BASE}
    (v,) = compare_files(old, new)
    assert (v.file, v.rule) == ("events/b.json", "schema.removed")


def test_the_real_schemas_are_compatible_with_themselves(root):
    from hanzo_stream.schemas.store import load

    s = load(root / "schemas")
    assert compare_files(s.files, copy.deepcopy(s.files)) == []
