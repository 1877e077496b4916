"""What the reconciler asks of an admin client, as Protocols: the surface to keep when
confluent-kafka or kafka-python changes, and what a test double must offer.

- KafkaAdmin: the calls of confluent-kafka's AdminClient that observe and apply make;
- Admin: KafkaAdmin plus the calls CountingAdmin adds over kafka-python (reassignments, log
  dir sizes, named topic configs, client quotas): what plan and apply take;
- KafkaPythonAdmin: what CountingAdmin uses of kafka-python's KafkaAdminClient.

tests/unit/test_admin_api.py checks both libraries still have every method named here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from concurrent.futures import Future
from typing import Any, Protocol

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    DescribeClusterResult,
    NewPartitions,
    NewTopic,
    UserScramCredentialAlteration,
    UserScramCredentialsDescription,
)

TP = tuple[str, int]
Reassignments = dict[TP, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]


class KafkaAdmin(Protocol):
    """confluent-kafka's AdminClient, as far as the reconciler uses it (each call answers with
    futures, one per item where the request has items)."""

    def list_topics(self, *, timeout: float) -> ClusterMetadata: ...

    def describe_cluster(self, *, request_timeout: float) -> Future[DescribeClusterResult]: ...

    def describe_configs(self, resources: list[ConfigResource], *, request_timeout: float
                         ) -> dict[ConfigResource, Future[dict[str, ConfigEntry]]]: ...

    def describe_acls(self, acl_binding_filter: AclBindingFilter, *, request_timeout: float
                      ) -> Future[list[AclBinding]]: ...

    def describe_user_scram_credentials(self, *, request_timeout: float
                                        ) -> Future[dict[str, UserScramCredentialsDescription]]: ...

    def create_topics(self, new_topics: list[NewTopic], *, validate_only: bool = False,
                      request_timeout: float) -> dict[str, Future[None]]: ...

    def create_partitions(self, new_partitions: list[NewPartitions], *, validate_only: bool = False,
                          request_timeout: float) -> dict[str, Future[None]]: ...

    def incremental_alter_configs(self, resources: list[ConfigResource], *, validate_only: bool = False,
                                  request_timeout: float) -> dict[ConfigResource, Future[None]]: ...

    def delete_topics(self, topics: list[str], *, request_timeout: float) -> dict[str, Future[None]]: ...

    def create_acls(self, acls: list[AclBinding], *, request_timeout: float
                    ) -> dict[AclBinding, Future[None]]: ...

    def delete_acls(self, acl_binding_filters: list[AclBindingFilter], *, request_timeout: float
                    ) -> dict[AclBindingFilter, Future[list[AclBinding]]]: ...

    def alter_user_scram_credentials(self, alterations: list[UserScramCredentialAlteration], *,
                                     request_timeout: float) -> dict[str, Future[None]]: ...

    def elect_leaders(self, election_type: ElectionType, partitions: list[TopicPartition]
                      ) -> Future[dict[TopicPartition, Any]]: ...


class Admin(KafkaAdmin, Protocol):
    """KafkaAdmin plus what confluent-kafka lacks, as CountingAdmin offers it (admin.py)."""

    @property
    def can_reach_kafka_python(self) -> bool: ...

    def list_reassignments(self) -> Reassignments: ...

    def alter_reassignments(self, targets: Mapping[TP, tuple[int, ...]]) -> dict[TP, str | None]: ...

    def log_dir_sizes(self, topics: Collection[str], brokers: Collection[int] | None = None
                      ) -> dict[tuple[str, int, int], int]: ...

    def topic_configs(self, topics: Collection[str], keys: Collection[str]
                      ) -> dict[str, tuple[dict[str, str], frozenset[str]]]: ...

    def user_quotas(self) -> dict[str, dict[str, float]]: ...

    def alter_user_quotas(self, wanted: Mapping[str, Mapping[str, float | None]],
                          validate_only: bool = False) -> dict[str, tuple[int, str] | None]: ...


class KafkaPythonAdmin(Protocol):
    """kafka-python's KafkaAdminClient, as CountingAdmin uses it. `_manager` is its private
    connection manager: the quota and named-config requests have no public call yet."""

    _manager: Any

    def list_partition_reassignments(self) -> dict[Any, dict[str, list[int]]]: ...

    def alter_partition_reassignments(self, reassignments: dict[Any, list[int]]
                                      ) -> dict[Any, type[Exception] | None]: ...

    def describe_log_dirs(self, topic_partitions: list[str] | None = None,
                          brokers: list[int] | None = None) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...
