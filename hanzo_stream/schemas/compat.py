"""The BACKWARD gate: a new schema version must accept every event the previous one accepted.

Consumers are upgraded before producers, and events written under the old schema stay in
the topics for days; a consumer on the new schema must still read them. So every change
is checked keyword by keyword, and each violation gets one message that names the field
and the compatible alternative. Refused (rule ids in brackets):

- removed or renamed fields [field.removed, field.renamed]
- changed types, unless widened (string -> [string, null], integer -> number) [type.changed]
- a new required field without a default, or an optional field made required [required.added]
- narrowed enums or consts [enum.narrowed]
- tightened constraints: min/max bounds, lengths, pattern, format, multipleOf... [constraint.tightened]
- closed content models: additionalProperties false (or a schema) added [content.closed]
- a field added to an open content model: old events may already carry it with another
  type; Confluent's and Apicurio's JSON rules refuse it too, which is why our objects are
  closed from their first version and grow by adding optional fields [field.added_open]
- added allOf/anyOf/oneOf/not, a changed $ref, a removed schema file [structure.changed, schema.removed]

Descriptions, titles, examples and defaults never matter. Field names and the rule list are
documented in docs/schemas.md and tested table by table in tests/unit/test_compat.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DOC_KEYWORDS = {"title", "description", "examples", "$comment", "default", "deprecated",
                "readOnly", "writeOnly", "$schema", "$id", "x-notes"}
LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties",
                "minContains")
UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties",
                "maxContains")
SUBSCHEMA_MAPS = ("$defs", "definitions", "patternProperties", "dependentSchemas")
SUBSCHEMA_ONE = ("items", "contains", "propertyNames", "if", "then", "else",
                 "unevaluatedProperties", "unevaluatedItems")
COMBINATORS = ("allOf", "anyOf", "oneOf", "prefixItems")
HANDLED = {"type", "enum", "const", "properties", "required", "additionalProperties", "$ref",
           "pattern", "format", "multipleOf", "uniqueItems", "not", "dependentRequired",
           *LOWER_BOUNDS, *UPPER_BOUNDS, *SUBSCHEMA_MAPS, *SUBSCHEMA_ONE, *COMBINATORS, *DOC_KEYWORDS}


@dataclass(frozen=True)
class Violation:
    file: str
    field: str  # the event field, e.g. data.cost_usd ("(schema)" for the whole file)
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message} [{self.rule}]"


def _types(node: dict) -> set[str] | None:
    t = node.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _values(node: dict) -> list | None:
    if "const" in node:
        return [node["const"]]
    if "enum" in node:
        return list(node["enum"])
    return None


def _made_safe(old: Any, new: Any) -> bool:
    """A pattern that a crafted value could make backtrack for minutes, replaced by one that
    cannot: allowed, though it may refuse an odd value the old one took, since the old one let
    any producer stall every consumer (hanzo_stream/schemas/patterns.py)."""
    from .patterns import backtracking_risk

    return (isinstance(old, str) and isinstance(new, str) and backtracking_risk(old) is not None
            and backtracking_risk(new) is None)


def _bare(node: dict) -> dict:
    return {k: v for k, v in node.items() if k not in DOC_KEYWORDS}


def _show(v: Any) -> str:
    import json

    return json.dumps(v, ensure_ascii=False)


class _Walk:
    def __init__(self, file: str):
        self.file = file
        self.out: list[Violation] = []

    def add(self, field: list[str], rule: str, message: str) -> None:
        f = ".".join(field) or "(schema)"
        self.out.append(Violation(self.file, f, rule, f"`{f}` {message}" if field else message))

    def node(self, old: Any, new: Any, field: list[str]) -> None:
        if old == new:
            return
        if old is True or (isinstance(old, dict) and not _bare(old)):  # anything was allowed
            if new is not True and not (isinstance(new, dict) and not _bare(new)):
                self.add(field, "constraint.tightened", "accepted any value before and now has a "
                         "schema; keep it unconstrained or use a new field")
            return
        if old is False or not isinstance(old, dict):
            return  # nothing was accepted: any new schema accepts at least as much
        if new is False:
            self.add(field, "constraint.tightened", "now accepts nothing (schema false)")
            return
        if not isinstance(new, dict):
            return  # `true`: accepts everything
        self._ref(old, new, field)
        self._type(old, new, field)
        self._values(old, new, field)
        self._bounds(old, new, field)
        self._strings(old, new, field)
        self._object(old, new, field)
        self._subschemas(old, new, field)
        self._unknown(old, new, field)

    def _ref(self, old: dict, new: dict, field: list[str]) -> None:
        if old.get("$ref") != new.get("$ref"):
            if "$ref" in old and "$ref" not in new:
                return  # the referenced constraints are gone: looser, or checked via the rest
            self.add(field, "structure.changed", f"now refers to {new.get('$ref')} instead of "
                     f"{old.get('$ref', 'nothing')}; keep the reference and evolve its target file")

    def _type(self, old: dict, new: dict, field: list[str]) -> None:
        ot, nt = _types(old), _types(new)
        if nt is None:
            return
        if ot is None:
            self.add(field, "type.changed", f"had no type and now must be {'/'.join(sorted(nt))}; "
                     "old events may hold any type")
            return
        lost = {t for t in ot - nt if not (t == "integer" and "number" in nt)}
        if lost:
            self.add(field, "type.changed", f"changed type from {'/'.join(sorted(ot))} to "
                     f"{'/'.join(sorted(nt))}; old events hold {'/'.join(sorted(lost))}. Only widen "
                     "(e.g. add \"null\"), or add a new field with the new type")

    def _values(self, old: dict, new: dict, field: list[str]) -> None:
        ov, nv = _values(old), _values(new)
        if nv is None:
            return
        if ov is None:
            self.add(field, "enum.narrowed", f"now only allows {', '.join(map(_show, nv))} but "
                     "accepted any value before; old events may hold others")
            return
        lost = [v for v in ov if v not in nv]
        if lost:
            self.add(field, "enum.narrowed", f"no longer allows {', '.join(map(_show, lost))}; "
                     "old events hold these values. Keep them in the enum (you may deprecate them "
                     "in the description)")

    def _bounds(self, old: dict, new: dict, field: list[str]) -> None:
        for kw in LOWER_BOUNDS + UPPER_BOUNDS:
            if kw not in new or old.get(kw) == new[kw]:
                continue
            lower = kw in LOWER_BOUNDS
            if kw in old and (new[kw] < old[kw] if lower else new[kw] > old[kw]):
                continue  # loosened
            was = f"{old[kw]}" if kw in old else "none"
            self.add(field, "constraint.tightened", f"tightened {kw} from {was} to {new[kw]}; "
                     "old events may violate it. Only loosen constraints")
        if "multipleOf" in new and old.get("multipleOf") != new["multipleOf"]:
            o = old.get("multipleOf")
            if not (o is not None and (o / new["multipleOf"]).is_integer()):
                self.add(field, "constraint.tightened", f"changed multipleOf from {o} to "
                         f"{new['multipleOf']}; old values may not be multiples of it")
        if new.get("uniqueItems") and not old.get("uniqueItems"):
            self.add(field, "constraint.tightened", "now requires uniqueItems; old arrays may "
                     "repeat items")

    def _strings(self, old: dict, new: dict, field: list[str]) -> None:
        for kw in ("pattern", "format"):
            if kw == "pattern" and _made_safe(old.get(kw), new.get(kw)):
                continue  # a pattern that could hang every consumer, replaced: docs/schemas.md
            if kw in new and old.get(kw) != new[kw]:
                was = f"{old[kw]!r}" if kw in old else "none"
                self.add(field, "constraint.tightened", f"changed {kw} from {was} to {new[kw]!r}; "
                         f"old events may not match it. Remove or keep the old {kw}")

    def _object(self, old: dict, new: dict, field: list[str]) -> None:
        op, np_ = old.get("properties", {}), new.get("properties", {})
        removed = [k for k in op if k not in np_]
        added = [k for k in np_ if k not in op]
        for k in removed:
            if len(removed) == 1 and len(added) == 1:
                self.add([*field, k], "field.renamed", f"was renamed to `{added[0]}`; consumers read "
                         f"`{k}` from old events. Keep `{k}` (mark it deprecated) and add "
                         f"`{added[0]}` as an optional field")
            else:
                self.add([*field, k], "field.removed", "was removed; consumers still read it from "
                         "old events. Keep it (mark it deprecated in its description)")
        renamed = len(removed) == 1 and len(added) == 1
        if old.get("additionalProperties", True) is not False and not renamed:
            for k in added:
                self.add([*field, k], "field.added_open", "was added to an open object (no "
                         "additionalProperties: false); old events may already carry it with "
                         "another type. Add fields to closed objects only")
        for k in op:
            if k in np_:
                self.node(op[k], np_[k], [*field, k])
        oreq, nreq = set(old.get("required", [])), set(new.get("required", []))
        for k in sorted(nreq - oreq):
            prop = np_.get(k)
            if isinstance(prop, dict) and "default" in prop:
                continue  # readers fill the default into old events
            how = "became required" if k in op else "is a new required field"
            self.add([*field, k], "required.added", f"{how} without a default; old events lack it. "
                     "Make it optional, or give it a default")
        for k, deps in new.get("dependentRequired", {}).items():
            lost = set(deps) - set(old.get("dependentRequired", {}).get(k, []))
            if lost:
                self.add([*field, k], "required.added", f"now requires {', '.join(sorted(lost))} "
                         "alongside it; old events may lack them")
        oa, na = old.get("additionalProperties", True), new.get("additionalProperties", True)
        if oa != na:
            if na is False:
                self.add(field, "content.closed", "closed its content model (additionalProperties: "
                         "false); old events may carry other fields. Leave it open")
            elif oa is True or oa == {}:
                self.add(field, "content.closed", "now constrains additional properties; old "
                         "events may carry other fields of any type")
            else:
                self.node(oa, na, [*field, "*"])

    def _subschemas(self, old: dict, new: dict, field: list[str]) -> None:
        for kw in SUBSCHEMA_MAPS:
            o, n = old.get(kw, {}), new.get(kw, {})
            for k in o:
                if k in n:
                    self.node(o[k], n[k], field if kw in ("$defs", "definitions") else [*field, k])
                elif kw in ("$defs", "definitions"):
                    self.add(field, "field.removed", f"definition {k!r} was removed; refs to it break")
            if kw == "patternProperties" and set(n) - set(o):
                self.add(field, "constraint.tightened", "added patternProperties; old events' "
                         "matching fields may violate them")
        for kw in SUBSCHEMA_ONE:
            if kw in new:
                self.node(old.get(kw, True), new[kw], [*field, "[]"] if kw == "items" else field)
        for kw in COMBINATORS:
            o, n = old.get(kw, []), new.get(kw, [])
            for a, b in zip(o, n, strict=False):
                self.node(a, b, field)
            if kw == "allOf" and len(n) > len(o):
                self.add(field, "structure.changed", "gained an allOf entry, whose constraints old "
                         "events never had to meet")
            elif kw != "allOf" and o != n:
                self.add(field, "structure.changed", f"changed {kw}; the gate cannot prove that "
                         "old events still match. Evolve with a new optional field instead")
        if "not" in new and old.get("not") != new["not"]:
            self.add(field, "structure.changed", "changed `not`; old events may now be excluded")

    def _unknown(self, old: dict, new: dict, field: list[str]) -> None:
        for kw in sorted(set(old) | set(new)):
            if kw not in HANDLED and kw[:2] != "x-" and old.get(kw) != new.get(kw):
                self.add(field, "structure.changed", f"changed keyword {kw!r}, which the gate does "
                         "not understand; it refuses rather than guess")


def compare(old: dict, new: dict, file: str) -> list[Violation]:
    """Violations of BACKWARD compatibility between two versions of one schema file."""
    w = _Walk(file)
    if old.get("$id") != new.get("$id"):
        w.add([], "structure.changed", f"$id changed from {old.get('$id')} to {new.get('$id')}; "
              "references and registry subjects follow the $id. Keep it")
    w.node(old, new, [])
    return w.out


def compare_files(old: dict[str, dict], new: dict[str, dict]) -> list[Violation]:
    """Every file of the previous version against the current one (new files are free)."""
    out: list[Violation] = []
    for rel in sorted(old):
        if rel not in new:
            out.append(Violation(rel, "(schema)", "schema.removed",
                                 "the schema file was removed; producers and consumers of its "
                                 "events still exist. Keep it (mark it deprecated in its description)"))
            continue
        out += compare(old[rel], new[rel], rel)
    return out
