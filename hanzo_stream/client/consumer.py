"""The consumer factory: group ids come from topics.yaml, nothing else is accepted.

A consumer group outside the registry has no ACL, no lag alert and no owner; refusing it
at construction turns a 3 a.m. mystery (GROUP_AUTHORIZATION_FAILED, or lag nobody watches)
into an error message that says what to add to topics.yaml.
"""

from __future__ import annotations

from typing import Any

from ..core.connection import Connection
from ..registry import Group, Registry, load_registry
from .producer import registry_file

CONSUMER_DEFAULTS: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    # At-least-once: offsets are committed in the background, but only those the
    # application stored after processing (store_offsets / EventConsumer.done).
    "enable.auto.commit": True,
    "enable.auto.offset.store": False,
    # KIP-848: the broker (Kafka 4) computes assignments and hands partitions over one at
    # a time; a member joining or leaving never stops the others (no group-wide barrier).
    # The assignor is the broker's (`group.remote.assignor`), so librdkafka refuses a
    # client-side partition.assignment.strategy next to it.
    "group.protocol": "consumer",
}


class UnknownGroup(ValueError):
    """A group id (or a topic for it) that topics.yaml does not declare."""


def group_for(registry: Registry, group_id: str, topics: list[str] | None = None) -> Group:
    names = {g.name: g for g in registry.groups}
    group = names.get(group_id)
    if group is None:
        raise UnknownGroup(
            f"consumer group {group_id!r} is not in {registry.path}; known groups: "
            f"{', '.join(sorted(names))}. Add it under `groups:` (name, principal, topics, "
            "consumers) in a pull request; see docs/adding-a-topic.md")
    extra = sorted(set(topics or ()) - set(group.topics))
    if extra:
        raise UnknownGroup(f"group {group_id!r} reads {', '.join(group.topics)} in {registry.path}, "
                           f"not {', '.join(extra)}; add the topic to the group's `topics:` first")
    return group


def consumer_config(group: Group, conn: Connection, **overrides: Any) -> dict[str, Any]:
    return (conn.confluent() | CONSUMER_DEFAULTS
            | {"group.id": group.name, "client.id": group.name}
            | {k.replace("_", "."): v for k, v in overrides.items()})


def make_consumer(group_id: str, conn: Connection | None = None, *, registry: Registry | None = None,
                  topics: list[str] | None = None, subscribe: bool = True, **overrides: Any):
    """A confluent_kafka.Consumer for a registry group, subscribed to the group's topics."""
    from confluent_kafka import Consumer

    registry = registry or load_registry(registry_file())
    group = group_for(registry, group_id, topics)
    consumer = Consumer(consumer_config(group, conn or Connection.from_env(), **overrides))
    if subscribe:
        consumer.subscribe(list(topics or group.topics))
    return consumer
