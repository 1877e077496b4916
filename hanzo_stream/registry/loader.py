"""Load topics.yaml: YAML with line numbers -> JSON Schema -> HIP policy -> typed Registry.

Every problem is reported as a Problem naming the file, line, field and the fix, and
all problems are reported at once so a pull request is fixed in one round.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from . import platform
from .model import (
    DeadLetterThresholds,
    ExtraGrant,
    Group,
    LagThresholds,
    LegacyPlaintext,
    Principal,
    Registry,
    Topic,
)

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: LibYAML's parser (bundled with PyYAML's wheels) where present: same events, nodes and marks as
#: the pure-Python one, ~10x faster (a 10,000-topic registry is read twice: checks, then nodes).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    field: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.message}\n    fix: {self.fix}"


class RegistryInvalid(Exception):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


Path_ = tuple[str | int, ...]


#: Bounds on what a registry file may be: a pull request is read before anything trusts it.
MAX_BYTES = 8 * 1024 * 1024  # ~100,000 topics' worth of entries
MAX_DEPTH = 12  # the deepest real field (topics[].dead_letters.warning) is 4 levels down
#: Characters a reviewer cannot see or that reorder what they see (Trojan Source, CVE-2021-42574).
_HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e"
                     "\u2060-\u2064\u2066-\u2069\ufeff]")


def _read(path: Path, file: str) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise RegistryInvalid(
            [Problem(file, 0, "(file)", "file not found", "run from the repo root or pass --registry")]
        ) from None
    except IsADirectoryError:
        raise RegistryInvalid([Problem(file, 0, "(file)", "a directory, not a registry file",
                                       f"pass the file itself: --registry {path / 'topics.yaml'}")]
                              ) from None
    except OSError as e:  # unreadable: permissions, a dangling mount, a device
        raise RegistryInvalid([Problem(file, 0, "(file)", f"cannot be read: {e.strerror or e}",
                                       "check its permissions, or pass another --registry")]) from None
    if len(raw) > MAX_BYTES:
        raise RegistryInvalid([Problem(file, 0, "(file)", f"the file is over {MAX_BYTES:,} bytes",
                                       "a registry this large is not one a reviewer can read; split "
                                       "it or remove what is generated")])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise RegistryInvalid([Problem(file, line, "(file)", f"not UTF-8 (byte {e.start})",
                                       "save the file as UTF-8")]) from None


def _yaml_problem(e: yaml.YAMLError, file: str) -> Problem:
    mark = getattr(e, "problem_mark", None)
    what = "; ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x)
    where = f" (column {mark.column + 1})" if mark else ""
    return Problem(file, mark.line + 1 if mark else 1, "(yaml)",
                   f"not valid YAML: {what or e}{where}", "fix the YAML syntax")


def _refuse_yaml_features(text: str, file: str) -> None:
    """A pass over the event stream (iterative: no recursion, no expansion) before anything is
    built: aliases (the billion-laughs bomb, cycles), anchors, explicit tags and deep nesting are
    refused with their line, so what a reviewer reads is exactly what is applied."""
    problems = [Problem(file, text.count("\n", 0, m.start()) + 1, "(file)",
                        f"contains the invisible or control character U+{ord(m.group()):04X}",
                        "remove it: every character of the registry must be visible to its reviewer")
                for m in _HIDDEN.finditer(text)][:20]
    if problems:
        raise RegistryInvalid(problems)
    depth = 0
    try:
        for ev in yaml.parse(text, Loader=_LOADER):
            line = ev.start_mark.line + 1
            if isinstance(ev, yaml.AliasEvent):
                problems.append(Problem(file, line, "(yaml)", f"alias *{ev.anchor} is not allowed",
                                        "write the value out in full: what a reviewer reads must "
                                        "be what is applied"))
            elif getattr(ev, "anchor", None):
                problems.append(Problem(file, line, "(yaml)", f"anchor &{ev.anchor} is not allowed",
                                        "remove the anchor and write each value out"))
            if getattr(ev, "tag", None) and not isinstance(ev, yaml.DocumentStartEvent):
                problems.append(Problem(file, line, "(yaml)", f"explicit tag {ev.tag} is not allowed",
                                        "remove the tag; the registry holds plain strings, numbers, "
                                        "lists and mappings"))
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    problems.append(Problem(file, line, "(yaml)",
                                            f"nested more than {MAX_DEPTH} levels deep",
                                            "flatten it: no registry field is this deep (see "
                                            "docs/registry.md)"))
                    break
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            if len(problems) >= 20:
                break
    except yaml.YAMLError as e:
        problems.append(_yaml_problem(e, file))
    if problems:
        raise RegistryInvalid(problems)


def _compose_with_lines(text: str, file: str) -> tuple[Any, dict[Path_, int]]:
    """Parse YAML keeping the 1-based line of every value, keyed by its path. Keys must be
    plain scalars and appear once; no string may hide characters from its reviewer."""
    _refuse_yaml_features(text, file)
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as e:
        raise RegistryInvalid([_yaml_problem(e, file)]) from None
    lines: dict[Path_, int] = {}
    problems: list[Problem] = []
    constructor = yaml.constructor.SafeConstructor()

    def shown(path: Path_) -> str:
        return ".".join(map(str, path)) or "(root)"

    def scalar(node: yaml.ScalarNode, path: Path_) -> Any:
        try:
            value = constructor.construct_object(node)
        except yaml.YAMLError as e:
            problems.append(Problem(file, node.start_mark.line + 1, shown(path),
                                    f"cannot be read: {getattr(e, 'problem', e)}", "quote the value"))
            return None
        if isinstance(value, str) and (m := _HIDDEN.search(value)):
            problems.append(Problem(file, node.start_mark.line + 1, shown(path),
                                    f"contains the invisible or control character "
                                    f"U+{ord(m.group()):04X}",
                                    "remove it: every character of the registry must be visible "
                                    "to its reviewer"))
        return value

    def walk(node: yaml.Node | None, path: Path_) -> Any:
        if node is None:
            return None
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            first: dict[Any, int] = {}
            for k, v in node.value:
                line = k.start_mark.line + 1
                if not isinstance(k, yaml.ScalarNode):
                    problems.append(Problem(file, line, shown(path), "a key must be a plain name, "
                                            "not a list or a mapping", "use a plain name as the key"))
                    continue
                scalar(k, (*path, k.value))  # its characters are checked like any value's
                key = k.value  # as written: `1:` or `yes:` is a name here, not a number
                if key in first:
                    problems.append(Problem(file, line, shown((*path, key)),
                                            f"duplicate key {key!r} (first on line {first[key]}); "
                                            "YAML would silently keep only the last",
                                            "keep one of the two"))
                    continue
                first[key] = line
                lines[(*path, key)] = line
                out[key] = walk(v, (*path, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [walk(v, (*path, i)) for i, v in enumerate(node.value)]
        return scalar(node, path)

    data = walk(root, ())
    if problems:
        raise RegistryInvalid(problems[:50])
    return data, lines


def _field(path: Path_, data: Any) -> str:
    """Render a path as `topics[events_plugin_ingestion].partitions` (names beat indexes)."""
    out, cur = "", data
    for part in path:
        if isinstance(part, int):
            name = cur[part].get("name") if isinstance(cur, list) and isinstance(cur[part], dict) else None
            out += f"[{name}]" if name else f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
        try:
            cur = cur[part]
        except (KeyError, IndexError, TypeError):
            cur = None
    return out or "(root)"


def parse_retention(value: str) -> int:
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", value)
    if not m:
        raise ValueError(f"bad retention {value!r}")
    return int(m.group(1)) * _UNITS_MS[m.group(2)]


def _schema() -> dict:
    return json.loads(resources.files(__package__).joinpath("topics.schema.json").read_text())


def _schema_fix(err: jsonschema.ValidationError) -> str:
    if err.validator == "additionalProperties":
        allowed = ", ".join(sorted(err.schema.get("properties", {})))
        return f"remove or rename the unknown key; allowed keys: {allowed}"
    if err.validator == "required":
        return "add the missing field (see docs/registry.md)"
    if err.validator == "pattern":
        return f"use a value matching {err.validator_value}"
    if err.validator == "enum":
        return f"use one of: {', '.join(map(str, err.validator_value))}"
    if err.validator == "type":
        return f"use a value of type {err.validator_value}"
    if err.validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        word = {"minimum": "at least", "exclusiveMinimum": "above",
                "maximum": "at most", "exclusiveMaximum": "below"}[err.validator]
        return f"use a value {word} {err.validator_value}"
    if err.validator == "minProperties":
        return "list at least one key, or remove the empty mapping"
    if err.validator == "minItems":
        return f"list at least {err.validator_value} item(s), or remove the field"
    if err.validator == "uniqueItems":
        return "list each item once"
    return "see docs/registry.md for the field's format"


def _schema_problem(e: jsonschema.ValidationError, file: str, data: Any, line_of) -> Problem:
    path = tuple(e.absolute_path)
    field = _field(path, data)
    if e.validator == "required" and isinstance(e.instance, dict):
        missing = [k for k in e.validator_value if k not in e.instance]
        return Problem(file, line_of(path), f"{field}.{missing[0]}",
                       f"missing required field {missing[0]!r}", _schema_fix(e))
    return Problem(file, line_of(path), field, e.message, _schema_fix(e))


def load_registry(path: str | Path = "topics.yaml") -> Registry:
    """Parse, schema-check and policy-check a registry file; raise RegistryInvalid."""
    from .policy import check  # policy imports model and Problem only

    path = Path(path)
    file = str(path)
    data, lines = _compose_with_lines(_read(path, file), file)

    def line_of(p: Path_) -> int:
        while p and p not in lines:
            p = p[:-1]
        return lines.get(p, 1)

    validator = jsonschema.Draft202012Validator(_schema())
    problems = [_schema_problem(e, file, data, line_of)
                for e in sorted(validator.iter_errors(data), key=lambda e: line_of(tuple(e.absolute_path)))]
    if problems:
        raise RegistryInvalid(problems)

    registry = _build(data, file)
    problems = [
        Problem(file, line_of(p), _field(p, data), msg, fix) for p, msg, fix in check(registry, data)
    ]
    if problems:
        raise RegistryInvalid(sorted(problems, key=lambda p: p.line))
    return registry


def _build(data: dict, file: str) -> Registry:
    topics = tuple(
        Topic(
            name=t["name"],
            partitions=t["partitions"],
            retention_ms=parse_retention(t["retention"]),
            key=t["key"],
            description=t.get("description", ""),
            event_types=tuple(t.get("event_types", ())),
            producers=tuple(t.get("producers", ())),
            replication_factor=t.get("replication_factor"),
            config={k: _config_str(v) for k, v in t.get("config", {}).items()},
            exceptions=dict(t.get("exceptions", {})),
            dead_letters=DeadLetterThresholds(**t.get("dead_letters", {})),
        )
        for t in data["topics"]
    )
    groups = tuple(
        Group(
            name=g["name"],
            principal=g["principal"],
            topics=tuple(g["topics"]),
            consumers=g["consumers"],
            lag=LagThresholds(**g.get("lag", {})),
            description=g.get("description", ""),
            batch_every_ms=parse_retention(g["batch"]["every"]) if "batch" in g else None,
        )
        for g in data["groups"]
    )
    grants = []
    for a in data.get("acls", []):
        kind, name, pattern = next(
            (rt, a[k], "PREFIXED" if k.endswith("_prefix") else "LITERAL")
            for k, rt in (("topic", "TOPIC"), ("topic_prefix", "TOPIC"), ("group", "GROUP"),
                          ("group_prefix", "GROUP"))
            if k in a
        )
        grants.append(ExtraGrant(a["principal"], tuple(a["operations"]), kind, name, pattern))
    return Registry(
        path=file,
        principals=tuple(Principal(p["name"], p.get("description", ""),
                                   tuple(sorted((k, float(v)) for k, v in p.get("quotas", {}).items())))
                         for p in data["principals"]),
        topics=topics,
        groups=groups,
        extra_grants=tuple(grants),
        replication_profile=data.get("replication", {}).get("profile"),
        platform=platform.PRINCIPALS,
        legacy=_legacy(data.get("legacy_plaintext")),
    )


def _legacy(block: dict | None) -> LegacyPlaintext | None:
    if block is None:
        return None
    until = block["until"]
    if not isinstance(until, date):  # YAML reads an unquoted 2027-01-31 as a date already
        try:
            until = date.fromisoformat(str(until))
        except ValueError:
            until = None  # the policy names the field and the fix
    return LegacyPlaintext(tuple(block["stands_in_for"]), until)


def _config_str(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
