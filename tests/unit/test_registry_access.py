"""Kafka's authorization rules as the ACL matrix test expects them from the registry."""

from __future__ import annotations

from hanzo_stream.registry.access import allows, may_write_somewhere
from hanzo_stream.registry.model import Acl


def acl(principal, rtype, name, op, pattern="LITERAL", permission="ALLOW"):
    return Acl(f"User:{principal}", rtype, name, pattern, op, "*", permission)


def test_the_registry_grants_what_it_declares_and_nothing_more(registry):
    acls = registry.acls()
    assert allows(acls, "llm-gateway", "TOPIC", "llm_usage", "WRITE")
    assert not allows(acls, "llm-gateway", "TOPIC", "llm_usage", "READ")
    assert not allows(acls, "llm-gateway", "TOPIC", "audit_log", "DESCRIBE")
    assert allows(acls, "billing-aggregator", "GROUP", "billing-agg", "READ")
    assert not allows(acls, "billing-aggregator", "GROUP", "billing-agg", "DELETE")
    # dead_letter: every authenticated principal, declared or not (User:*)
    assert allows(acls, "someone-else", "TOPIC", "dead_letter", "WRITE")
    assert not allows(acls, "someone-else", "TOPIC", "dead_letter", "READ")


def test_kafkas_implications_patterns_and_deny():
    acls = [acl("a", "TOPIC", "t", "READ"), acl("b", "TOPIC", "logs_", "ALTER_CONFIGS", "PREFIXED"),
            acl("c", "TOPIC", "*", "ALL"), acl("c", "TOPIC", "secret", "READ", permission="DENY")]
    assert allows(acls, "a", "TOPIC", "t", "DESCRIBE")  # READ implies DESCRIBE
    assert not allows(acls, "a", "TOPIC", "t", "DESCRIBE_CONFIGS")
    assert allows(acls, "b", "TOPIC", "logs_app", "DESCRIBE_CONFIGS")  # via ALTER_CONFIGS, prefixed
    assert not allows(acls, "b", "TOPIC", "other", "DESCRIBE_CONFIGS")
    assert allows(acls, "c", "TOPIC", "anything", "DELETE")
    assert not allows(acls, "c", "TOPIC", "secret", "READ")  # DENY wins
    assert allows(acls, "c", "TOPIC", "secret", "WRITE")
    assert not allows(acls, "a", "GROUP", "t", "READ")


def test_idempotent_producers_need_a_write_anywhere():
    assert may_write_somewhere([acl("*", "TOPIC", "dead_letter", "WRITE")], "x")
    assert not may_write_somewhere([acl("x", "TOPIC", "t", "READ")], "x")
    assert may_write_somewhere([acl("x", "CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")], "x")
