"""The typed registry: what topics.yaml declares, after parsing and policy checks.

Everything else (reconciler, broker ACLs, alert thresholds, Spark job specs, Pulumi
secrets) reads these dataclasses, never the YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .platform import PlatformPrincipal

WILDCARD = "*"
ADMIN = "admin"  # the platform's super user (broker_config, infra/credentials.py): never a service

DEFAULT_LAG_WARNING = 100_000
DEFAULT_LAG_CRITICAL = 1_000_000
# Dead letters of one (source topic, stage, error class) within the alert window
# (hanzo_stream/monitoring/alerts.py DEAD_LETTER_WINDOW): any one warns, a flood pages.
DEFAULT_DEAD_LETTERS_WARNING = 1
DEFAULT_DEAD_LETTERS_CRITICAL = 100


#: Kafka's client quota keys (kafka-configs.sh --entity-type users), in its own words. Byte
#: rates are per broker; request_percentage is of one I/O and network thread per broker.
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")


@dataclass(frozen=True)
class Principal:
    name: str
    description: str = ""
    quotas: tuple[tuple[str, float], ...] = ()  # (QUOTA_KEYS key, value), sorted by key

    @property
    def kafka_principal(self) -> str:
        return f"User:{self.name}"


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    retention_ms: int
    key: str
    description: str = ""
    event_types: tuple[str, ...] = ()
    producers: tuple[str, ...] = ()
    replication_factor: int | None = None  # None: the registry's replication profile, if any
    config: dict[str, str] = field(default_factory=dict)  # extra managed topic configs
    exceptions: dict[str, str] = field(default_factory=dict)
    dead_letters: DeadLetterThresholds = field(default_factory=lambda: DeadLetterThresholds())

    def managed_configs(self) -> dict[str, str]:
        """The topic configs the reconciler owns; every other key is left alone."""
        return {"cleanup.policy": "delete", "retention.ms": str(self.retention_ms), **self.config}


@dataclass(frozen=True)
class DeadLetterThresholds:
    """Alert when this many of a topic's events were dead-lettered with one stage and class."""

    warning: int = DEFAULT_DEAD_LETTERS_WARNING
    critical: int = DEFAULT_DEAD_LETTERS_CRITICAL


#: A batch reader is overdue when no run committed for this many times its `every`.
BATCH_OVERDUE = 1.25


@dataclass(frozen=True)
class LagThresholds:
    warning: int = DEFAULT_LAG_WARNING
    critical: int = DEFAULT_LAG_CRITICAL


@dataclass(frozen=True)
class Group:
    name: str
    principal: str
    topics: tuple[str, ...]
    consumers: int
    lag: LagThresholds = LagThresholds()
    description: str = ""
    # A reader that runs on a schedule (topics.yaml `batch.every`): its lag grows between runs
    # by design, so it is watched for a missed run instead of lag thresholds and stalls.
    batch_every_ms: int | None = None

    @property
    def batch_overdue_ms(self) -> int:
        """How long without a committed run before a batch reader counts as overdue."""
        assert self.batch_every_ms is not None
        return int(self.batch_every_ms * BATCH_OVERDUE)


@dataclass(frozen=True, order=True)
class Acl:
    """One ALLOW binding, in Kafka's own vocabulary (upper-case enums)."""

    principal: str  # "User:name" or "User:*"
    resource_type: str  # TOPIC | GROUP | CLUSTER
    resource_name: str
    pattern_type: str  # LITERAL | PREFIXED
    operation: str  # READ | WRITE | DESCRIBE | ...
    host: str = "*"
    permission: str = "ALLOW"

    def __str__(self) -> str:
        pattern = "" if self.pattern_type == "LITERAL" else f" ({self.pattern_type.lower()})"
        return (
            f"{self.principal} {self.permission} {self.operation} on "
            f"{self.resource_type.lower()} {self.resource_name}{pattern}"
        )


@dataclass(frozen=True)
class ExtraGrant:
    """An explicit `acls:` entry, for grants that producers/groups do not imply."""

    principal: str
    operations: tuple[str, ...]
    resource_type: str
    resource_name: str
    pattern_type: str = "LITERAL"


@dataclass(frozen=True)
class LegacyPlaintext:
    """`legacy_plaintext:`: after a takeover, anonymous PLAINTEXT clients (User:ANONYMOUS on the
    LEGACY listener; SASL listeners never see that principal) may do what `stands_in_for` may,
    until `until` (docs/takeover.md)."""

    stands_in_for: tuple[str, ...]
    until: date | None  # None: not a date (the policy says so)


ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True)
class Registry:
    path: str
    principals: tuple[Principal, ...]
    topics: tuple[Topic, ...]
    groups: tuple[Group, ...]
    extra_grants: tuple[ExtraGrant, ...] = ()
    # `replication.profile`: "cluster" (by broker count), a name in broker_config.PROFILES,
    # or None (replication factors of topics without their own are not managed).
    replication_profile: str | None = None
    # The platform's own principals (registry/platform.py): the loader adds them to every
    # registry; they get passwords, SCRAM credentials and ACLs like declared ones.
    platform: tuple[PlatformPrincipal, ...] = ()
    legacy: LegacyPlaintext | None = None

    def topic(self, name: str) -> Topic:
        return next(t for t in self.topics if t.name == name)

    def group(self, name: str) -> Group:
        return next(g for g in self.groups if g.name == name)

    def principal_names(self) -> set[str]:
        """Every principal with a password: the declared ones and the platform's."""
        return self.declared_names() | {p.name for p in self.platform}

    def declared_names(self) -> set[str]:
        """The principals topics.yaml declares: the only ones it may refer to."""
        return {p.name for p in self.principals}

    def topic_for_event_type(self, event_type: str) -> Topic:
        return next(t for t in self.topics if event_type in t.event_types)

    def consumers_of(self, topic: str) -> int:
        """Expected consumers of a topic: the largest group reading it."""
        return max((g.consumers for g in self.groups if topic in g.topics), default=0)

    def acls(self) -> frozenset[Acl]:
        """Every ACL the registry implies: least privilege, derived, never hand-listed."""
        out: set[Acl] = set()
        for t in self.topics:
            for p in t.producers:
                who = f"User:{p}"
                out.add(Acl(who, "TOPIC", t.name, "LITERAL", "WRITE"))
                out.add(Acl(who, "TOPIC", t.name, "LITERAL", "DESCRIBE"))
        for g in self.groups:
            who = f"User:{g.principal}"
            out.add(Acl(who, "GROUP", g.name, "LITERAL", "READ"))
            for t in g.topics:
                out.add(Acl(who, "TOPIC", t, "LITERAL", "READ"))
                out.add(Acl(who, "TOPIC", t, "LITERAL", "DESCRIBE"))
        for e in self.extra_grants:
            for op in e.operations:
                out.add(
                    Acl(f"User:{e.principal}", e.resource_type, e.resource_name, e.pattern_type, op)
                )
        for p in self.platform:
            out |= p.acls()
        if self.legacy:
            standing_in = {f"User:{p}" for p in self.legacy.stands_in_for}
            out |= {replace(a, principal=ANONYMOUS) for a in out if a.principal in standing_in}
        return frozenset(out)

    def owned_principals(self) -> set[str]:
        """Kafka principals whose ACLs the reconciler owns (adds and removes)."""
        # ANONYMOUS too: its ACLs exist only through `legacy_plaintext`, and go when it goes.
        owned = {p.kafka_principal for p in (*self.principals, *self.platform)} | {ANONYMOUS}
        if any(WILDCARD in t.producers for t in self.topics) or any(
            e.principal == WILDCARD for e in self.extra_grants
        ):
            owned.add(f"User:{WILDCARD}")
        return owned
