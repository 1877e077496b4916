"""A real KRaft Kafka cluster (1 or 3 combined broker+controller processes) on this machine.

Configured by `broker_config()`, exactly like the Kubernetes StatefulSet: SASL_SSL on every
listener, TLS 1.3 with a local CA, StandardAuthorizer denying by default, `admin` as the only
super user. State (data, logs, ports, pids) lives under <state>/kafka so `down` then `up`
resumes the same cluster.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..broker_config import (
    CLIENT,
    BrokerSettings,
    ExtraListener,
    Node,
    broker_config,
    jaas_config,
    to_server_properties,
)
from ..connection import Connection
from . import jars
from .credentials import Credentials
from .tls import make_tls, tls_files

WRONG_NAME_LISTENER = "WRONGNAME"  # serves a certificate for tls.WRONG_NAME (tests only)

LOG4J = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.MaxFileSize=20MB
log4j.appender.file.MaxBackupIndex=3
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.authorizer.logger=INFO
log4j.logger.org.apache.kafka.controller=INFO
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
"""


class BrokerFailed(RuntimeError):
    pass


@dataclass
class LocalCluster:
    home: str
    cluster_id: str
    nodes: list[dict]  # asdict(Node) + pid
    ca_file: str
    jmx_ports: list[int]
    # One per node when started with wrong_name_listener (tests of hostname verification).
    wrong_name_ports: list[int] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n['client_port']}" for n in self.nodes)

    @property
    def wrong_name_bootstrap(self) -> str | None:
        """The WRONGNAME listeners: same SASL_SSL, same CA, a certificate for another host."""
        return ",".join(f"127.0.0.1:{p}" for p in self.wrong_name_ports) or None

    def connection(self, username: str, password: str, mechanism: str = "SCRAM-SHA-512") -> Connection:
        return Connection(bootstrap=self.bootstrap, security_protocol="SASL_SSL",
                          sasl_mechanism=mechanism, username=username, password=password,
                          ca_file=self.ca_file)

    def node_dir(self, node_id: int) -> Path:
        return Path(self.home) / f"node-{node_id}"

    def log_files(self) -> list[Path]:
        return [self.node_dir(n["node_id"]) / "logs" / "server.log" for n in self.nodes]

    def save(self) -> None:
        Path(self.home, "cluster.json").write_text(json.dumps(asdict(self), indent=2))

    @staticmethod
    def load(home: Path) -> LocalCluster | None:
        f = home / "cluster.json"
        return LocalCluster(**json.loads(f.read_text())) if f.exists() else None


def free_ports(count: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def random_cluster_id() -> str:
    """A KRaft cluster id as Kafka's Uuid.randomUuid() makes it.

    Like Kafka, never one starting with "-": kafka-storage's argument parser would read it as
    an option (1 in 64 ids did, and failed `format` with "expected one argument").
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _alive(pid: int | None, marker: str) -> bool:
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    # An exec in progress briefly shows an empty command line: the process still exists.
    return not cmdline or marker in cmdline


def _marker(cluster: LocalCluster, n: dict) -> str:
    """A string only this node's java command line contains (guards against reused pids)."""
    return str(cluster.node_dir(n["node_id"]) / "server.properties")


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home, "bin", "java")) if home else "java"


def settings_for(cluster: LocalCluster, node_id: int, tls_dir: Path) -> BrokerSettings:
    nodes = tuple(Node(n["node_id"], n["host"], n["client_port"], n["internal_port"],
                       n["controller_port"]) for n in cluster.nodes)
    extra: tuple[ExtraListener, ...] = ()
    if cluster.wrong_name_ports:
        extra = (ExtraListener(WRONG_NAME_LISTENER, cluster.wrong_name_ports[node_id - 1],
                               str(tls_files(tls_dir).wrong_name_keystore_pem)),)
    return BrokerSettings(
        node_id=node_id, nodes=nodes, bind_host="127.0.0.1",
        log_dirs=str(cluster.node_dir(node_id) / "data"),
        keystore_pem=str(tls_dir / "broker-keystore.pem"), truststore_pem=str(tls_dir / "ca.pem"),
        group_initial_rebalance_delay_ms=0,  # local only: tests start consumers immediately
        extra_listeners=extra,
    )


def start(home: Path, creds: Credentials, brokers: int = 1, heap_mb: int = 768,
          jmx_agent: tuple[Path, Path] | None = None, timeout: float = 120.0,
          wrong_name_listener: bool = False) -> LocalCluster:
    """Start (or resume) the cluster in `home` and wait until every broker serves SASL_SSL.

    jmx_agent: (agent jar, rules file) to expose Prometheus metrics from each broker.
    wrong_name_listener: also serve a WRONGNAME listener whose certificate (same CA) is for
    tls.WRONG_NAME, so tests can prove that clients refuse a name mismatch. Kept once set.
    """
    home.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster.load(home)
    if cluster and len(cluster.nodes) != brokers:
        raise BrokerFailed(f"{home} holds a {len(cluster.nodes)}-broker cluster; run "
                           "`hanzo-stream local down --purge` first to change the size")
    if cluster is None:
        ports = free_ports((5 if wrong_name_listener else 4) * brokers)
        cluster = LocalCluster(
            home=str(home), cluster_id=random_cluster_id(), ca_file="",
            nodes=[{"node_id": i + 1, "host": "127.0.0.1", "client_port": ports[4 * i],
                    "internal_port": ports[4 * i + 1], "controller_port": ports[4 * i + 2],
                    "pid": None} for i in range(brokers)],
            jmx_ports=[ports[4 * i + 3] for i in range(brokers)],
            wrong_name_ports=ports[4 * brokers:],
        )
    elif wrong_name_listener and not cluster.wrong_name_ports:
        raise BrokerFailed(f"{home} was created without the wrong-name listener; "
                           "`hanzo-stream local down --purge` first")
    tls = make_tls(home.parent / "tls")
    cluster.ca_file = str(tls.ca_pem)
    if cluster.wrong_name_ports and not tls.wrong_name_keystore_pem.exists():
        raise BrokerFailed(f"{tls.ca_pem.parent} predates the wrong-name certificate; "
                           "`hanzo-stream local down --purge` makes a fresh one")
    classpath = jars.kafka_classpath()
    spawned: dict[int, subprocess.Popen] = {}
    listeners = (CLIENT, WRONG_NAME_LISTENER) if cluster.wrong_name_ports else (CLIENT,)
    secret = jaas_config(creds.admin, creds.principals, listeners)
    for n in cluster.nodes:
        if _alive(n.get("pid"), _marker(cluster, n)):
            continue
        d = cluster.node_dir(n["node_id"])
        (d / "logs").mkdir(parents=True, exist_ok=True)
        props = d / "server.properties"
        cfg = broker_config(settings_for(cluster, n["node_id"], tls.ca_pem.parent))
        props.touch()
        props.chmod(0o600)  # before the JAAS passwords are written into it
        props.write_text(to_server_properties(cfg | secret))
        (d / "log4j.properties").write_text(LOG4J)
        jvm = [_java(), "-Xms256m", f"-Xmx{heap_mb}m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
               f"-Dlog4j.configuration=file:{d / 'log4j.properties'}",
               f"-Dkafka.logs.dir={d / 'logs'}", "-cp", classpath]
        if not (d / "data" / "meta.properties").exists():
            fmt = subprocess.run(
                [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster.cluster_id,
                 "-c", str(props), "--add-scram",
                 f"SCRAM-SHA-512=[name=admin,password={creds.admin}]"],
                capture_output=True, text=True)
            if fmt.returncode != 0:
                raise BrokerFailed(f"formatting node {n['node_id']} failed:\n{fmt.stderr[-2000:]}")
        agent = []
        if jmx_agent:
            port = cluster.jmx_ports[n["node_id"] - 1]
            agent = [f"-javaagent:{jmx_agent[0]}=127.0.0.1:{port}:{jmx_agent[1]}"]
        with open(d / "logs" / "stdout.log", "ab") as out:
            proc = subprocess.Popen([*jvm[:1], *agent, *jvm[1:], "kafka.Kafka", str(props)],
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        n["pid"] = proc.pid
        spawned[n["node_id"]] = proc
    cluster.save()
    wait_ready(cluster, creds.admin, timeout, spawned)
    return cluster


def wait_ready(cluster: LocalCluster, admin_password: str, timeout: float,
               spawned: dict[int, subprocess.Popen] | None = None) -> None:
    from confluent_kafka.admin import AdminClient

    conn = cluster.connection("admin", admin_password)
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        for n in cluster.nodes:
            proc = (spawned or {}).get(n["node_id"])
            if (proc.poll() is not None) if proc else not _alive(n["pid"], _marker(cluster, n)):
                log = cluster.node_dir(n["node_id"]) / "logs" / "server.log"
                tail = log.read_text()[-3000:] if log.exists() else ""
                raise BrokerFailed(f"broker {n['node_id']} exited during start-up; log: {log}\n{tail}")
        try:
            admin = AdminClient(conn.confluent() | {"socket.timeout.ms": 3000, "log_level": 0})
            desc = admin.describe_cluster(request_timeout=5).result(timeout=6)
            if len(desc.nodes) == len(cluster.nodes):
                # Metadata is served; make sure the controller accepts writes too.
                admin.describe_acls(_any_acl_filter(), request_timeout=5).result(timeout=6)
                return
            last = f"{len(desc.nodes)}/{len(cluster.nodes)} brokers registered"
        except Exception as e:  # retried until the deadline
            last = str(e)
        time.sleep(0.5)
    raise BrokerFailed(f"cluster not ready after {timeout:.0f}s ({last}); logs: "
                       + ", ".join(map(str, cluster.log_files())))


def _any_acl_filter():
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)


def stop(home: Path, timeout: float = 30.0) -> bool:
    """Stop every broker of the cluster in `home` (SIGTERM, then SIGKILL). True if any ran."""
    cluster = LocalCluster.load(home)
    if cluster is None:
        return False
    running = [n for n in cluster.nodes if _alive(n.get("pid"), _marker(cluster, n))]
    for n in running:
        os.kill(n["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for n in running:
        while _alive(n["pid"], _marker(cluster, n)) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(n["pid"], _marker(cluster, n)):
            os.kill(n["pid"], signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(n["pid"], os.WNOHANG)
        n["pid"] = None
    cluster.save()
    return bool(running)


def is_running(home: Path) -> bool:
    cluster = LocalCluster.load(home)
    return bool(cluster) and all(
        _alive(n.get("pid"), _marker(cluster, n)) for n in cluster.nodes)
