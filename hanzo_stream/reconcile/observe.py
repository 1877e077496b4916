"""Read the live cluster in a handful of cluster-wide calls.

One metadata call for every topic, one DescribeConfigs for all of them, one DescribeAcls
with a match-anything filter, one DescribeUserScramCredentials: a plan costs four round
trips whether the cluster has ten topics or ten thousand.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ConfigSource,
    ResourcePatternType,
    ResourceType,
)

from ..registry.model import Acl

TIMEOUT = 30.0
MUTATING = {"create_topics", "create_partitions", "incremental_alter_configs", "create_acls",
            "delete_acls", "alter_user_scram_credentials", "delete_topics"}


def is_internal(topic: str) -> bool:
    """Topics no reconciler may ever touch: Kafka's own (__*) and other systems' (_schemas, _*)."""
    return topic.startswith("_")


class CountingAdmin:
    """AdminClient wrapper counting requests, so tests and benchmarks can prove idempotence."""

    def __init__(self, admin: AdminClient):
        self._admin = admin
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._admin, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            kind = "validate" if kwargs.get("validate_only") else name
            self.calls[kind] += 1
            return attr(*args, **kwargs)

        return counted

    @property
    def mutations(self) -> int:
        return sum(n for k, n in self.calls.items() if k in MUTATING)


@dataclass(frozen=True)
class TopicState:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)  # effective values
    dynamic: frozenset[str] = frozenset()  # keys set on the topic itself


@dataclass(frozen=True)
class ClusterState:
    topics: dict[str, TopicState]
    acls: frozenset[Acl]
    scram_users: dict[str, frozenset[str]]  # user -> mechanisms

    def fingerprint(self) -> str:
        """A digest of everything a plan depends on; a saved plan is only valid against it."""
        doc = {
            "topics": {n: [t.partitions, t.replication_factor,
                           {k: t.configs[k] for k in sorted(t.dynamic)}]
                       for n, t in sorted(self.topics.items())},
            "acls": sorted(str(a) for a in self.acls),
            "scram": {u: sorted(m) for u, m in sorted(self.scram_users.items())},
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                           AclOperation.ANY, AclPermissionType.ANY)


def _enum(v: Any) -> str:
    return v.name if hasattr(v, "name") else str(v)


def observe(admin: AdminClient | CountingAdmin) -> ClusterState:
    md = admin.list_topics(timeout=TIMEOUT)
    names = sorted(n for n in md.topics if not is_internal(n))
    configs: dict[str, tuple[dict[str, str], frozenset[str]]] = {}
    if names:
        futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names],
                                         request_timeout=TIMEOUT)
        for res, fut in futures.items():
            entries = fut.result()
            configs[res.name] = (
                {k: e.value for k, e in entries.items() if e.value is not None},
                frozenset(k for k, e in entries.items()
                          if ConfigSource(e.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG),
            )
    topics = {}
    for n in names:
        t = md.topics[n]
        parts = t.partitions
        rf = len(next(iter(parts.values())).replicas) if parts else 0
        cfg, dyn = configs.get(n, ({}, frozenset()))
        topics[n] = TopicState(n, len(parts), rf, cfg, dyn)

    bindings = admin.describe_acls(ANY_ACL, request_timeout=TIMEOUT).result()
    acls = frozenset(
        Acl(b.principal, _enum(b.restype), b.name, _enum(b.resource_pattern_type),
            _enum(b.operation), b.host, _enum(b.permission_type))
        for b in bindings
    )
    scram = admin.describe_user_scram_credentials(request_timeout=TIMEOUT).result()
    users = {u: frozenset(_enum(i.mechanism).replace("_", "-") for i in d.scram_credential_infos)
             for u, d in scram.items()}
    return ClusterState(topics, acls, users)
