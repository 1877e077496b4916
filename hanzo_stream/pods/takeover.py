"""Taking over the standard's running cluster in place: Kafka 3.7 (KRaft) -> this platform's broker.

The standard's `insights-kafka` is one combined broker+controller on bitnami/kafka:3.7 with a
PLAINTEXT listener. The path chosen is an **in-place upgrade**: this platform's broker
(versions.KAFKA_VERSION) starts on the old broker's log directory, as the same node of the
same cluster. Why, against a replicated move (MirrorMaker 2 into a new cluster):

- every record stays at its offset and every group's committed offsets stay as they are
  (they live in `__consumer_offsets`, in the same directory): nothing to translate, nothing
  for a client to notice but a reconnect;
- the switch is one broker restart (seconds), not a cut-over of every client at once;
- no second copy of the data and no Connect cluster to run for the move.

Kafka supports it: a 4.x broker reads a KRaft log directory written by 3.3 or later, and
keeps the old metadata version until `finalize()` raises it. What changes at the switch:
the listeners become this platform's (SASL_SSL with TLS 1.3) plus `LEGACY`, the old
PLAINTEXT port, kept for the clients that still dial it; the StandardAuthorizer comes on
with `allow.everyone.if.no.acl.found=true`, so that until the registry is applied nothing
a client could do before is refused. Applying topics.yaml then creates the SCRAM users and
ACLs; from then on a topic or group with ACLs is closed to anonymous PLAINTEXT clients.
The controller quorum stays static (voters by configuration, as 3.7 formatted it) until
`finalize()` raises the release version, kraft.version included: the next restart runs
`settled_config()`, which is broker_config() itself.

docs/deploy.md, "Taking over insights-kafka", has the sequence; tests/integration/
test_takeover.py runs it against a real 3.7 broker with producers writing throughout.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from ..artifacts.versions import KAFKA_VERSION
from ..core.broker_config import BrokerSettings, broker_config

LEGACY = "LEGACY"  # the standard's PLAINTEXT listener, kept through the transition
MIN_FROM = (3, 3)  # the oldest KRaft release Kafka 4 upgrades from in place


class TakeoverRefused(RuntimeError):
    pass


@dataclass(frozen=True)
class LogDir:
    """What a broker's log directory says about itself (meta.properties)."""

    path: Path
    cluster_id: str
    node_id: int
    directory_id: str | None


def read_log_dir(path: Path) -> LogDir:
    """The old broker's identity, refused with the reason when it cannot be taken over."""
    meta = Path(path) / "meta.properties"
    if not meta.exists():
        raise TakeoverRefused(f"{meta} does not exist: {path} is not a Kafka log directory "
                              "(Bitnami's is /bitnami/kafka/data)")
    props = dict(line.split("=", 1) for line in meta.read_text().splitlines()
                 if "=" in line and not line.startswith("#"))
    if props.get("version") != "1" or "node.id" not in props:
        raise TakeoverRefused(f"{meta}: a ZooKeeper-mode broker (version={props.get('version')}); "
                              "migrate it to KRaft first (Kafka 3.9's ZooKeeper migration), then "
                              "take it over")
    return LogDir(Path(path), props["cluster.id"], int(props["node.id"]), props.get("directory.id"))


def broker_settings(settings: BrokerSettings, old: LogDir) -> BrokerSettings:
    """This platform's settings for the node the old directory belongs to."""
    if settings.node_id != old.node_id:
        raise TakeoverRefused(f"the old broker is node {old.node_id}, not {settings.node_id}: "
                              "a node keeps its id (its replicas are named by it)")
    return replace(settings, log_dirs=str(old.path))


def upgraded_config(settings: BrokerSettings, old: LogDir, legacy_port: int | None,
                    legacy_host: str | None = None) -> dict[str, str]:
    """broker_config() for the switch: the old node's id and directory, the static quorum 3.7
    formatted, the LEGACY PLAINTEXT listener while clients still dial it, and no refusal
    before the registry's ACLs exist."""
    s = broker_settings(settings, old)
    return with_legacy(switch_config(broker_config(s), s), s, legacy_port, legacy_host)


def switch_config(cfg: dict[str, str], s: BrokerSettings) -> dict[str, str]:
    """A node's broker_config() as it runs from the switch to finalize (locally and in the
    Kubernetes pod alike): the one-voter static quorum 3.7 formatted (its kraft.version 0 has no
    voter set in the log to bootstrap from), and no refusal before the registry is applied."""
    me = s.me
    out = {"controller.quorum.voters": f"{me.node_id}@{me.host}:{me.controller_port}",
           **{k: v for k, v in cfg.items() if k != "controller.quorum.bootstrap.servers"}}
    out["allow.everyone.if.no.acl.found"] = "true"
    return out


def settled_config(settings: BrokerSettings, old: LogDir, legacy_port: int | None,
                   legacy_host: str | None = None) -> dict[str, str]:
    """broker_config() itself once finalize() has run (its release version also raises
    kraft.version to 1: the quorum is dynamic, found through controller.quorum.bootstrap.servers
    like every platform node) and the registry is applied (deny by default), keeping LEGACY
    only while `legacy_port` is given. The restart into it is the first routine one."""
    s = broker_settings(settings, old)
    return with_legacy(broker_config(s), s, legacy_port, legacy_host)


def with_legacy(cfg: dict[str, str], s: BrokerSettings, port: int | None,
                host: str | None = None) -> dict[str, str]:
    """`cfg` with the LEGACY PLAINTEXT listener on `port` (none when 0 or None), advertised as
    `host` (default: the node's own address)."""
    cfg = dict(cfg)
    if port:
        cfg["listeners"] += f",{LEGACY}://{s.bind_host}:{port}"
        cfg["advertised.listeners"] += f",{LEGACY}://{host or s.me.host}:{port}"
        cfg["listener.security.protocol.map"] += f",{LEGACY}:PLAINTEXT"
    return cfg


def release(version: str = KAFKA_VERSION) -> str:
    """`4.4.0` -> `4.4`: what `kafka-features upgrade --release-version` takes."""
    return ".".join(version.split(".")[:2])


def finalize_args(bootstrap: str, command_config: Path) -> list[str]:
    """FeatureCommand arguments that raise metadata.version to this release's: the step after
    which the old broker can no longer read the directory (so: once the new one is proven)."""
    return ["--bootstrap-server", bootstrap, "--command-config", str(command_config),
            "upgrade", "--release-version", release()]


def run_feature_command(java_cmd: list[str], args: list[str]) -> str:
    proc = subprocess.run([*java_cmd, "org.apache.kafka.tools.FeatureCommand", *args],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise TakeoverRefused(f"kafka-features {' '.join(args[-3:])}: {(proc.stderr or proc.stdout)[-1500:]}")
    return proc.stdout
