"""The platform's own principals: least privilege for the parts that are not services.

The lag exporter, the schema registry, the pull-request planner and the broker roller each log
in as a principal of their own, never as `admin`, so a leaked exporter password or a hostile
pull request reads metadata and nothing else; `admin` stays with the reconciler Job. They are
declared here, not in topics.yaml: a service team's pull request must not be able to widen
them, and policy refuses their names there. The loader adds them to every registry, so their
passwords, SCRAM credentials and ACLs come from the same reconciler path as any service's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Acl

LAG_EXPORTER = "lag-exporter"
SCHEMA_REGISTRY = "schema-registry"
REGISTRY_PLANNER = "registry-planner"
ROLLER = "broker-roller"
SCHEMAS_TOPIC = "_schemas"  # cp-schema-registry's kafkastore.topic
SCHEMA_REGISTRY_GROUP = "schema-registry"  # its schema.registry.group.id (leader election)
CLUSTER = "kafka-cluster"  # Kafka's one CLUSTER resource name
EVERY = "*"  # a LITERAL resource named * matches every topic or group


@dataclass(frozen=True)
class PlatformPrincipal:
    name: str
    description: str
    grants: tuple[tuple[str, str, str], ...]  # (resource type, resource name, operation)

    @property
    def kafka_principal(self) -> str:
        return f"User:{self.name}"

    def acls(self) -> set[Acl]:
        return {Acl(self.kafka_principal, kind, name, "LITERAL", op)
                for kind, name, op in self.grants}


PRINCIPALS = (
    PlatformPrincipal(
        LAG_EXPORTER,
        "consumer-lag exporter: lists groups, reads their committed offsets and the topics' ends",
        (("TOPIC", EVERY, "DESCRIBE"), ("GROUP", EVERY, "DESCRIBE"))),
    PlatformPrincipal(
        SCHEMA_REGISTRY,
        "schema registry: its own topic and leader-election group, nothing else",
        tuple(("TOPIC", SCHEMAS_TOPIC, op)
              for op in ("CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ", "WRITE"))
        + (("GROUP", SCHEMA_REGISTRY_GROUP, "READ"), ("GROUP", SCHEMA_REGISTRY_GROUP, "DESCRIBE"))),
    PlatformPrincipal(
        REGISTRY_PLANNER,
        "pull-request plan: reads topics, their configs, ACLs, SCRAM users and client quotas; "
        "changes nothing",
        (("TOPIC", EVERY, "DESCRIBE"), ("TOPIC", EVERY, "DESCRIBE_CONFIGS"),
         ("CLUSTER", CLUSTER, "DESCRIBE"),  # ACLs, SCRAM users
         ("CLUSTER", CLUSTER, "DESCRIBE_CONFIGS"))),  # client quotas (and broker configs)
    PlatformPrincipal(
        ROLLER,
        "broker roll Job (hanzo_stream/pods/roller.py): asks the quorum who leads, so the active "
        "controller goes last; changes nothing in Kafka",
        (("CLUSTER", CLUSTER, "DESCRIBE"),)),  # DescribeQuorum
)
NAMES = frozenset(p.name for p in PRINCIPALS)
