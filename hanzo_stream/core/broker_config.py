"""The broker configuration, computed once and rendered for every place a broker runs.

`broker_config()` is the single source of every non-secret broker property. The local
platform writes it as server.properties; the Pulumi program renders the very same dict as
the container's environment (bitnami `KAFKA_CFG_*` or apache/kafka `KAFKA_*`). Secrets
(the JAAS user lists) come from `jaas_config()` and travel separately: a 0600 file locally,
Kubernetes Secrets in the cluster.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass

CLIENT, INTERNAL, CONTROLLER = "CLIENT", "INTERNAL", "CONTROLLER"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TLS_PROTOCOL = "TLSv1.3"


@dataclass(frozen=True)
class Node:
    """One combined broker+controller: its id and how the others reach it."""

    node_id: int
    host: str
    client_port: int = 9093
    internal_port: int = 9094
    controller_port: int = 9095
    rack: str = ""  # broker.rack (its zone): the reconciler spreads each partition over racks


@dataclass(frozen=True)
class Replication:
    """A replication profile: what every topic gets on a cluster of a given size."""

    default_replication_factor: int
    min_insync_replicas: int
    name: str = ""

    @staticmethod
    def for_cluster(brokers: int) -> Replication:
        """One broker: everything 1 or consumers fail. Three or more: RF 3, min ISR 2."""
        return PROFILES["single"] if brokers < 3 else PROFILES["ha"]

    def min_isr_for(self, replication_factor: int) -> int:
        """The profile's min ISR, never above RF - 1 (at least 1): with minISR = RF one lost
        broker stops every acks=all write, above RF no write succeeds at all."""
        return min(self.min_insync_replicas, max(1, replication_factor - 1))


#: The profiles by name; topics.yaml's `replication.profile` names one (or `cluster`: by size).
PROFILES = {"single": Replication(1, 1, "single"), "ha": Replication(3, 2, "ha")}


@dataclass(frozen=True)
class ExtraListener:
    """One more SASL_SSL client listener, presenting its own certificate.

    The local test broker has one (WRONGNAME) whose certificate names a host it is never
    reached by, so every client's hostname verification is tested against a real broker.
    """

    name: str
    port: int
    keystore_pem: str  # private key + certificate chain, PEM


@dataclass(frozen=True)
class BrokerSettings:
    node_id: int
    nodes: tuple[Node, ...]
    log_dirs: str
    keystore_pem: str  # private key + certificate chain, PEM
    truststore_pem: str  # CA certificate, PEM
    bind_host: str = "0.0.0.0"
    admin_principal: str = "admin"
    client_mechanisms: tuple[str, ...] = ("SCRAM-SHA-512", "PLAIN")
    group_initial_rebalance_delay_ms: int = 3000
    extra_listeners: tuple[ExtraListener, ...] = ()
    extra: tuple[tuple[str, str], ...] = ()  # per-environment overrides, applied last

    @property
    def me(self) -> Node:
        return next(n for n in self.nodes if n.node_id == self.node_id)

    @property
    def replication(self) -> Replication:
        return Replication.for_cluster(len(self.nodes))


def broker_config(s: BrokerSettings) -> dict[str, str]:
    """Every non-secret property of one broker, as strings, in a stable order."""
    me, rep = s.me, s.replication
    internal_mech = "PLAIN"  # controller/inter-broker: static JAAS, needs no metadata to log in
    more = s.extra_listeners
    cfg: dict[str, str] = {
        # KRaft combined mode with a dynamic quorum (KIP-853): the voter set lives in the
        # metadata log, set at format time (quorum_format_args) and changed with
        # `kafka-metadata-quorum add-controller/remove-controller`, never by configuration.
        "process.roles": "broker,controller",
        "node.id": str(s.node_id),
        "controller.quorum.bootstrap.servers": ",".join(
            f"{n.host}:{n.controller_port}" for n in s.nodes),
        "controller.listener.names": CONTROLLER,
        "inter.broker.listener.name": INTERNAL,
        "listeners": (
            f"{CLIENT}://{s.bind_host}:{me.client_port},"
            f"{INTERNAL}://{s.bind_host}:{me.internal_port},"
            f"{CONTROLLER}://{s.bind_host}:{me.controller_port}"
            + "".join(f",{x.name}://{s.bind_host}:{x.port}" for x in more)
        ),
        # The controller endpoint is advertised too: a dynamic quorum registers each voter
        # with the address it advertises.
        "advertised.listeners": (
            f"{CLIENT}://{me.host}:{me.client_port},{INTERNAL}://{me.host}:{me.internal_port},"
            f"{CONTROLLER}://{me.host}:{me.controller_port}"
            + "".join(f",{x.name}://{me.host}:{x.port}" for x in more)
        ),
        # No PLAINTEXT anywhere: every listener is SASL over TLS.
        "listener.security.protocol.map": (
            f"{CLIENT}:SASL_SSL,{INTERNAL}:SASL_SSL,{CONTROLLER}:SASL_SSL"
            + "".join(f",{x.name}:SASL_SSL" for x in more)
        ),
        "log.dirs": s.log_dirs,
        # SASL
        "sasl.enabled.mechanisms": ",".join(s.client_mechanisms),
        "listener.name.client.sasl.enabled.mechanisms": ",".join(s.client_mechanisms),
        "listener.name.internal.sasl.enabled.mechanisms": internal_mech,
        "listener.name.controller.sasl.enabled.mechanisms": internal_mech,
        "sasl.mechanism.inter.broker.protocol": internal_mech,
        "sasl.mechanism.controller.protocol": internal_mech,
        # TLS 1.3, PEM files; clients verify the broker's hostname.
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": s.keystore_pem,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": s.truststore_pem,
        "ssl.protocol": TLS_PROTOCOL,
        "ssl.enabled.protocols": TLS_PROTOCOL,
        "ssl.client.auth": "none",
        "ssl.endpoint.identification.algorithm": "https",
        # Authorization: deny by default, one super user.
        "authorizer.class.name": AUTHORIZER,
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{s.admin_principal}",
        # Durability
        "default.replication.factor": str(rep.default_replication_factor),
        "min.insync.replicas": str(rep.min_insync_replicas),
        "offsets.topic.replication.factor": str(rep.default_replication_factor),
        "transaction.state.log.replication.factor": str(rep.default_replication_factor),
        "transaction.state.log.min.isr": str(rep.min_insync_replicas),
        "unclean.leader.election.enable": "false",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "num.partitions": "4",
        "log.retention.hours": "168",  # the standard's broker default; topics set their own
        "group.initial.rebalance.delay.ms": str(s.group_initial_rebalance_delay_ms),
    }
    for x in more:  # like CLIENT, but with its own certificate
        lx = f"listener.name.{x.name.lower()}"
        cfg[f"{lx}.sasl.enabled.mechanisms"] = ",".join(s.client_mechanisms)
        cfg[f"{lx}.ssl.keystore.location"] = x.keystore_pem
    if me.rack:
        cfg["broker.rack"] = me.rack
    cfg.update(dict(s.extra))
    return cfg


def quorum_format_args(s: BrokerSettings, initial_voters: Mapping[int, str]) -> list[str]:
    """`kafka-storage format` arguments that set this node's place in the dynamic quorum.

    initial_voters maps the node ids that form the quorum when the cluster is created to
    their metadata log directory ids (base64 Kafka Uuids). One voter: `--standalone`
    (Kafka's way to start a quorum that will grow). Several: `--initial-controllers`, the
    same list on every one of them. A node outside that set (one added to a running
    cluster) formats with `--no-initial-controllers`: it starts as an observer and becomes
    a voter only through `kafka-metadata-quorum add-controller`, so it can never form a
    rival majority with other empty nodes.
    """
    if s.node_id not in initial_voters:
        return ["--no-initial-controllers"]
    if len(initial_voters) == 1:
        return ["--standalone"]
    by_id = {n.node_id: n for n in s.nodes}
    return ["--initial-controllers", ",".join(
        f"{i}@{by_id[i].host}:{by_id[i].controller_port}:{d}"
        for i, d in sorted(initial_voters.items()))]


def jaas_config(admin_password: str, plain_users: Mapping[str, str],
                client_listeners: tuple[str, ...] = (CLIENT,)) -> dict[str, str]:
    """The secret half of the configuration: JAAS entries for each listener.

    Controller and inter-broker links log in as the admin with PLAIN. Clients may use
    SCRAM-SHA-512 (credentials live in the cluster metadata, managed by the reconciler)
    or PLAIN (users listed here), on every client listener (CLIENT and any ExtraListener).
    """
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    admin = f'username="admin" password="{admin_password}" user_admin="{admin_password}"'
    users = " ".join(f'user_{u}="{p}"' for u, p in sorted(plain_users.items()))
    out = {
        "listener.name.controller.plain.sasl.jaas.config": f"{plain} {admin};",
        "listener.name.internal.plain.sasl.jaas.config": f"{plain} {admin};",
    }
    for name in client_listeners:
        out[f"listener.name.{name.lower()}.plain.sasl.jaas.config"] = (
            f'{plain} user_admin="{admin_password}" {users};')
        out[f"listener.name.{name.lower()}.scram-sha-512.sasl.jaas.config"] = scram
    return out


def to_server_properties(cfg: Mapping[str, str]) -> str:
    """server.properties text (Java properties escaping for the few characters that need it)."""

    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n")

    return "".join(f"{k}={esc(v)}\n" for k, v in cfg.items())


def to_bitnami_env(cfg: Mapping[str, str]) -> dict[str, str]:
    """bitnami/kafka convention: KAFKA_CFG_FOO_BAR becomes foo.bar."""
    out = {}
    for k, v in cfg.items():
        if "_" in k or "-" in k:
            raise ValueError(f"{k!r} cannot be expressed as a bitnami KAFKA_CFG_* variable")
        out["KAFKA_CFG_" + k.upper().replace(".", "_")] = v
    return out


def from_bitnami_env(env: Mapping[str, str]) -> dict[str, str]:
    """The inverse, as the bitnami entrypoint applies it (used by tests to prove round trips)."""
    p = "KAFKA_CFG_"
    return {k[len(p):].lower().replace("_", "."): v for k, v in env.items() if k.startswith(p)}


def to_apache_env(cfg: Mapping[str, str]) -> dict[str, str]:
    """apache/kafka convention: KAFKA_ + upper case, '.'->'_', '_'->'__', '-'->'___'."""
    return {
        "KAFKA_" + k.replace("_", "__").replace("-", "___").replace(".", "_").upper(): v
        for k, v in cfg.items()
    }


def from_apache_env(env: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for k, v in env.items():
        if not k.startswith("KAFKA_"):
            continue
        body = k[len("KAFKA_"):].lower()
        out[body.replace("___", "\0").replace("__", "\1").replace("_", ".")
            .replace("\0", "-").replace("\1", "_")] = v
    return out


def kraft_uuid(candidate: Callable[[int], bytes]) -> str:
    """A Kafka Uuid (cluster id, directory id: base64url of 16 bytes) from candidate(0),
    candidate(1), ...: the first whose text does not start with "-", as Kafka's own
    Uuid.randomUuid() does. kafka-storage's argument parser reads such an id as an option and
    fails `format` ("expected one argument"); 1 in 64 does. A derived id (the stack's, from its
    namespace uid) stays what it was unless it started with "-"."""
    for n in range(1000):
        text = base64.urlsafe_b64encode(candidate(n)).decode().rstrip("=")
        if not text.startswith("-"):
            return text
    raise ValueError("no Kafka Uuid in 1,000 candidates: the candidates do not vary")
