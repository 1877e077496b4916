"""Load schemas/: the envelope, shared definitions and one schema per event type.

Layout (docs/schemas.md):
    schemas/hanzo.stream.v1.json          the envelope
    schemas/defs/<name>.json              definitions shared by several event types
    schemas/events/<event type>.json      one per event type in topics.yaml
    schemas/examples/<event type>/{valid,invalid}/*.json

Every schema names itself with an absolute `$id` under BASE_ID and refers to others by
that `$id`, so the same files resolve the same way in the validator, the compatibility
gate and the schema registry.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from referencing import Registry as RefRegistry
from referencing import Resource
from referencing.jsonschema import DRAFT202012

BASE_ID = "https://schemas.hanzo.ai/stream/"
ENVELOPE = "hanzo.stream.v1"
ENVELOPE_ID = f"{BASE_ID}{ENVELOPE}.json"
DEAD_LETTER_TYPE = "stream.dead_letter"
EXAMPLES_DIR = "examples"


class SchemaFileError(ValueError):
    """A schema file that is not JSON or not an object; the message names the file."""


@dataclass(frozen=True)
class SchemaSet:
    """Every schema file under one root, keyed by its path relative to the root."""

    root: Path
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    @cached_property
    def by_id(self) -> dict[str, dict[str, Any]]:
        return {s["$id"]: s for s in self.files.values() if isinstance(s.get("$id"), str)}

    @cached_property
    def events(self) -> dict[str, dict[str, Any]]:
        """Event type -> its schema (file schemas/events/<type>.json)."""
        return {Path(p).stem: s for p, s in self.files.items() if p.startswith("events/")}

    @cached_property
    def refs(self) -> RefRegistry:
        """A referencing registry holding every schema, for jsonschema validators."""
        return RefRegistry().with_resources(
            (i, Resource.from_contents(s, default_specification=DRAFT202012))
            for i, s in self.by_id.items())

    def path_of(self, event_type: str) -> Path:
        return self.root / "events" / f"{event_type}.json"

    def bundle(self, event_type: str) -> dict[str, Any]:
        """The event's schema with every `$ref` to another file inlined: self-contained.

        Registries differ in how (and whether) they resolve references offline; a bundle
        needs none, and its compatibility check sees the whole structure.
        """
        return self.inline(self.events[event_type])

    def inline(self, schema: dict[str, Any]) -> dict[str, Any]:
        def walk(node: Any, seen: tuple[str, ...]) -> Any:
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str) and ref in self.by_id:
                    if ref in seen:
                        raise SchemaFileError(f"circular $ref through {ref}")
                    target = {k: v for k, v in self.by_id[ref].items()
                              if k not in ("$schema", "$id")}
                    rest = {k: v for k, v in node.items() if k != "$ref"}
                    return walk({**copy.deepcopy(target), **rest}, (*seen, ref))
                return {k: walk(v, seen) for k, v in node.items()}
            if isinstance(node, list):
                return [walk(v, seen) for v in node]
            return node

        return walk(schema, ())


MAX_DEPTH = 64  # the deepest shipped schema nests ~8 levels; every walker below recurses
_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")


def _parse(text: str, rel: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SchemaFileError(f"{rel}: not valid JSON: {e}") from None
    except RecursionError:
        raise SchemaFileError(f"{rel}: nests deeper than Python's JSON reader allows; "
                              f"a schema nests at most {MAX_DEPTH} levels") from None
    if not isinstance(data, dict):
        raise SchemaFileError(f"{rel}: a schema must be a JSON object")
    return data


def read_file(path: Path, rel: str) -> dict[str, Any]:
    try:
        return _parse(path.read_text(encoding="utf-8"), rel)
    except UnicodeDecodeError as e:
        raise SchemaFileError(f"{rel}: not UTF-8: {e}") from None


def _walk_refs(data: Any, rel: str) -> Iterator[tuple[str, str]]:
    """(JSON pointer, reference) of every reference in a schema, walked without recursion;
    too deep a schema is refused here, before anything recursive reads it."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        node, at, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaFileError(f"{rel}: {at or '/'} nests more than {MAX_DEPTH} levels deep; "
                                  "flatten it (a shared part belongs under defs/)")
        if isinstance(node, dict):
            for k, v in node.items():
                if k in _REF_KEYS and isinstance(v, str):
                    yield f"{at}/{k}", v
                stack.append((v, f"{at}/{k}", depth + 1))
        elif isinstance(node, list):
            stack.extend((v, f"{at}/{i}", depth + 1) for i, v in enumerate(node))


def check_references(files: dict[str, dict[str, Any]]) -> None:
    """Every reference stays inside the schema set: a fragment of the same file, or another
    file by its `$id`. Nothing is ever fetched or read from elsewhere (an `http:` or `file:`
    reference would make every validator a network or file client), and no chain of files
    refers back to itself (a bundle inlines each reference)."""
    ids = {s["$id"]: rel for rel, s in files.items() if isinstance(s.get("$id"), str)}
    problems: list[str] = []
    edges: dict[str, set[str]] = {}
    for rel, data in files.items():
        for at, ref in _walk_refs(data, rel):
            if ref.startswith("#"):
                continue
            if ref not in ids:
                problems.append(f"{rel}: {at} {ref!r} is not a schema of this set; a reference is "
                                f"a fragment of its own file (#/...) or another file's whole $id "
                                f"({BASE_ID}...), and nothing is fetched: add the schema under "
                                "schemas/")
            else:
                edges.setdefault(rel, set()).add(ids[ref])
    state: dict[str, int] = {}  # 1: on the current path, 2: done (a linear depth-first search)
    for start in sorted(edges):
        if state.get(start):
            continue
        path, todo = [start], [iter(sorted(edges[start]))]
        state[start] = 1
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                todo.pop()
            elif state.get(nxt) == 1:
                cycle = [*path[path.index(nxt):], nxt]
                problems.append(f"{nxt}: $ref cycle {' -> '.join(cycle)}; a schema cannot "
                                "include itself (each reference is inlined): break the cycle")
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                todo.append(iter(sorted(edges.get(nxt, ()))))
    if problems:
        raise SchemaFileError("\n".join(problems))


def schema_paths(root: Path) -> list[str]:
    """Relative paths of the schema files (examples excluded), sorted."""
    if not root.is_dir():
        return []
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json")
                  if p.relative_to(root).parts[0] != EXAMPLES_DIR)


def load(root: str | Path = "schemas") -> SchemaSet:
    root = Path(root)
    files = {rel: read_file(root / rel, rel) for rel in schema_paths(root)}
    check_references(files)
    return SchemaSet(root, files)


def load_schemas(default: Path, env: dict[str, str] | None = None) -> SchemaSet:
    """schemas/ for a client or a job: HANZO_STREAM_SCHEMAS wins, else `default`."""
    import os

    env = os.environ if env is None else env
    return load(env.get("HANZO_STREAM_SCHEMAS") or default)


def from_texts(root: Path, texts: dict[str, str]) -> SchemaSet:
    """A SchemaSet from file contents (e.g. read with `git show`); bad files raise."""
    files = {rel: _parse(text, rel) for rel, text in texts.items()}
    check_references(files)
    return SchemaSet(root, files)
