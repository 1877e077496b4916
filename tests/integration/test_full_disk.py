"""A broker's log disk fills while producers write (issue 24, item 8): nothing acknowledged is
lost, the outage shows in the project's alerts, and the broker rejoins once space is back.

The cluster is this module's own: three brokers with the JMX agent, a real Prometheus
evaluating the project's rule files, and node 3's data directory (its partitions and the
metadata log, one directory as in Kubernetes) on a 64 MiB tmpfs that the test fills to the
last byte mid-run. Kafka stops a broker whose every log directory failed; RF 3 with min ISR 2
keeps acks=all producers writing to the other two. "Space back" is the filler removed, as
growing the volume would, then the broker restarted, as the KafkaOfflineLogDirectory runbook
says. Needs root (mount), as the Kubernetes tests do.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
import time
from pathlib import Path

import pytest

from hanzo_stream.artifacts import jars
from hanzo_stream.client.producer import EventProducer
from hanzo_stream.local import credentials, failover, kafka, prometheus
from hanzo_stream.local.failover import Ledger, Tally
from hanzo_stream.monitoring import JMX_RULES_FILE
from hanzo_stream.schemas.store import load

from .conftest import Cluster, apply_registry, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
VICTIM = 3
DISK_MIB = 64


def fill(directory: Path) -> int:
    """Write a file into `directory` until the filesystem refuses; returns bytes written."""
    chunk, written = b"\0" * (1 << 20), 0
    with open(directory / "filler", "wb", buffering=0) as f:
        for _ in range(DISK_MIB + 1):  # bounded: the disk is DISK_MIB MiB
            try:
                written += f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
    return written


@pytest.fixture(scope="module")
def crowded(tmp_path_factory, registry):
    home = tmp_path_factory.mktemp("full-disk")
    data = home / "kafka" / f"node-{VICTIM}" / "data"
    data.mkdir(parents=True)
    with contextlib.ExitStack() as cleanup:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m,mode=0700",
                        "hanzo-full-disk", str(data)], check=True)
        cleanup.callback(subprocess.run, ["umount", "-l", str(data)], check=False)
        cleanup.callback(kafka.stop, home / "kafka")
        creds = credentials.of_home(home, registry.principal_names())
        local = kafka.start(home / "kafka", creds, brokers=3,
                            jmx_agent=(jars.jmx_exporter_agent(), JMX_RULES_FILE), timeout=180)
        cluster = Cluster(local.bootstrap, local.ca_file, creds, 3, home, local)
        apply_registry(cluster, registry)
        cleanup.callback(prometheus.stop, home / "prometheus")
        url = prometheus.start(home / "prometheus", prometheus.platform_jobs(local.jmx_ports, None),
                               scrape_interval="1s", evaluation_interval="1s")
        print(f"\nfull-disk cluster {local.bootstrap}, node {VICTIM} data on a {DISK_MIB} MiB "
              f"tmpfs; prometheus {url}; logs {local.log_files()}")
        yield cluster, data, url


def alerting(url: str, name: str) -> str | None:
    """The alert's state ('pending' until its `for:` has passed, then 'firing'), or None."""
    found = prometheus.query(url, f'ALERTS{{alertname="{name}"}}')
    return found[0]["metric"]["alertstate"] if found else None


def test_a_broker_whose_log_disk_fills_loses_nothing_and_alerts(crowded, registry):
    cluster, data, url = crowded
    home = cluster.home / "kafka"
    schemas = load(ROOT / "schemas")
    ledger = Ledger()
    partitions = failover.leaders(cluster.admin)
    teams = failover.team_keys(set(partitions), len(partitions), f"team_{ledger.run}")
    p = EventProducer.connect(cluster.as_("llm-gateway"), stage="llm-gateway",
                              registry=registry, schemas=schemas)
    full: dict[str, float] = {}

    def between(i: int) -> None:
        if i == 2000:
            full["bytes"] = fill(data)
            full["at"] = time.monotonic()
        if "at" in full and "halted" not in full and VICTIM not in kafka.running(home):
            full["halted"] = time.monotonic() - full["at"]

    started = time.monotonic()
    failover.send(p, ledger, teams, 20_000, rate=1000, between=between)
    p.flush_or_raise()
    sent_for = time.monotonic() - started
    wait_for(lambda: VICTIM not in kafka.running(home) or None, 60,
             f"node {VICTIM} to stop on its full disk")
    log = (cluster.local.node_dir(VICTIM) / "logs" / "server.log").read_text(errors="replace")
    assert "No space left on device" in log, "the broker stopped for another reason"

    # The outage as on-call sees it: the survivors report under-replicated partitions and the
    # halted broker's scrape target is down. Each alert's `for:` is proven by promtool
    # (monitoring/tests); here its expression must hold on the real brokers' metrics.
    urp = wait_for(lambda: alerting(url, "KafkaUnderReplicatedPartitions"), 60,
                   "KafkaUnderReplicatedPartitions pending")
    down = wait_for(lambda: alerting(url, "KafkaMetricsTargetDown"), 60,
                    "KafkaMetricsTargetDown pending")

    (data / "filler").unlink()
    back_at = time.monotonic()
    kafka.start(home, cluster.creds, only={VICTIM}, timeout=180)

    def in_sync() -> bool:
        parts = cluster.admin_client().list_topics(failover.TOPIC, timeout=30).topics[
            failover.TOPIC].partitions
        return all(len(m.isrs) == 3 for m in parts.values())

    wait_for(lambda: in_sync() or None, 180, f"node {VICTIM} back in every ISR")
    rejoined = time.monotonic() - back_at
    wait_for(lambda: alerting(url, "KafkaUnderReplicatedPartitions") is None or None, 60,
             "KafkaUnderReplicatedPartitions to clear")
    t = Tally.of(ledger, failover.ids_in_topic(cluster.admin, ledger))
    print(f"\nnode {VICTIM}'s {DISK_MIB} MiB log disk filled ({full['bytes'] >> 20} MiB filler) "
          f"after 2,000 of 20,000 events; it stopped {full.get('halted', float('nan')):.1f}s "
          f"later; sent {t.sent} in {sent_for:.1f}s, acked {t.acked}, failed {t.failed}, "
          f"acknowledged lost {t.acked_lost}, in the topic twice {t.duplicated}, sent again by "
          f"the library after a broker's write error {p.counts.resent}; alerts "
          f"KafkaUnderReplicatedPartitions {urp}, KafkaMetricsTargetDown {down}; back in "
          f"every ISR {rejoined:.1f}s after the restart")
    assert (t.acked, t.failed, t.unreported, t.acked_lost) == (20_000, 0, 0, 0)
