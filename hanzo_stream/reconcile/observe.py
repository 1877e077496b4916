"""Read the live cluster in a handful of cluster-wide calls.

One metadata call for every topic, one DescribeConfigs for all of them (of the configs a plan
reads, when it names them), one DescribeAcls
with a match-anything filter, one DescribeUserScramCredentials, one DescribeClientQuotas for
every user, one DescribeCluster (the brokers' racks): a plan costs six round trips whether the
cluster has ten topics or ten thousand.
Only when a partition has replicas out of sync, or a topic carries the reconciler's throttle
(the marks of a running move), is ListPartitionReassignments asked too, and only for the
topics a plan would move are sizes read (observe_moves).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ConfigResource,
    ConfigSource,
    ResourcePatternType,
    ResourceType,
)

from ..registry.model import Acl
from .admin import CountingAdmin
from .admin_api import Admin, KafkaAdmin
from .replication import TOPIC_THROTTLES

TIMEOUT = 30.0


#: Kafka's own topics that a registry replication profile raises (and nothing else touches):
#: on a cluster grown from one broker they were created with RF 1, and a group coordinator on
#: one broker takes every consumer group's committed position down with it.
KAFKA_OWN_REPLICATED = ("__consumer_offsets", "__transaction_state")


def is_internal(topic: str) -> bool:
    """Topics no reconciler may ever touch: Kafka's own (__*) and other systems' (_*)."""
    return topic.startswith("_")


@dataclass(frozen=True)
class TopicState:
    name: str
    partitions: int
    replication_factor: int  # settled: the fewest replicas a partition holds, new ones not counted
    configs: dict[str, str] = field(default_factory=dict)  # effective values
    dynamic: frozenset[str] = frozenset()  # keys set on the topic itself
    replicas: tuple[tuple[int, ...], ...] = ()  # per partition, preferred leader first
    isr: tuple[tuple[int, ...], ...] = ()
    moving: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    #        partition -> (replicas being added, being removed) of a running reassignment
    sizes: dict[int, int] = field(default_factory=dict)  # partition -> bytes (observe_sizes)

    def settled(self, p: int) -> tuple[int, ...]:
        """The replicas partition p holds, not counting those a running move is adding."""
        adding = self.moving.get(p, ((), ()))[0]
        return tuple(b for b in self.replicas[p] if b not in adding)

    def target(self, p: int) -> tuple[int, ...]:
        """The replicas partition p will hold once a running move ends (now, if none runs)."""
        removing = self.moving.get(p, ((), ()))[1]
        return tuple(b for b in self.replicas[p] if b not in removing)


@dataclass(frozen=True)
class ClusterState:
    topics: dict[str, TopicState]
    acls: frozenset[Acl]
    scram_users: dict[str, frozenset[str]]  # user -> mechanisms
    brokers: tuple[int, ...] = ()
    # user -> {quota key: value}; None: not readable (no DESCRIBE_CONFIGS on the cluster, or an
    # admin without the kafka-python bridge), and then a registry's quotas cannot be planned
    quotas: dict[str, dict[str, float]] | None = field(default_factory=dict)
    racks: dict[int, str] = field(default_factory=dict)  # broker -> broker.rack, where set

    def fingerprint(self) -> str:
        """A digest of everything a plan depends on; a saved plan is only valid against it.
        The replication throttle is left out: it comes and goes with a move the plan resumes."""
        doc = {
            "topics": {n: [t.partitions, t.replication_factor,
                           {k: t.configs[k] for k in sorted(t.dynamic - set(TOPIC_THROTTLES))}]
                       for n, t in sorted(self.topics.items())},
            "acls": sorted(str(a) for a in self.acls),
            "scram": {u: sorted(m) for u, m in sorted(self.scram_users.items())},
            "brokers": sorted(self.brokers),
        }
        if self.quotas:  # absent when none are set, so a cluster without quotas keeps its digest
            doc["quotas"] = {u: dict(sorted(q.items())) for u, q in sorted(self.quotas.items())}
        if self.racks:  # where new replicas go depends on them
            doc["racks"] = {str(b): r for b, r in sorted(self.racks.items())}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    @property
    def size(self) -> int:
        """How many brokers the cluster has: the live ones and every broker a replica is
        assigned to. A broker that is restarting (a roll) is not live for a moment, but it
        still holds its replicas; counting only live brokers made the `cluster` profile
        shrink mid-roll (the reconciler Job on Kubernetes refused its plan, seen there)."""
        assigned = {b for t in self.topics.values() for r in t.replicas for b in r}
        return len(set(self.brokers) | assigned)


ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                           AclOperation.ANY, AclPermissionType.ANY)


def _enum(v: Any) -> str:
    return v._name_ if isinstance(v, Enum) else str(v)  # _name_: .name is a slow descriptor


# confluent-kafka names Kafka's CLUSTER resource type BROKER (same wire value, 4); the
# registry speaks Kafka's vocabulary (kafka-acls.sh, the broker's authorizer log).
_CLIENT_TYPE = {"CLUSTER": ResourceType.BROKER}


def client_resource_type(kafka_name: str) -> ResourceType:
    return _CLIENT_TYPE.get(kafka_name) or ResourceType[kafka_name]


def kafka_resource_type(t: Any) -> str:
    return "CLUSTER" if t == ResourceType.BROKER else _enum(t)


def observe(admin: KafkaAdmin, config_keys: Collection[str] | None = None) -> ClusterState:
    """The cluster as a plan reads it; config_keys: only these topic configs (a plan's
    watched_configs), every key when None."""
    md = admin.list_topics(timeout=TIMEOUT)
    names = sorted(n for n in md.topics if not is_internal(n) or n in KAFKA_OWN_REPLICATED)
    # Asked at once, answered while the configs are read (10,000 topics: ~1 s less).
    acl_answer = admin.describe_acls(ANY_ACL, request_timeout=TIMEOUT)
    scram_answer = admin.describe_user_scram_credentials(request_timeout=TIMEOUT)
    cluster_answer = admin.describe_cluster(request_timeout=TIMEOUT)
    configs = _topic_configs(admin, names, config_keys) if names else {}
    parts = {n: [md.topics[n].partitions[p] for p in sorted(md.topics[n].partitions)] for n in names}
    topics = {}
    for n in names:
        cfg, dyn = configs.get(n, ({}, frozenset()))
        topics[n] = _settle(TopicState(n, len(parts[n]), 0, cfg, dyn,
                                       replicas=tuple(tuple(p.replicas) for p in parts[n]),
                                       isr=tuple(tuple(p.isrs) for p in parts[n])))
    # The marks of a running move: replicas out of sync, or our throttle on a topic.
    if any(len(i) < len(r) for t in topics.values() for r, i in zip(t.replicas, t.isr, strict=True)) or \
            any(set(TOPIC_THROTTLES) & t.dynamic for t in topics.values()):
        topics = with_moves(topics, _counting(admin).list_reassignments())

    bindings = acl_answer.result()
    acls = frozenset(
        Acl(b.principal, kafka_resource_type(b.restype), b.name, _enum(b.resource_pattern_type),
            _enum(b.operation), b.host, _enum(b.permission_type))
        for b in bindings
    )
    scram = scram_answer.result()
    users = {u: frozenset(_enum(i.mechanism).replace("_", "-") for i in d.scram_credential_infos)
             for u, d in scram.items()}
    nodes = cluster_answer.result().nodes
    racks = {n.id: n.rack for n in nodes if n.rack}
    return ClusterState(topics, acls, users, tuple(sorted(md.brokers)), _quotas(admin), racks)


def _topic_configs(admin: KafkaAdmin, names: list[str], keys: Collection[str] | None
                   ) -> dict[str, tuple[dict[str, str], frozenset[str]]]:
    """topic -> (effective values, keys set on the topic itself). Named keys go through the
    kafka-python bridge, which can ask for them alone (at 10,000 topics 1 s instead of 6)."""
    if keys is not None and isinstance(admin, CountingAdmin) and admin.can_reach_kafka_python:
        return admin.topic_configs(names, keys)
    out = {}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names],
                                     request_timeout=TIMEOUT)
    for res, fut in futures.items():
        entries = {k: e for k, e in fut.result().items() if keys is None or k in keys}
        out[res.name] = (
            {k: e.value for k, e in entries.items() if e.value is not None},
            frozenset(k for k, e in entries.items()
                      if ConfigSource(e.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG),
        )
    return out


def _quotas(admin: KafkaAdmin) -> dict[str, dict[str, float]] | None:
    import kafka.errors

    counting = _counting(admin)
    if not counting.can_reach_kafka_python:
        return None
    try:
        return counting.user_quotas()
    except kafka.errors.ClusterAuthorizationFailedError:
        return None


def _counting(admin: KafkaAdmin) -> CountingAdmin:
    return admin if isinstance(admin, CountingAdmin) else CountingAdmin(admin)


def _settle(t: TopicState) -> TopicState:
    return replace(t, replication_factor=min((len(t.settled(p)) for p in range(t.partitions)),
                                             default=0))


def with_moves(topics: dict[str, TopicState],
               running: dict[tuple[str, int], tuple[tuple[int, ...], ...]]) -> dict[str, TopicState]:
    """Topics with the controller's running reassignments: its replica lists win over the
    brokers' metadata, which may not show a move that just started."""
    out = dict(topics)
    for (n, p), (replicas, adding, removing) in sorted(running.items()):
        if n in out and p < out[n].partitions:
            t = out[n]
            reps = t.replicas[:p] + (replicas,) + t.replicas[p + 1:]
            out[n] = replace(t, replicas=reps, moving=t.moving | {p: (adding, removing)})
    moved = {n for n, _ in running}
    return {n: _settle(t) if n in moved else t for n, t in out.items()}


def observe_moves(admin: Admin, state: ClusterState, topics: set[str]) -> ClusterState:
    """What a plan that moves `topics` needs beyond observe(): their partition sizes (largest
    replica, bytes) and, straight from the controller, the reassignments already running."""
    out = with_moves(state.topics, admin.list_reassignments())
    sizes = admin.log_dir_sizes(topics)
    for n in topics & set(out):
        per_p: dict[int, int] = {}
        for (t, p, _), size in sizes.items():
            if t == n:
                per_p[p] = max(per_p.get(p, 0), size)
        out[n] = replace(out[n], sizes=per_p)
    return replace(state, topics=out)
