"""A real KRaft Kafka cluster (1 or 3 combined broker+controller processes) on this machine.

Configured by `broker_config()`, exactly like the Kubernetes StatefulSet: SASL_SSL on every
listener, TLS 1.3 with a local CA, StandardAuthorizer denying by default, `admin` as the only
super user. State (data, logs, ports, pids) lives under <state>/kafka so `down` then `up`
resumes the same cluster.
"""

from __future__ import annotations

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

from ..artifacts import jars
from ..artifacts.jvm import java, jit_flags
from ..artifacts.versions import KAFKA_VERSION
from ..core.broker_config import (
    CLIENT,
    BrokerSettings,
    ExtraListener,
    Node,
    broker_config,
    jaas_config,
    kraft_uuid,
    quorum_format_args,
    to_server_properties,
)
from ..core.connection import Connection
from ..core.secret_files import write_secret
from ..pods.quorum import QuorumParseError, parse_status
from .credentials import Credentials
from .tls import make_tls, tls_files

WRONG_NAME_LISTENER = "WRONGNAME"  # serves a certificate for tls.WRONG_NAME (tests only)

# Kafka 4 logs through log4j2 (log4j 1 is gone); the properties syntax needs no extra jar.
LOG4J2 = """status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.filePattern = ${sys:kafka.logs.dir}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = INFO
logger.controller.name = org.apache.kafka.controller
logger.controller.level = INFO
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
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
    # The dynamic quorum as formed when the cluster was created: node id (a string, JSON
    # keys are) -> metadata log directory id. Nodes added later are not in it.
    initial_voters: dict[str, str] = field(default_factory=dict)
    kafka_version: str = ""  # the Kafka release that formatted the cluster

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


def random_uuid() -> str:
    """A Kafka Uuid (cluster id, directory id) as Kafka's Uuid.randomUuid() makes it.

    Like Kafka, never one starting with "-": kafka-storage's argument parser would read it as
    an option (1 in 64 ids did, and failed `format` with "expected one argument").
    """
    return kraft_uuid(lambda _: uuid.uuid4().bytes)




def _alive(pid: int | None, marker: str) -> bool:
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z":  # exited (a broker halts on its own), not yet reaped by whoever started it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    # An exec in progress briefly shows an empty command line: the process still exists.
    return not cmdline or marker in cmdline


def _marker(cluster: LocalCluster, n: dict) -> str:
    """A string only this node's java command line contains (guards against reused pids)."""
    return str(cluster.node_dir(n["node_id"]) / "server.properties")


def settings_for(cluster: LocalCluster, node_id: int, tls_dir: Path) -> BrokerSettings:
    nodes = tuple(Node(n["node_id"], n["host"], n["client_port"], n["internal_port"],
                       n["controller_port"], n.get("rack", "")) for n in cluster.nodes)
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


def start(home: Path, creds: Credentials, brokers: int | None = None, heap_mb: int = 768,
          jmx_agent: tuple[Path, Path] | None = None, timeout: float = 120.0,
          wrong_name_listener: bool = False, only: set[int] | None = None,
          netns: dict[int, str] | None = None, racks: dict[int, str] | None = None) -> LocalCluster:
    """Start (or resume) the cluster in `home` and wait until its brokers serve SASL_SSL.

    jmx_agent: (agent jar, rules file) to expose Prometheus metrics from each broker.
    wrong_name_listener: also serve a WRONGNAME listener whose certificate (same CA) is for
    tls.WRONG_NAME, so tests can prove that clients refuse a name mismatch. Kept once set.
    only: start just these node ids (a failure test bringing one node back); default all.
    brokers: the size of a new cluster (default 1); an existing one keeps its own size (grow
    it with scale()).
    netns: node id -> a network namespace (`ip netns`) to run that node in (a partition test
    relays its ports; tests/integration/partition.py).
    racks: node id -> its broker.rack, for a new cluster (zones, as tests of placement need).
    """
    home.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster.load(home)
    if cluster and brokers is not None and len(cluster.nodes) != brokers:
        raise BrokerFailed(f"{home} holds a {len(cluster.nodes)}-broker cluster, not {brokers}: "
                           f"grow it with `hanzo-stream local scale --brokers {brokers}`, or "
                           "`hanzo-stream local down --purge` first to start over")
    brokers = brokers or 1
    if cluster and not cluster.initial_voters:
        raise BrokerFailed(
            f"{home} holds a cluster formatted by Kafka {cluster.kafka_version or '3.x'} with a "
            f"static controller quorum; Kafka {KAFKA_VERSION} runs a dynamic one. Run "
            "`hanzo-stream local down --purge` and `local up` again (local data is disposable)")
    if cluster is None:
        ports = free_ports((5 if wrong_name_listener else 4) * brokers)
        cluster = LocalCluster(
            home=str(home), cluster_id=random_uuid(), ca_file="",
            nodes=[{"node_id": i + 1, "host": "127.0.0.1", "client_port": ports[4 * i],
                    "internal_port": ports[4 * i + 1], "controller_port": ports[4 * i + 2],
                    "rack": (racks or {}).get(i + 1, ""), "pid": None} for i in range(brokers)],
            jmx_ports=[ports[4 * i + 3] for i in range(brokers)],
            wrong_name_ports=ports[4 * brokers:],
            initial_voters={str(i + 1): random_uuid() for i in range(brokers)},
            kafka_version=KAFKA_VERSION,
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
    voters = {int(k): v for k, v in cluster.initial_voters.items()}
    for n in cluster.nodes:
        if _alive(n.get("pid"), _marker(cluster, n)) or (only and n["node_id"] not in only):
            continue
        d = cluster.node_dir(n["node_id"])
        (d / "logs").mkdir(parents=True, exist_ok=True)
        props = d / "server.properties"
        settings = settings_for(cluster, n["node_id"], tls.ca_pem.parent)
        write_secret(props, to_server_properties(broker_config(settings) | secret))
        jvm = broker_jvm(d, heap_mb, classpath)
        if not (d / "data" / "meta.properties").exists():
            # The admin's SCRAM credential goes through a 0600 argument file (the java launcher
            # expands `@file`), never the command line other users can read in /proc.
            scram = d / "format.args"
            write_secret(scram, f"--add-scram\nSCRAM-SHA-512=[name=admin,password={creds.admin}]\n")
            try:
                fmt = subprocess.run(
                    [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster.cluster_id,
                     "-c", str(props), *quorum_format_args(settings, voters), f"@{scram}"],
                    capture_output=True, text=True)
            finally:
                scram.unlink(missing_ok=True)
            if fmt.returncode != 0:
                raise BrokerFailed(f"formatting node {n['node_id']} failed:\n"
                                   f"{(fmt.stderr or fmt.stdout)[-2000:]}")
        agent = []
        if jmx_agent:
            port = cluster.jmx_ports[n["node_id"] - 1]
            agent = [f"-javaagent:{jmx_agent[0]}=127.0.0.1:{port}:{jmx_agent[1]}"]
        inside = (["nsenter", f"--net=/run/netns/{netns[n['node_id']]}", "--"]
                  if netns and n["node_id"] in netns else [])
        proc = spawn_broker(d, [*inside, *jvm[:1], *agent, *jvm[1:]], props)
        n["pid"] = proc.pid
        spawned[n["node_id"]] = proc
    cluster.save()
    wait_ready(cluster, creds.admin, timeout, spawned)
    return cluster


def broker_jvm(d: Path, heap_mb: int, classpath: str) -> list[str]:
    """The java command (up to the main class) of a broker whose files live in `d`."""
    (d / "logs").mkdir(parents=True, exist_ok=True)
    (d / "log4j2.properties").write_text(LOG4J2)
    return [java(), *jit_flags(), "-Xms256m", f"-Xmx{heap_mb}m", "-XX:+UseG1GC",
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={d / 'logs'}", "-cp", classpath]


def spawn_broker(d: Path, jvm: list[str], props: Path) -> subprocess.Popen:
    """Start `kafka.Kafka props` detached, its output in d/logs/stdout.log."""
    with open(d / "logs" / "stdout.log", "ab") as out:
        return subprocess.Popen([*jvm, "kafka.Kafka", str(props)], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop_process(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM (a broker's clean shutdown), SIGKILL after `timeout`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def wait_ready(cluster: LocalCluster, admin_password: str, timeout: float,
               spawned: dict[int, subprocess.Popen] | None = None) -> None:
    """Wait until every running node is a registered broker (dead ones are not waited for:
    a failure test may keep one down)."""
    from confluent_kafka.admin import AdminClient

    conn = cluster.connection("admin", admin_password)
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        running = set()
        for n in cluster.nodes:
            proc = (spawned or {}).get(n["node_id"])
            if proc is not None and proc.poll() is not None:
                log = cluster.node_dir(n["node_id"]) / "logs" / "server.log"
                tail = log.read_text()[-3000:] if log.exists() else ""
                raise BrokerFailed(f"broker {n['node_id']} exited during start-up; log: {log}\n{tail}")
            if _alive(n["pid"], _marker(cluster, n)):
                running.add(n["node_id"])
        if not running:
            raise BrokerFailed(f"no broker of {cluster.home} is running")
        try:
            admin = AdminClient(conn.confluent() | {"socket.timeout.ms": 3000, "log_level": 0})
            desc = admin.describe_cluster(request_timeout=5).result(timeout=6)
            registered = {b.id for b in desc.nodes}
            if running <= registered:
                # Metadata is served; make sure the controller accepts writes too.
                admin.describe_acls(_any_acl_filter(), request_timeout=5).result(timeout=6)
                return
            last = f"brokers {sorted(registered)} registered, waiting for {sorted(running)}"
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


def kill(home: Path, node_id: int) -> None:
    """SIGKILL one node, as a crash would: no controlled shutdown, no final flush."""
    cluster = LocalCluster.load(home)
    if cluster is None:
        raise BrokerFailed(f"no cluster in {home}")
    n = next(n for n in cluster.nodes if n["node_id"] == node_id)
    if not _alive(n.get("pid"), _marker(cluster, n)):
        raise BrokerFailed(f"node {node_id} of {home} is not running")
    os.kill(n["pid"], signal.SIGKILL)
    while _alive(n["pid"], _marker(cluster, n)):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(n["pid"], os.WNOHANG)  # reap it if this process started it
        time.sleep(0.05)
    n["pid"] = None
    cluster.save()


def pause(home: Path, node_id: int, paused: bool = True) -> None:
    """SIGSTOP one node (a hung broker: its sockets stay open, it answers nothing), or SIGCONT
    it again. For fault tests; a paused node counts as running."""
    cluster = LocalCluster.load(home)
    n = next(n for n in cluster.nodes if n["node_id"] == node_id) if cluster else None
    if n is None or not _alive(n.get("pid"), _marker(cluster, n)):
        raise BrokerFailed(f"node {node_id} of {home} is not running")
    os.kill(n["pid"], signal.SIGSTOP if paused else signal.SIGCONT)


def running(home: Path) -> set[int]:
    """The node ids of `home`'s cluster whose process is alive (a halted broker is not)."""
    cluster = LocalCluster.load(home)
    if cluster is None:
        return set()
    return {n["node_id"] for n in cluster.nodes if _alive(n.get("pid"), _marker(cluster, n))}


def is_running(home: Path) -> bool:
    cluster = LocalCluster.load(home)
    return bool(cluster) and running(home) == {n["node_id"] for n in cluster.nodes}


def scale(home: Path, creds: Credentials, brokers: int, heap_mb: int = 768,
          jmx_agent: tuple[Path, Path] | None = None, timeout: float = 180.0) -> LocalCluster:
    """Grow the running cluster in `home` to `brokers` nodes, live (KIP-853).

    Each new node formats with `--no-initial-controllers` (it is not an initial voter), joins
    as a broker and a quorum observer, and is then added as a voter, one at a time, by
    add_controller. Existing partitions stay where they are: raising their replication factor
    is the reconciler's job (a registry edit + apply). Shrinking is refused.
    """
    cluster = LocalCluster.load(home)
    if cluster is None or not is_running(home):
        raise BrokerFailed(f"no running cluster in {home}: `hanzo-stream local up` first")
    have = len(cluster.nodes)
    if brokers < have:
        raise BrokerFailed(f"{home} runs {have} brokers; scale only adds brokers (moving "
                           "replicas off a broker before removing it is not automated)")
    if brokers == 2:
        raise BrokerFailed("use 1 or at least 3 brokers: a 2-voter quorum survives no failure")
    per_node = 5 if cluster.wrong_name_ports else 4
    ports = free_ports(per_node * (brokers - have))
    for k, node_id in enumerate(range(have + 1, brokers + 1)):
        p = ports[per_node * k:per_node * (k + 1)]
        cluster.nodes.append({"node_id": node_id, "host": "127.0.0.1", "client_port": p[0],
                              "internal_port": p[1], "controller_port": p[2], "pid": None})
        cluster.jmx_ports.append(p[3])
        if cluster.wrong_name_ports:
            cluster.wrong_name_ports.append(p[4])
    cluster.save()
    new = set(range(have + 1, brokers + 1))
    cluster = start(home, creds, brokers, heap_mb, jmx_agent, timeout, only=new)
    for node_id in sorted(new):
        add_controller(cluster, node_id, creds.admin, timeout)
    return cluster


def quorum_status(cluster: LocalCluster, admin_password: str) -> dict[str, list[int]]:
    """The controller quorum as its leader sees it: {"voters": [...], "observers": [...]}."""
    out = _quorum_tool(cluster, admin_password, ["describe", "--status"])
    try:
        status = parse_status(out)
    except QuorumParseError as e:
        raise BrokerFailed(f"kafka-metadata-quorum describe --status: {e}") from None
    return {"voters": sorted(m.node for m in status.voters),
            "observers": sorted(m.node for m in status.observers)}


def add_controller(cluster: LocalCluster, node_id: int, admin_password: str,
                   timeout: float = 180.0) -> None:
    """Make an observer node a voter of the controller quorum (idempotent).

    `kafka-metadata-quorum add-controller` runs with the new node's own configuration: it
    reads the node id and the metadata log's directory id from it. The controller refuses an
    add while another voter change is in flight, or before the node has caught up; both are
    retried until `timeout`.
    """
    props = cluster.node_dir(node_id) / "server.properties"
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            if node_id in quorum_status(cluster, admin_password).get("voters", []):
                return
            _quorum_tool(cluster, admin_password, ["add-controller"], own_config=props)
        except BrokerFailed as e:
            last = str(e)
            time.sleep(1)
    raise BrokerFailed(f"node {node_id} did not become a controller voter in {timeout:.0f}s: "
                       f"{last[-1500:]}")


def _quorum_tool(cluster: LocalCluster, admin_password: str, args: list[str],
                 own_config: Path | None = None) -> str:
    """Run Kafka's MetadataQuorumCommand against the nodes' controller endpoints,
    logged in as the admin; the password goes through a 0600 file, never the command line."""
    conn = cluster.connection("admin", admin_password, mechanism="PLAIN")
    props = {k: v for k, v in conn.java().items() if k != "bootstrap.servers"}
    text = own_config.read_text() if own_config else ""
    cfg = Path(cluster.home) / f".quorum-{os.getpid()}.properties"
    try:
        write_secret(cfg, text + to_server_properties(props))
        run = subprocess.run(
            [java(), *jit_flags(), "-cp", jars.kafka_classpath(),
             "org.apache.kafka.tools.MetadataQuorumCommand",
             "--bootstrap-controller", ",".join(f"127.0.0.1:{n['controller_port']}" for n in cluster.nodes),
             "--command-config", str(cfg), *args], capture_output=True, text=True, timeout=120)
    finally:
        cfg.unlink(missing_ok=True)
    if run.returncode != 0:
        raise BrokerFailed(f"kafka-metadata-quorum {' '.join(args)}: {(run.stderr or run.stdout)[-1500:]}")
    return run.stdout
