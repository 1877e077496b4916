"""Sync schemas/ to a Confluent-compatible schema registry, idempotently.

Subjects (docs/schemas.md): one per event type, `<topic>-<event type>` (Confluent's
TopicRecordNameStrategy, because audit_log carries seven event types), e.g.
`llm_usage-llm.usage.completed`, `dead_letter-stream.dead_letter`. Each subject holds the
event's bundle: its schema with the envelope and shared definitions inlined, so the
registry needs no references to check compatibility (Apicurio's ccompat API tries to fetch
a reference's URL over the network when testing compatibility). Every subject is set to
BACKWARD. A subject whose latest version already equals the bundle gets no new version.

The bundle is registered with `$schema` draft-07: the files keep to a keyword subset that
means the same in draft-07 and 2020-12 (enforced by validate.py), and Apicurio 3.0's JSON
compatibility checker only understands draft-07 ("could not determine version" otherwise).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..registry import Registry
from .store import SchemaSet

REGISTRY_DIALECT = "http://json-schema.org/draft-07/schema#"
COMPATIBILITY = "BACKWARD"


@dataclass(frozen=True)
class Outcome:
    subject: str
    action: str  # created | new-version | unchanged | would-create | would-add-version | refused
    version: int | None = None
    schema_id: int | None = None
    detail: str = ""

    @property
    def changed(self) -> bool:
        return self.action in ("created", "new-version")


def subject(topic: str, event_type: str) -> str:
    return f"{topic}-{event_type}"


def registry_text(schemas: SchemaSet, event_type: str, dialect: str = REGISTRY_DIALECT) -> str:
    """The canonical text registered for an event type (sorted keys: stable across runs)."""
    bundle: dict[str, Any] = {**schemas.bundle(event_type), "$schema": dialect}
    return json.dumps(bundle, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def plan_subjects(schemas: SchemaSet, registry: Registry) -> list[tuple[str, str]]:
    """(subject, event type) for every event type the registry maps to a topic."""
    return sorted((subject(t.name, e), e) for t in registry.topics for e in t.event_types
                  if e in schemas.events)


def client(url: str, basic_auth: str | None = None):
    import warnings

    with warnings.catch_warnings():  # authlib's httpx deprecation notice, printed on import
        warnings.simplefilter("ignore")
        from confluent_kafka.schema_registry import SchemaRegistryClient

    conf: dict[str, Any] = {"url": url}
    if basic_auth:
        conf["basic.auth.user.info"] = basic_auth
    return SchemaRegistryClient(conf)


def _latest(sr, name: str):
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return sr.get_latest_version(name)
    except SchemaRegistryError as e:
        if e.http_status_code == 404:
            return None
        raise


def sync(sr, schemas: SchemaSet, registry: Registry, dry_run: bool = False,
         dialect: str = REGISTRY_DIALECT) -> list[Outcome]:
    """Register every event type's bundle; BACKWARD per subject; nothing when unchanged."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    out: list[Outcome] = []
    for name, event_type in plan_subjects(schemas, registry):
        text = registry_text(schemas, event_type, dialect)
        schema = Schema(text, "JSON")
        latest = _latest(sr, name)
        if latest is not None and _same(latest.schema.schema_str, text):
            if not dry_run and _compat(sr, name) != COMPATIBILITY:
                sr.set_compatibility(name, COMPATIBILITY)
            out.append(Outcome(name, "unchanged", latest.version, latest.schema_id))
            continue
        older = _lookup(sr, name, schema) if latest is not None else None
        if older is not None:  # equals an earlier version: registries never re-add it
            out.append(Outcome(name, "unchanged", older.version, older.schema_id,
                               f"equals v{older.version}; the latest is v{latest.version}"))
            continue
        if dry_run:
            ok = latest is None or sr.test_compatibility(name, schema)
            action = "would-create" if latest is None else "would-add-version"
            out.append(Outcome(name, action if ok else "refused", detail="" if ok else
                               "the registry reports this version incompatible (BACKWARD)"))
            continue
        if latest is None:
            sr.set_compatibility(name, COMPATIBILITY)  # before v1, so v2 is checked
        elif _compat(sr, name) != COMPATIBILITY:
            sr.set_compatibility(name, COMPATIBILITY)
        try:
            schema_id = sr.register_schema(name, schema)
        except SchemaRegistryError as e:
            out.append(Outcome(name, "refused", detail=str(e)))
            continue
        reg = sr.lookup_schema(name, schema)
        out.append(Outcome(name, "created" if latest is None else "new-version", reg.version, schema_id))
    return out


def _lookup(sr, name: str, schema):
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return sr.lookup_schema(name, schema)
    except SchemaRegistryError as e:
        if e.http_status_code == 404:
            return None
        raise


def _same(a: str, b: str) -> bool:
    try:
        return json.loads(a) == json.loads(b)
    except json.JSONDecodeError:
        return a == b


def _compat(sr, name: str) -> str | None:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return sr.get_compatibility(name)
    except SchemaRegistryError:
        return None
