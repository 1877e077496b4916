"""The takeover (hanzo_stream/pods/takeover.py) on this machine: this platform's broker started on
an old broker's log directory, the old PLAINTEXT port kept as the LEGACY listener.

What the Kubernetes sequence does with the insights-kafka StatefulSet's volume, run here
against a directory a real Kafka 3.7 broker wrote (tests/integration/test_takeover.py).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..artifacts import jars
from ..artifacts.jvm import java, jit_flags
from ..core.broker_config import BrokerSettings, Node, jaas_config, to_server_properties
from ..core.connection import Connection
from ..core.secret_files import write_secret
from ..pods import takeover
from .credentials import Credentials
from .kafka import BrokerFailed, broker_jvm, free_ports, spawn_broker, stop_process
from .tls import make_tls


@dataclass
class Upgraded:
    home: Path
    bootstrap: str  # SASL_SSL (CLIENT)
    legacy_bootstrap: str | None  # PLAINTEXT (LEGACY), where the old clients dial
    ca_file: str
    proc: subprocess.Popen

    def connection(self, username: str, password: str, mechanism: str = "SCRAM-SHA-512") -> Connection:
        return Connection(self.bootstrap, "SASL_SSL", mechanism, username, password, self.ca_file)

    def stop(self, timeout: float = 60.0) -> None:
        stop_process(self.proc, timeout)


@dataclass(frozen=True)
class Prepared:
    """Everything the switch needs, made while the old broker still serves (the keys, the
    configuration): the switch itself is then one stop and one start."""

    home: Path
    props: Path
    bootstrap: str
    legacy_bootstrap: str | None
    ca_file: str
    settled: str = field(repr=False, default="")  # server.properties after finalize()


def prepare(home: Path, old_dir: Path, creds: Credentials, legacy_port: int | None) -> Prepared:
    old = takeover.read_log_dir(old_dir)
    home.mkdir(parents=True, exist_ok=True)
    client, internal, controller = free_ports(3)
    tls = make_tls(home / "tls")
    settings = BrokerSettings(
        node_id=old.node_id, nodes=(Node(old.node_id, "127.0.0.1", client, internal, controller),),
        log_dirs=str(old.path), keystore_pem=str(tls.ca_pem.parent / "broker-keystore.pem"),
        truststore_pem=str(tls.ca_pem), bind_host="127.0.0.1", group_initial_rebalance_delay_ms=0)
    secret = jaas_config(creds.admin, creds.principals)
    props = home / "server.properties"
    write_secret(props, to_server_properties(takeover.upgraded_config(settings, old, legacy_port) | secret))
    return Prepared(home, props, f"127.0.0.1:{client}",
                    f"127.0.0.1:{legacy_port}" if legacy_port else None, str(tls.ca_pem),
                    to_server_properties(takeover.settled_config(settings, old, legacy_port) | secret))


def start(p: Prepared, admin_password: str, timeout: float = 120.0,
          jmx: tuple[int, Path] | None = None) -> Upgraded:
    """Start this platform's broker on the old directory (the old broker must have stopped)
    and wait until it serves SASL_SSL. The admin logs in with PLAIN (static JAAS) until its
    SCRAM credential exists: `admin_scram()` creates it.
    jmx: (port, rules file) of the Prometheus JMX agent, as the platform's brokers run it."""
    jvm = broker_jvm(p.home, 768, jars.kafka_classpath())
    if jmx:
        jvm[1:1] = [f"-javaagent:{jars.jmx_exporter_agent()}=127.0.0.1:{jmx[0]}:{jmx[1]}"]
    proc = spawn_broker(p.home, jvm, p.props)
    up = Upgraded(p.home, p.bootstrap, p.legacy_bootstrap, p.ca_file, proc)
    _wait_ready(up, admin_password, timeout)
    return up


def restart_settled(p: Prepared, up: Upgraded, admin_password: str) -> Upgraded:
    """After finalize(): restart into the platform's own configuration (dynamic quorum, deny
    by default). Returns the running broker."""
    up.stop()
    write_secret(p.props, p.settled)
    return start(p, admin_password)


def _wait_ready(up: Upgraded, admin_password: str, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient

    conf = up.connection("admin", admin_password, "PLAIN").confluent() | {
        "socket.timeout.ms": 3000, "log_level": 0}
    admin = AdminClient(conf)  # kept: a dropped client cancels its own requests
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if up.proc.poll() is not None:
            log = up.home / "logs" / "server.log"
            raise BrokerFailed(f"the upgraded broker exited during start-up; log {log}:\n"
                               + (log.read_text()[-3000:] if log.exists() else ""))
        try:
            admin.describe_cluster(request_timeout=5).result(timeout=6)
            return
        except Exception as e:  # retried until the deadline
            last = str(e)
        time.sleep(0.3)
    raise BrokerFailed(f"the upgraded broker is not ready after {timeout:.0f}s ({last})")


def admin_scram(up: Upgraded, admin_password: str) -> None:
    """The admin's SCRAM-SHA-512 credential (the platform's clients log in with it); a
    taken-over cluster was formatted without one."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(up.connection("admin", admin_password, "PLAIN").confluent())
    upsert = UserScramCredentialUpsertion("admin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          admin_password.encode())
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(timeout=30)


def finalize(up: Upgraded, admin_password: str) -> str:
    """Raise every feature to this release's (kafka-features upgrade), as the admin; returns
    the upgrade's output and `describe` after it."""
    cfg = up.home / ".features.properties"
    conn = up.connection("admin", admin_password, "PLAIN")
    write_secret(cfg, to_server_properties({k: v for k, v in conn.java().items()
                                            if k != "bootstrap.servers"}))
    tool = [java(), *jit_flags(), "-cp", jars.kafka_classpath()]
    try:
        out = takeover.run_feature_command(tool, takeover.finalize_args(up.bootstrap, cfg))
        return out + takeover.run_feature_command(
            tool, ["--bootstrap-server", up.bootstrap, "--command-config", str(cfg), "describe"])
    finally:
        cfg.unlink(missing_ok=True)
