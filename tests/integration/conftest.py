"""One real broker for the whole integration session.

Order of preference: an external cluster named by HANZO_STREAM_BOOTSTRAP (admin
credentials in HANZO_STREAM_SASL_USERNAME/PASSWORD, principal passwords in the JSON file
HANZO_STREAM_SECRETS_FILE), otherwise a local KRaft process with SASL, TLS and ACLs
(the case on machines without a Docker engine, including CI here). The local broker also
serves the WRONGNAME listener (a certificate for another host) for test_authentication.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from hanzo_stream.core.connection import Connection
from hanzo_stream.local import credentials, kafka
from hanzo_stream.registry import Registry
from tests import suite_profile

pytestmark = pytest.mark.integration
T = TypeVar("T")


def wait_for(fn: Callable[[], T | None], timeout: float, what: str, every: float = 0.5) -> T:
    """Poll fn until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as e:  # retried until the deadline
            last = e
        else:
            if last:
                return last
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def exports(text: str) -> dict[str, str]:
    """The variables `export NAME=value` lines set (what `eval` of `local env` does)."""
    return {k: shlex.split(v)[0] for k, v in (line.removeprefix("export ").split("=", 1)
                                              for line in text.splitlines()
                                              if line.startswith("export "))}


@dataclass
class Cluster:
    """What a test needs to talk to the broker as any principal."""

    bootstrap: str
    ca_file: str | None
    creds: credentials.Credentials
    brokers: int = 1
    home: Path | None = None
    local: kafka.LocalCluster | None = field(default=None, repr=False)

    def as_(self, principal: str, mechanism: str = "SCRAM-SHA-512") -> Connection:
        return Connection(self.bootstrap, "SASL_SSL", mechanism, principal,
                          self.creds.password(principal), self.ca_file)

    @property
    def admin(self) -> Connection:
        return self.as_("admin")

    def admin_client(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.admin.confluent())

    def counting_admin(self):
        """The reconciler's admin (confluent-kafka, plus kafka-python for reassignments)."""
        from hanzo_stream.reconcile import CountingAdmin

        return CountingAdmin.connect(self.admin)


def start_local(home: Path, registry: Registry, brokers: int,
                racks: dict[int, str] | None = None) -> Cluster:
    creds = credentials.of_home(home, registry.principal_names())
    local = kafka.start(home / "kafka", creds, brokers=brokers, wrong_name_listener=True, racks=racks)
    print(f"\nlocal {brokers}-broker cluster at {local.bootstrap}; logs: "
          + ", ".join(map(str, local.log_files())))
    return Cluster(local.bootstrap, local.ca_file, creds, brokers, home, local)


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory, registry: Registry) -> Iterator[Cluster]:
    if os.environ.get("HANZO_STREAM_BOOTSTRAP"):
        secrets_file = os.environ.get("HANZO_STREAM_SECRETS_FILE")
        principals = json.loads(Path(secrets_file).read_text()) if secrets_file else {}
        creds = credentials.Credentials(os.environ["HANZO_STREAM_SASL_PASSWORD"], principals)
        yield Cluster(os.environ["HANZO_STREAM_BOOTSTRAP"], os.environ.get("HANZO_STREAM_CA_FILE"),
                      creds)
        return
    home = tmp_path_factory.mktemp("kafka1")
    cluster = start_local(home, registry, brokers=1)
    try:
        yield cluster
    finally:
        kafka.stop(home / "kafka")


@pytest.fixture(scope="module")
def kafka_cluster3(tmp_path_factory, registry: Registry) -> Iterator[Cluster]:
    """Three brokers (RF 3, min ISR 2) for a module that needs replication. Per module: three
    idle brokers kept for the rest of a session cost more CPU than a start (~15 s)."""
    home = tmp_path_factory.mktemp("kafka3")
    cluster = start_local(home, registry, brokers=3)
    try:
        yield cluster
    finally:
        kafka.stop(home / "kafka")


@dataclass(frozen=True)
class PostgresServer:
    """The local platform's PostgreSQL (hanzo_stream/local/postgres.py), tables migrated."""

    home: Path
    dsn: str = field(repr=False)  # as the jobs' role, which owns the tables

    def __repr__(self) -> str:  # a failing test prints its fixtures: no password
        return f"PostgresServer(home={self.home})"


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory) -> Iterator[PostgresServer]:
    from hanzo_stream.jobs import postgres as sink
    from hanzo_stream.local import postgres

    home = tmp_path_factory.mktemp("postgres")
    creds = credentials.of_home(home)
    postgres.start(home, creds)
    try:
        dsn = postgres.dsn(home, creds)
        assert dsn
        with sink.connect(dsn) as conn:
            sink.migrate(conn)
        yield PostgresServer(home, dsn)
    finally:
        postgres.purge(home)


def apply_registry(cluster: Cluster, registry: Registry, more_passwords: dict[str, str] | None = None):
    """Apply a registry as the reconciler does in production; returns (plan, result, admin)."""
    from hanzo_stream.reconcile import reconcile

    admin = cluster.counting_admin()
    passwords = dict(cluster.creds.principals) | (more_passwords or {})
    with admin:  # closes the kafka-python bridge; its counters stay readable
        plan, result = reconcile(admin, registry, passwords)
    assert not plan.errors, plan.errors
    assert result.ok, result.failed
    return plan, result, admin


def wait_until_logged_in(conns: list[Connection]) -> None:
    """New SCRAM users reach the broker's credential cache a moment after apply returns (a
    busy broker first creates the new topics' logs), so a login right away can be refused."""
    from hanzo_stream.core.diagnose import diagnose

    for c in conns:
        wait_for(lambda c=c: diagnose(c, timeout=10) is None, 60, f"{c.username} to log in")


@pytest.fixture(scope="session")
def hip_cluster(kafka_cluster: Cluster, registry: Registry) -> Cluster:
    """The session broker with topics.yaml applied: HIP topics, ACLs and SCRAM users."""
    apply_registry(kafka_cluster, registry)
    wait_until_logged_in([kafka_cluster.as_(p) for p in sorted(registry.principal_names())])
    return kafka_cluster


TEST_NODE = "hanzo-kt"  # + pid: a test session's node (its netns and cgroup root)
# HANZO_STREAM_KUBE_REUSE=1: the developer's node, kept after the session. Stacks deployed on it
# are destroyed at the end; a session's own node goes whole, with everything on it (`pulumi
# destroy` itself is proven by test_kube_3_growth).
KEEP_NODE = bool(os.environ.get("HANZO_STREAM_KUBE_REUSE"))


@pytest.fixture(scope="session")
def kube_node(tmp_path_factory) -> Iterator:
    """The real single-node Kubernetes (hanzo_stream/kube/node.py), up for the session and
    torn down with everything it made. HANZO_STREAM_KUBE_REUSE=1 uses (and keeps) the node
    `hanzo-stream local kube up` started, for a quicker edit-test loop."""
    from hanzo_stream.kube import netns
    from hanzo_stream.kube.node import Node

    if KEEP_NODE:
        node = Node()
        node.up()
        yield node
        return
    # A namespace and cgroup root of the session's own (hanzo-kt<pid>): a developer's node
    # (`hanzo-stream local kube up`, netns hanzo-kube) and other test sessions (two CI runs
    # side by side) may run beside it and are never touched. Nodes of sessions that died
    # without tearing theirs down are stopped first.
    from hanzo_stream.local.kafka import free_ports

    for stale in Path("/run").glob(f"{TEST_NODE}*.owner.json"):
        prev = json.loads(stale.read_text())
        if not Path(f"/proc/{prev['pid']}").exists():
            Node(home=Path(prev["home"]), addr=netns.Addresses(netns=prev["netns"])).down(
                purge=True, log=lambda s: None)
            stale.unlink(missing_ok=True)
    addr = netns.Addresses(netns=f"{TEST_NODE}{os.getpid()}", host_api_port=free_ports(1)[0])
    node = Node(home=tmp_path_factory.mktemp("kube"), addr=addr)
    owner = Path("/run") / f"{addr.netns}.owner.json"
    owner.write_text(json.dumps({"pid": os.getpid(), "home": str(node.home), "netns": addr.netns}))
    try:
        node.up()
        yield node
    finally:
        with contextlib.suppress(Exception):  # a report, never the reason a teardown fails
            suite_profile.record_parts("kube-node", node.status()["components"])
        node.down(purge=True)
        owner.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def kube_dev(kube_node, tmp_path_factory):
    """The dev stack (1 broker) deployed with the real `pulumi up` on the session's node, shared
    by the Kubernetes modules in order (test_kube_1_dev, _2_spark, _3_growth); _3_growth, its
    last user, destroys it."""
    from hanzo_stream.kube.deploy import Deployer

    from .kube import Stack

    work = tmp_path_factory.mktemp("local-dev")
    stack = Stack(Deployer(kube_node, home=work / "pulumi"), "local-dev", "dev", {"spark": False},
                  work=work)
    t = time.monotonic()
    result = stack.up()
    print(f"\npulumi up local-dev: {dict(result.summary.resource_changes or {})} "
          f"in {time.monotonic() - t:.0f}s")
    yield stack
    if KEEP_NODE:
        stack.deployer.destroy(stack.name, stack.env)
