"""The admin clients a reconcile talks through, every request counted.

confluent-kafka's AdminClient does nearly everything. It has no call for Kafka's partition
reassignments (ListPartitionReassignments, AlterPartitionReassignments, KIP-455) nor for
DescribeLogDirs, nor for client quotas (DescribeClientQuotas, AlterClientQuotas, KIP-546):
librdkafka knows the API keys but neither it nor the Python binding offers them (checked on
confluent-kafka 2.16.1, librdkafka 2.16.0). kafka-python 3 has the first three as public calls
and the quota requests as protocol classes, in pure Python, over the same SASL_SSL settings
(Connection.kafka_python()), on Kafka 3.7 and 4.x alike. It is opened on first use.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

from ..core.connection import Connection
from .admin_api import KafkaAdmin, KafkaPythonAdmin

TP = tuple[str, int]
MUTATING = {"create_topics", "create_partitions", "incremental_alter_configs", "create_acls",
            "delete_acls", "alter_user_scram_credentials", "delete_topics",
            "alter_partition_reassignments", "elect_leaders", "alter_client_quotas"}
USER = "user"  # the quota entity type of a principal (kafka-configs.sh --entity-type users)
TOPIC, TOPIC_SOURCE = 2, 1  # DescribeConfigs' resource type and config source of a topic's own


class CountingAdmin:
    """confluent-kafka's AdminClient (every method passes through, counted), plus the three
    reassignment-era calls it lacks. Tests and benchmarks read `calls` to prove idempotence."""

    def __init__(self, admin: KafkaAdmin, conn: Connection | None = None):
        self._admin = admin
        self._conn = conn
        self._kp: KafkaPythonAdmin | None = None
        self.calls: Counter[str] = Counter()

    @classmethod
    def connect(cls, conn: Connection, **config: Any) -> CountingAdmin:
        from confluent_kafka.admin import AdminClient

        return cls(AdminClient(conn.confluent() | {"log_level": 4} | config), conn)

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

    # ------------------------------------------------------------ kafka-python bridge

    def _reassigner(self) -> KafkaPythonAdmin:
        if self._kp is None:
            if self._conn is None:
                raise RuntimeError("partition reassignments need the admin made by "
                                   "CountingAdmin.connect(connection)")
            from kafka.admin import KafkaAdminClient

            logging.getLogger("kafka").setLevel(logging.ERROR)  # its retries are ours to report
            self._kp = KafkaAdminClient(client_id="hanzo-stream-reconciler",
                                        **self._conn.kafka_python())
        return self._kp

    def list_reassignments(self) -> dict[TP, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """Running reassignments, as the controller knows them (brokers' metadata may lag):
        partition -> (its replicas now, those being added, those being removed)."""
        self.calls["list_partition_reassignments"] += 1
        running = self._reassigner().list_partition_reassignments()
        return {(tp.topic, tp.partition): (tuple(r["replicas"]), tuple(r["adding_replicas"]),
                                           tuple(r["removing_replicas"]))
                for tp, r in running.items()}

    def alter_reassignments(self, targets: Mapping[TP, tuple[int, ...]]) -> dict[TP, str | None]:
        """Start moving each partition to its target replicas; per partition, None or the error."""
        from kafka import TopicPartition

        self.calls["alter_partition_reassignments"] += 1
        answer = self._reassigner().alter_partition_reassignments(
            {TopicPartition(t, p): list(r) for (t, p), r in targets.items()})
        out: dict[TP, str | None] = {tp: "no answer from the controller" for tp in targets}
        for tp, err in answer.items():
            out[(tp.topic, tp.partition)] = None if err is None else err.__name__
        return out

    def log_dir_sizes(self, topics: Collection[str],
                      brokers: Collection[int] | None = None) -> dict[tuple[str, int, int], int]:
        """Bytes on disk of each replica: (topic, partition, broker) -> size."""
        if not topics:
            return {}
        self.calls["describe_log_dirs"] += 1
        answer = self._reassigner().describe_log_dirs(
            topic_partitions=sorted(topics), brokers=sorted(brokers) if brokers else None)
        sizes: dict[tuple[str, int, int], int] = {}
        for broker in answer:
            for d in broker["log_dirs"]:
                for t in d["topics"]:
                    for p in t["partitions"]:
                        if not p.get("is_future_key"):
                            key = (t["name"], p["partition_index"], broker["broker"])
                            sizes[key] = max(sizes.get(key, 0), p["partition_size"])
        return sizes

    @property
    def can_reach_kafka_python(self) -> bool:
        return self._conn is not None

    def _send(self, request: Any) -> Any:
        """One protocol request to any broker (KRaft brokers forward quota changes to the
        controller). kafka-python's own mixins send this way; it has no public call yet."""
        kp = self._reassigner()

        async def send() -> Any:
            return await kp._manager.send(request)

        return kp._manager.run(send)

    def topic_configs(self, topics: Collection[str], keys: Collection[str]
                      ) -> dict[str, tuple[dict[str, str], frozenset[str]]]:
        """Only `keys` of each topic's config: topic -> (values, the keys set on the topic
        itself). confluent-kafka cannot name the keys it wants (DescribeConfigs'
        ConfigurationKeys), so every topic's ~37 entries come back as Python objects: 5 s of a
        plan at 10,000 topics (bench/reconcile.py)."""
        import kafka.errors as errors
        from kafka.protocol.admin import DescribeConfigsRequest as Req

        self.calls["describe_configs"] += 1
        answer = self._send(Req(resources=[
            Req.DescribeConfigsResource(resource_type=TOPIC, resource_name=n,
                                        configuration_keys=sorted(keys))
            for n in sorted(topics)], include_synonyms=False, include_documentation=False))
        out: dict[str, tuple[dict[str, str], frozenset[str]]] = {}
        for r in answer.results:
            if r.error_code:
                raise errors.for_code(r.error_code)(f"topic {r.resource_name}: {r.error_message or ''}")
            out[r.resource_name] = ({c.name: c.value for c in r.configs if c.value is not None},
                                    frozenset(c.name for c in r.configs if c.config_source == TOPIC_SOURCE))
        return out

    def user_quotas(self) -> dict[str, dict[str, float]]:
        """Every quota set on a named user entity alone (no client-id part, not the default):
        user -> {key: value}. Raises kafka.errors.ClusterAuthorizationFailedError without
        DESCRIBE_CONFIGS on the cluster."""
        import kafka.errors as errors
        from kafka.protocol.admin import DescribeClientQuotasRequest as Req

        self.calls["describe_client_quotas"] += 1
        answer = self._send(Req(components=[Req.ComponentData(entity_type=USER, match_type=2,
                                                              match=None)], strict=True))
        if answer.error_code:
            raise errors.for_code(answer.error_code)(answer.error_message or "")
        return {e.entity[0].entity_name: {v.key: v.value for v in e.values}
                for e in answer.entries or () if len(e.entity) == 1}

    def alter_user_quotas(self, wanted: Mapping[str, Mapping[str, float | None]],
                          validate_only: bool = False) -> dict[str, tuple[int, str] | None]:
        """Set (a value) or remove (None) quota keys of users; per user, None or the error's
        (Kafka error code, message)."""
        import kafka.errors as errors
        from kafka.protocol.admin import AlterClientQuotasRequest as Req

        self.calls["validate" if validate_only else "alter_client_quotas"] += 1
        answer = self._send(Req(validate_only=validate_only, entries=[
            Req.EntryData(entity=[Req.EntryData.EntityData(entity_type=USER, entity_name=user)],
                          ops=[Req.EntryData.OpData(key=k, value=v or 0.0, remove=v is None)
                               for k, v in sorted(ops.items())])
            for user, ops in sorted(wanted.items())]))
        out: dict[str, tuple[int, str] | None] = {u: (-1, "no answer from the broker") for u in wanted}
        for e in answer.entries:
            out[e.entity[0].entity_name] = (e.error_code, e.error_message or errors.for_code(
                e.error_code).__name__) if e.error_code else None
        return out

    def __enter__(self) -> CountingAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the kafka-python bridge (its I/O thread would otherwise outlive the caller);
        the counters stay readable and the bridge reopens if asked again."""
        if self._kp is not None:
            self._kp.close()
            self._kp = None
