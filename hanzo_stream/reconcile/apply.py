"""Carry out a plan in a few batched admin calls, one batch per kind of change.

A failed item never stops the others: every result is collected, the caller exits 1 if
any failed, and the next run plans exactly what is still missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from .plan import Change, Plan

TIMEOUT = 60.0
SCRAM_ITERATIONS = 8192


@dataclass
class Result:
    applied: list[Change] = field(default_factory=list)
    failed: list[tuple[Change, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def _new_topic(c: Change) -> NewTopic:
    d = c.detail
    return NewTopic(c.target, d["partitions"], d["replication_factor"], config=d["configs"])


def _config_resource(c: Change) -> ConfigResource:
    return ConfigResource(ResourceType.TOPIC, c.target, incremental_configs=[
        ConfigEntry(k, v["to"], incremental_operation=AlterConfigOpType.SET)
        for k, v in c.detail["set"].items()])


def _acl_binding(d: Mapping[str, str], cls: type = AclBinding) -> Any:
    return cls(ResourceType[d["resource_type"]], d["resource_name"],
               ResourcePatternType[d["pattern_type"]], d["principal"], d["host"],
               AclOperation[d["operation"]], AclPermissionType[d["permission"]])


def _collect(result: Result, changes: Iterable[Change], futures: Mapping[Any, Any],
             key: Any) -> None:
    for c in changes:
        try:
            futures[key(c)].result()
            result.applied.append(c)
        except Exception as e:  # each item fails alone; reported, never raised
            result.failed.append((c, _message(e)))


def _message(e: Exception) -> str:
    err = e.args[0] if e.args else e
    return getattr(err, "str", lambda: str(err))() if hasattr(err, "str") else str(err)


def validate(admin: Any, plan: Plan) -> list[str]:
    """Ask the brokers to validate creates, partition growth and config changes (no effect)."""
    problems: list[str] = []
    for kind, call, build, key in (
        ("topic.create", "create_topics", _new_topic, lambda c: c.target),
        ("topic.partitions", "create_partitions",
         lambda c: NewPartitions(c.target, c.detail["to"]), lambda c: c.target),
        ("topic.config", "incremental_alter_configs", _config_resource,
         lambda c: ConfigResource(ResourceType.TOPIC, c.target)),
    ):
        changes = plan.by_kind(kind)
        if not changes:
            continue
        futures = getattr(admin, call)([build(c) for c in changes], validate_only=True,
                                       request_timeout=TIMEOUT)
        result = Result()
        _collect(result, changes, futures, key)
        problems += [f"broker rejects {c.kind} {c.describe()}: {msg}" for c, msg in result.failed]
    return problems


def execute(admin: Any, plan: Plan, passwords: Mapping[str, str]) -> Result:
    result = Result()
    if creates := plan.by_kind("topic.create"):
        futures = admin.create_topics([_new_topic(c) for c in creates], request_timeout=TIMEOUT)
        _collect(result, creates, futures, lambda c: c.target)
    if grows := plan.by_kind("topic.partitions"):
        futures = admin.create_partitions([NewPartitions(c.target, c.detail["to"]) for c in grows],
                                          request_timeout=TIMEOUT)
        _collect(result, grows, futures, lambda c: c.target)
    if alters := plan.by_kind("topic.config"):
        futures = admin.incremental_alter_configs([_config_resource(c) for c in alters],
                                                  request_timeout=TIMEOUT)
        _collect(result, alters, futures, lambda c: ConfigResource(ResourceType.TOPIC, c.target))
    if adds := plan.by_kind("acl.create"):
        bindings = [_acl_binding(c.detail) for c in adds]
        futures = admin.create_acls(bindings, request_timeout=TIMEOUT)
        by_id = dict(zip((id(c) for c in adds), bindings, strict=True))
        _collect(result, adds, futures, lambda c: by_id[id(c)])
    if removes := plan.by_kind("acl.delete"):
        filters = [_acl_binding(c.detail, AclBindingFilter) for c in removes]
        futures = admin.delete_acls(filters, request_timeout=TIMEOUT)
        by_id = dict(zip((id(c) for c in removes), filters, strict=True))
        _collect(result, removes, futures, lambda c: by_id[id(c)])
    users = plan.by_kind("scram.create") + plan.by_kind("scram.rotate")
    ready = [c for c in users if c.target in passwords]
    for c in users:
        if c.target not in passwords:
            env = "HANZO_STREAM_PASSWORD_" + c.target.upper().replace("-", "_")
            result.failed.append((c, f"no password for {c.target}: set {env} or pass "
                                     "--secrets-file"))
    if ready:
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
        futures = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(c.target, info, passwords[c.target].encode())
             for c in ready], request_timeout=TIMEOUT)
        _collect(result, ready, futures, lambda c: c.target)
    if deletes := plan.by_kind("topic.delete"):
        futures = admin.delete_topics([c.target for c in deletes], request_timeout=TIMEOUT)
        _collect(result, deletes, futures, lambda c: c.target)
    return result
