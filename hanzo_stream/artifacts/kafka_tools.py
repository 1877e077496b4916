"""Kafka's own command-line tools, logged in as the caller: `hanzo-stream kafka TOOL ARGS`.

The runbooks' commands are Kafka's tools (`kafka-consumer-groups.sh --describe ...`). A broker
pod has them under /opt/kafka/bin (kube/images.py writes those scripts from SCRIPTS); a laptop
with `local env`, or any shell with the HANZO_STREAM_* variables, has the platform's jars, so
`hanzo-stream kafka consumer-groups --describe --group billing-agg` runs the same class with
`--bootstrap-server` and a `--command-config` of the shell's login. That file is 0600 in a
private temporary directory and gone when the tool exits: the password is never on a command
line, and never in a file that outlives the command (`client_properties` writes one on purpose,
for tools that are not Kafka's).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..core.broker_config import to_server_properties
from ..core.connection import Connection
from ..core.secret_files import write_secret
from .jvm import java, jit_flags

# Each script of Kafka 4.4.0 that the broker image ships, the broker entrypoint, its join
# sidecar and the runbooks run, and the class it starts (a unit test finds every class in the
# jars).
SCRIPTS = {
    "kafka-server-start.sh": "kafka.Kafka",
    "kafka-storage.sh": "kafka.tools.StorageTool",
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs.sh": "org.apache.kafka.tools.ConfigCommand",
    "kafka-metadata-quorum.sh": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
    "kafka-consumer-groups.sh": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-console-producer.sh": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer.sh": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-reassign-partitions.sh": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-get-offsets.sh": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-log-dirs.sh": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-features.sh": "org.apache.kafka.tools.FeatureCommand",
    "kafka-dump-log.sh": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-broker-api-versions.sh": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-leader-election.sh": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-cluster.sh": "org.apache.kafka.tools.ClusterTool",
}
# What works on a broker's files, not as a client of a cluster (no login to give).
NOT_CLIENTS = {"kafka-server-start.sh", "kafka-storage.sh", "kafka-dump-log.sh", "kafka-cluster.sh"}
# Each client tool takes these two (Kafka 4.4: the console tools' old --consumer.config and
# --producer.config are deprecated names of --command-config).
BOOTSTRAP, CONFIG = "--bootstrap-server", "--command-config"
LOG_PATTERN = "[%d] %p %m (%c)%n"  # the local broker's (local/kafka.py LOG4J2)


def console_appender(name: str, target: str) -> str:
    return "".join(f"appender.{name}.{k} = {val}\n" for k, val in (
        ("type", "Console"), ("name", name), ("target", target),
        ("layout.type", "PatternLayout"), ("layout.pattern", LOG_PATTERN)))


def tools_log4j2() -> str:
    """The tools log warnings to stderr only: their stdout is what scripts parse."""
    return ("status = warn\n" + console_appender("stderr", "SYSTEM_ERR")
            + "rootLogger.level = WARN\nrootLogger.appenderRef.stderr.ref = stderr\n")


class UnknownTool(ValueError):
    pass


def tools() -> dict[str, str]:
    """`consumer-groups` -> its class: the client tools, by the names a script drops `kafka-` and
    `.sh` from."""
    return {s.removeprefix("kafka-").removesuffix(".sh"): c for s, c in SCRIPTS.items()
            if s not in NOT_CLIENTS}


def main_class(tool: str) -> str:
    known = tools()
    name = tool.removeprefix("kafka-").removesuffix(".sh")
    if name not in known:
        raise UnknownTool(f"no Kafka client tool {tool!r}: use one of {', '.join(sorted(known))}")
    return known[name]


def client_properties(conn: Connection) -> str:
    """The login of `conn` as a Java client's properties (what --command-config reads)."""
    return to_server_properties({k: v for k, v in conn.java().items() if k != "bootstrap.servers"})


def command(tool: str, args: Sequence[str], conn: Connection, config: Path, log_config: Path,
            classpath: str) -> list[str]:
    """The java command line: the caller's --bootstrap-server/--bootstrap-controller and
    --command-config win over ours, and go first (argparse tools want them before a subcommand)."""
    given = {a.split("=", 1)[0] for a in args}
    ours = [] if given & {BOOTSTRAP, "--bootstrap-controller"} else [BOOTSTRAP, conn.bootstrap]
    ours += [] if CONFIG in given else [CONFIG, str(config)]
    return [*_tool_line(tool, log_config, classpath), *ours, *args]


def _tool_line(tool: str, log_config: Path, classpath: str) -> list[str]:
    return [java(), *jit_flags(), "-Xmx512m", f"-Dlog4j2.configurationFile={log_config}",
            "-cp", classpath, main_class(tool)]


def run(tool: str, args: Sequence[str], conn: Connection | None) -> int:
    """Run the tool with the caller's terminal; its exit code. No connection: the tool's own
    help (`--help`), which needs no login."""
    from . import jars

    main_class(tool)  # an unknown tool fails before anything is fetched or written
    with tempfile.TemporaryDirectory(prefix="hanzo-stream-kafka-") as d:  # 0700
        config, log_config = Path(d, "client.properties"), Path(d, "log4j2.properties")
        log_config.write_text(tools_log4j2())
        if conn is None:
            return subprocess.call([*_tool_line(tool, log_config, jars.kafka_classpath()), "--help"])
        write_secret(config, client_properties(conn))
        return subprocess.call(command(tool, args, conn, config, log_config, jars.kafka_classpath()))
