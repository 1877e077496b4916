"""What a principal may do under a set of ACLs, by the broker's own rules.

Kafka's StandardAuthorizer allows an operation when an ALLOW binding matches the principal
(or User:*), the resource (literal name, the literal "*", or a prefix) and the operation (or
ALL, or one that implies it), and no DENY binding matches. The implications are Kafka's:
READ, WRITE, DELETE and ALTER each imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS.

The ACL matrix test (tests/integration/test_acl_matrix.py) states what the broker must allow
with this, from Registry.acls(), and compares it with the broker's answers.
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import WILDCARD, Acl

IMPLIED_BY = {"DESCRIBE": {"READ", "WRITE", "DELETE", "ALTER"}, "DESCRIBE_CONFIGS": {"ALTER_CONFIGS"}}


def _matches(acl: Acl, principal: str, resource_type: str, name: str) -> bool:
    if acl.principal not in (f"User:{principal}", f"User:{WILDCARD}") or acl.host != "*":
        return False
    if acl.resource_type != resource_type:
        return False
    if acl.pattern_type == "PREFIXED":
        return name.startswith(acl.resource_name)
    return acl.resource_name in (name, WILDCARD)


def allows(acls: Iterable[Acl], principal: str, resource_type: str, name: str,
           operation: str) -> bool:
    """Whether `principal` may do `operation` on the resource, as the broker decides."""
    relevant = [a for a in acls if _matches(a, principal, resource_type, name)]
    if any(a.permission == "DENY" and a.operation in (operation, "ALL") for a in relevant):
        return False
    granting = {operation, "ALL"} | IMPLIED_BY.get(operation, set())
    return any(a.permission == "ALLOW" and a.operation in granting for a in relevant)


def may_write_somewhere(acls: Iterable[Acl], principal: str) -> bool:
    """Kafka lets an idempotent producer start (InitProducerId) with IDEMPOTENT_WRITE on the
    cluster or WRITE on any topic (KIP-679)."""
    acls = list(acls)
    return allows(acls, principal, "CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE") or any(
        a.permission == "ALLOW" and a.resource_type == "TOPIC" and a.operation in ("WRITE", "ALL")
        and _matches(a, principal, "TOPIC", a.resource_name) for a in acls)
