"""The standard's running cluster as it is today: one Kafka 3.7 broker in KRaft combined mode,
configured as the bitnami/kafka:3.7 StatefulSet `insights-kafka` runs it (node 0, PLAINTEXT
for clients, a PLAINTEXT CONTROLLER listener, no authentication, no authorizer), with the
topics created by the standard's own kafka-topics.sh lines. Real jars from Maven Central
(versions.TAKEOVER_FROM_KAFKA), run with the JDK; the takeover test starts here.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from hanzo_stream.artifacts import jars
from hanzo_stream.artifacts.jvm import java, jit_flags
from hanzo_stream.local.kafka import free_ports, random_uuid, spawn_broker, stop_process

NODE_ID = 0  # bitnami: KAFKA_CFG_NODE_ID=0, the StatefulSet's only pod

LOG4J = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.MaxFileSize=20MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""

# The standard's topic table as kafka-topics.sh lines (RF 1 on the one broker).
TOPICS = {  # name -> (partitions, retention in days)
    "events_plugin_ingestion": (16, 7), "llm_usage": (8, 14), "billing_events": (4, 30),
    "audit_log": (4, 90), "agent_rpc_metering": (8, 7), "dead_letter": (1, 30),
}


def topic_lines(bootstrap: str) -> list[list[str]]:
    return [["--bootstrap-server", bootstrap, "--create", "--topic", name, "--partitions", str(parts),
             "--replication-factor", "1", "--config", f"retention.ms={days * 86_400_000}",
             "--config", "cleanup.policy=delete"] for name, (parts, days) in TOPICS.items()]


@dataclass
class LegacyBroker:
    home: Path
    port: int  # PLAINTEXT, what clients dial (9092 in the standard)
    controller_port: int
    proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data(self) -> Path:
        return self.home / "data"  # bitnami: /bitnami/kafka/data

    def jvm(self) -> list[str]:
        return [java(), *jit_flags(), "-Xms128m", "-Xmx512m", "-Djava.awt.headless=true",
                f"-Dlog4j.configuration=file:{self.home / 'log4j.properties'}",
                f"-Dkafka.logs.dir={self.home / 'logs'}",
                "-cp", str(jars.takeover_from_kafka_jars() / "*")]

    def tool(self, main: str, *args: str) -> str:
        proc = subprocess.run([*self.jvm(), main, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{main} {' '.join(args)}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        return proc.stdout

    def stop(self, timeout: float = 60.0) -> float:
        """A clean shutdown (SIGTERM, as Kubernetes stops the pod); returns how long it took."""
        began = time.monotonic()
        if self.proc:
            stop_process(self.proc, timeout)
        return time.monotonic() - began


def start(home: Path, timeout: float = 90.0) -> LegacyBroker:
    from confluent_kafka.admin import AdminClient

    home.mkdir(parents=True, exist_ok=True)
    (home / "logs").mkdir(exist_ok=True)
    port, controller = free_ports(2)
    b = LegacyBroker(home, port, controller)
    (home / "log4j.properties").write_text(LOG4J)
    props = home / "server.properties"
    props.write_text("\n".join([
        "process.roles=broker,controller", f"node.id={NODE_ID}",
        f"controller.quorum.voters={NODE_ID}@127.0.0.1:{controller}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={b.data}", "num.partitions=1", "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0", ""]))
    b.tool("kafka.tools.StorageTool", "format", "-t", random_uuid(), "-c", str(props))
    b.proc = spawn_broker(home, b.jvm(), props)
    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
    while True:
        try:
            admin.describe_cluster(request_timeout=5).result(timeout=6)
            return b
        except Exception:
            assert b.proc.poll() is None, (home / "logs" / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "Kafka 3.7 did not start"
            time.sleep(0.3)

