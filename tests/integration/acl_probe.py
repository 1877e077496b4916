"""Ask the broker, as one principal, what it may do: every topic, group and cluster operation.

Three kinds of broker answers, in a few dozen requests per principal:

- the authorizer's own verdicts: DescribeTopics, DescribeGroups and DescribeCluster with
  include_authorized_operations (all of a resource's operations in one answer, given only to
  a principal that may DESCRIBE it; a refused DESCRIBE also refuses READ, WRITE, DELETE and
  ALTER, which imply it: source "implied");
- one request per operation that changes nothing: DescribeConfigs, IncrementalAlterConfigs,
  CreateTopics and CreatePartitions with validate_only, DescribeAcls, and DeleteAcls with a
  filter no binding matches;
- real traffic: a produce (WRITE, and InitProducerId: IDEMPOTENT_WRITE) to every topic, and a
  fetch (READ) from every topic the principal may see.

Only an authorization error counts as "denied"; any other failure (a timeout above all)
fails the probe, so a slow broker can never pass for a strict one.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from hanzo_stream.core.connection import Connection

TOPIC_OPS = ("READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "CREATE", "DELETE",
             "ALTER")
GROUP_OPS = ("READ", "DESCRIBE", "DELETE")
# CLUSTER_ACTION is left out: only brokers use it, no client request reaches it.
CLUSTER_OPS = ("CREATE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE")
CLUSTER = "kafka-cluster"
NEW_TOPIC = "acl-matrix-probe-never-created"  # CreateTopics(validate_only) on a new name
DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
          KafkaError.CLUSTER_AUTHORIZATION_FAILED}
RETRIABLE = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
             KafkaError.COORDINATOR_NOT_AVAILABLE}
TIMEOUT = 30.0
PROBE_VALUE = b'{"probe": "acl-matrix"}'

Cell = tuple[str, str, str, str]  # principal, resource type, resource name, operation


@dataclass
class Answers:
    """Every answer the broker gave, per matrix cell: [(source, allowed)]."""

    by_cell: dict[Cell, list[tuple[str, bool]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, cell: Cell, source: str, allowed: bool) -> None:
        self.by_cell[cell].append((source, allowed))

    @property
    def count(self) -> int:
        return sum(map(len, self.by_cell.values()))


@dataclass(frozen=True)
class Target:
    """What to probe: the topics (name -> live partition count), the groups, a broker id."""

    topics: dict[str, int]
    groups: tuple[str, ...]
    broker_id: str
    retention_ms: dict[str, str]  # a value validate-only AlterConfigs may propose per topic


def _allowed(fut, ok_codes: frozenset = frozenset()) -> bool:
    try:
        fut.result(timeout=TIMEOUT)
        return True
    except KafkaException as e:
        code = e.args[0].code()
        if code in DENIED:
            return False
        if code in ok_codes:  # e.g. TOPIC_ALREADY_EXISTS: authorized, then refused for cause
            return True
        raise


def _ops(ops) -> set[str]:
    return {o.name for o in ops or ()}


def probe(conn: Connection, who: str, target: Target, answers: Answers, group: str | None) -> None:
    """Every answer but produce()'s about `who` (connected as conn); group: one it may use.

    Run produce() for every principal first: the fetches expect a record on every topic.
    """
    admin = AdminClient(conn.confluent() | {"log_level": 0})
    describable = _topics(admin, who, target, answers)
    _groups(admin, who, target, answers)
    _cluster(admin, conn, who, target, answers)
    _fetch(conn, who, {n: target.topics[n] for n in describable}, answers, group)


def _topics(admin: AdminClient, who: str, target: Target, answers: Answers) -> list[str]:
    from confluent_kafka import TopicCollection

    names = sorted(target.topics)
    describable = []
    futs = admin.describe_topics(TopicCollection(names), include_authorized_operations=True,
                                 request_timeout=TIMEOUT)
    for name, fut in futs.items():
        try:
            ops = _ops(fut.result(timeout=TIMEOUT).authorized_operations)
        except KafkaException as e:
            if e.args[0].code() not in DENIED:
                raise
            answers.add((who, "TOPIC", name, "DESCRIBE"), "authorized_operations", False)
            for op in ("READ", "WRITE", "DELETE", "ALTER"):
                answers.add((who, "TOPIC", name, op), "implied", False)
            continue
        describable.append(name)
        for op in TOPIC_OPS:
            answers.add((who, "TOPIC", name, op), "authorized_operations", op in ops)

    for res, fut in admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, n) for n in names], request_timeout=TIMEOUT).items():
        answers.add((who, "TOPIC", res.name, "DESCRIBE_CONFIGS"), "describe_configs", _allowed(fut))
    alter = [ConfigResource(ResourceType.TOPIC, n, incremental_configs=[ConfigEntry(
        "retention.ms", target.retention_ms[n], incremental_operation=AlterConfigOpType.SET)])
        for n in names]
    for res, fut in admin.incremental_alter_configs(alter, validate_only=True,
                                                    request_timeout=TIMEOUT).items():
        answers.add((who, "TOPIC", res.name, "ALTER_CONFIGS"), "alter_configs(validate)", _allowed(fut))
    exists = frozenset({KafkaError.TOPIC_ALREADY_EXISTS})
    for name, fut in admin.create_topics([NewTopic(n, target.topics[n]) for n in names],
                                         validate_only=True, request_timeout=TIMEOUT).items():
        answers.add((who, "TOPIC", name, "CREATE"), "create_topics(validate)", _allowed(fut, exists))
    for name, fut in admin.create_partitions([NewPartitions(n, target.topics[n] + 1) for n in names],
                                             validate_only=True, request_timeout=TIMEOUT).items():
        answers.add((who, "TOPIC", name, "ALTER"), "create_partitions(validate)", _allowed(fut))
    return describable


def _groups(admin: AdminClient, who: str, target: Target, answers: Answers) -> None:
    pending, deadline = list(target.groups), time.monotonic() + TIMEOUT
    while pending:
        futs = admin.describe_consumer_groups(pending, include_authorized_operations=True,
                                              request_timeout=TIMEOUT)
        pending = []
        for name, fut in futs.items():
            try:
                ops = _ops(fut.result(timeout=TIMEOUT).authorized_operations)
            except KafkaException as e:
                code = e.args[0].code()
                if code in RETRIABLE and time.monotonic() < deadline:  # coordinator still loading
                    pending.append(name)
                    continue
                if code not in DENIED:
                    raise
                answers.add((who, "GROUP", name, "DESCRIBE"), "authorized_operations", False)
                for op in ("READ", "DELETE"):
                    answers.add((who, "GROUP", name, op), "implied", False)
                continue
            for op in GROUP_OPS:
                answers.add((who, "GROUP", name, op), "authorized_operations", op in ops)
        if pending:
            time.sleep(0.5)


def _cluster(admin: AdminClient, conn: Connection, who: str, target: Target,
             answers: Answers) -> None:
    def add(op: str, source: str, allowed: bool) -> None:
        answers.add((who, "CLUSTER", CLUSTER, op), source, allowed)

    desc = admin.describe_cluster(include_authorized_operations=True, request_timeout=TIMEOUT)
    ops = desc.result(timeout=TIMEOUT).authorized_operations
    if ops:  # the broker lists them only to a principal that may DESCRIBE the cluster
        # Not IDEMPOTENT_WRITE: the list holds explicit grants only, while InitProducerId also
        # admits any principal that may WRITE some topic (KIP-679); the real produce answers it.
        for op in (o for o in CLUSTER_OPS if o != "IDEMPOTENT_WRITE"):
            add(op, "authorized_operations", op in _ops(ops))
    else:
        add("DESCRIBE", "authorized_operations", False)
        add("ALTER", "implied", False)
    add("DESCRIBE", "describe_acls (kafka-python)", _may_describe_acls(conn))
    nobody = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                              f"User:acl-matrix-nobody-{uuid.uuid4().hex}", None,
                              AclOperation.ANY, AclPermissionType.ANY)
    (fut,) = admin.delete_acls([nobody], request_timeout=TIMEOUT).values()
    add("ALTER", "delete_acls(matches nothing)", _allowed(fut))
    (fut,) = admin.create_topics([NewTopic(NEW_TOPIC, 1)], validate_only=True,
                                 request_timeout=TIMEOUT).values()
    add("CREATE", "create_topics(new name, validate)", _allowed(fut))
    broker = ConfigResource(ResourceType.BROKER, target.broker_id)
    (fut,) = admin.describe_configs([broker], request_timeout=TIMEOUT).values()
    add("DESCRIBE_CONFIGS", "describe_configs(broker)", _allowed(fut))
    alter = ConfigResource(ResourceType.BROKER, target.broker_id, incremental_configs=[ConfigEntry(
        "log.cleaner.threads", "1", incremental_operation=AlterConfigOpType.SET)])
    (fut,) = admin.incremental_alter_configs([alter], validate_only=True,
                                             request_timeout=TIMEOUT).values()
    add("ALTER_CONFIGS", "alter_configs(broker, validate)", _allowed(fut))


def _may_describe_acls(conn: Connection) -> bool:
    """DescribeAcls needs DESCRIBE on the cluster. Asked with kafka-python: confluent-kafka
    (2.16) turns the broker's CLUSTER_AUTHORIZATION_FAILED into an empty list."""
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    anything = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                         permission_type=ACLPermissionType.ANY,
                         resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                                ACLResourcePatternType.ANY))
    admin = KafkaAdminClient(**conn.kafka_python(), request_timeout_ms=int(TIMEOUT * 1000))
    try:
        admin.describe_acls(anything)
        return True
    except ClusterAuthorizationFailedError:
        return False
    finally:
        admin.close()


def produce(conn: Connection, who: str, target: Target, answers: Answers) -> None:
    """One idempotent, acks=all record to every topic, as every service produces."""
    results: dict[str, KafkaError | None] = {}
    fatal: list[KafkaError] = []
    p = Producer(conn.confluent() | {
        "enable.idempotence": True, "acks": "all", "message.timeout.ms": int(TIMEOUT * 1000),
        "log_level": 0, "error_cb": lambda e: fatal.append(e) if e.fatal() else None})
    for name in sorted(target.topics):
        p.produce(name, PROBE_VALUE, key=b"acl-matrix",
                  on_delivery=lambda e, m, name=name: results.__setitem__(name, e))
    left = p.flush(TIMEOUT + 10)
    assert left == 0 and len(results) == len(target.topics), f"{who}: undelivered {left}"
    for name, err in results.items():
        if err is not None and err.code() not in DENIED:
            raise AssertionError(f"{who} producing to {name}: {err}")
        answers.add((who, "TOPIC", name, "WRITE"), "produce", err is None)
    if any(e is None for e in results.values()):
        answers.add((who, "CLUSTER", CLUSTER, "IDEMPOTENT_WRITE"), "produce (InitProducerId)", True)
    elif any(e.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED for e in fatal):
        answers.add((who, "CLUSTER", CLUSTER, "IDEMPOTENT_WRITE"), "produce (InitProducerId)", False)


def _fetch(conn: Connection, who: str, topics: dict[str, int], answers: Answers,
           group: str | None) -> None:
    """Read from the beginning of every topic the principal may see (each holds a record).

    A consumer needs a group id even when it only assigns partitions; a principal without a
    group gets refusals for it (no topic attached), which say nothing about READ on a topic.
    """
    c = Consumer(conn.confluent() | {"group.id": group or f"acl-matrix-{uuid.uuid4().hex[:8]}",
                                     "enable.auto.commit": False, "log_level": 0})
    try:
        for name, partitions in sorted(topics.items()):
            c.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(partitions)])
            verdict, deadline = None, time.monotonic() + TIMEOUT
            while verdict is None and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is None or m.topic() != name:
                    continue
                if m.error() is None:
                    verdict = True
                elif m.error().code() in DENIED:
                    verdict = False
                elif not m.error().retriable():
                    raise AssertionError(f"{who} reading {name}: {m.error()}")
            assert verdict is not None, f"{who} reading {name}: no record and no refusal in {TIMEOUT}s"
            answers.add((who, "TOPIC", name, "READ"), "fetch", verdict)
            c.unassign()
    finally:
        c.close()
