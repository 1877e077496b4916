"""Brokers killed with SIGKILL while the client library produces: nothing acknowledged is
lost, nothing is duplicated, and nothing unacknowledged goes unreported.

Every event is counted by id (hanzo_stream/local/failover.py): the producer's delivery
report gives each one exactly one outcome, and the topic is read back to the end. The
producers are the project's EventProducer as llm-gateway, with the library's settings
(acks=all, idempotence, retries bounded by the 120 s delivery timeout; docs/client.md);
a shorter delivery timeout is set only where a test waits for failures on purpose.

The clusters are this module's own (a 1-node one and a 3-node one): the session broker
is never killed. What each test costs in time is printed with its figures.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from hanzo_stream.client.producer import DeliveryFailed, EventProducer
from hanzo_stream.local import failover, kafka
from hanzo_stream.local.failover import Ledger, Tally
from hanzo_stream.schemas.store import load

from .conftest import apply_registry, start_local

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SHORT = {"delivery.timeout.ms": 10000}  # only where a test waits for failures on purpose


@pytest.fixture(scope="module")
def schemas():
    return load(ROOT / "schemas")


def producer(cluster, registry, schemas, **overrides) -> EventProducer:
    return EventProducer.connect(cluster.as_("llm-gateway"), stage="llm-gateway",
                                 registry=registry, schemas=schemas, **overrides)


def home_of(cluster) -> Path:
    return cluster.home / "kafka"


def restart(cluster, node_ids: set[int]) -> None:
    kafka.start(home_of(cluster), cluster.creds, brokers=cluster.brokers, only=node_ids,
                timeout=180)


def tally(cluster, ledger: Ledger) -> Tally:
    return Tally.of(ledger, failover.ids_in_topic(cluster.admin, ledger))


@pytest.fixture(scope="module")
def lone(tmp_path_factory, registry):
    """A 1-node cluster of this module's own, with topics.yaml applied."""
    home = tmp_path_factory.mktemp("kafka1-failover")
    cluster = start_local(home, registry, brokers=1)
    try:
        apply_registry(cluster, registry)
        yield cluster
    finally:
        kafka.stop(home / "kafka")


def test_single_broker_kill9_under_100k_events(lone, registry, schemas):
    t0 = time.monotonic()
    steady, short = Ledger(), Ledger()
    teams = [f"team_{steady.run}_{i}" for i in range(64)]
    p = producer(lone, registry, schemas)  # the library's defaults
    impatient = producer(lone, registry, schemas, **SHORT)
    down: dict[str, float] = {}

    def bring_back():
        time.sleep(12)  # longer than `impatient`'s delivery timeout
        down["restart"] = time.monotonic()
        restart(lone, {1})
        down["up"] = time.monotonic()

    back = threading.Thread(target=bring_back, daemon=True)

    def between(i: int) -> None:
        if i == 30_000:
            kafka.kill(home_of(lone), 1)
            down["killed"] = time.monotonic()
            back.start()
            # An application whose delivery timeout the outage outlasts: told, not dropped.
            failover.send(impatient, short, teams, 300)

    failover.send(p, steady, teams, 100_000, rate=5000, between=between)
    back.join(240)
    assert "up" in down, "the broker did not come back"
    with pytest.raises(DeliveryFailed, match="Message timed out"):
        impatient.flush_or_raise()
    # The same producer objects carry on once the broker is back: no restart, no reset.
    after = Ledger(run=short.run)
    failover.send(impatient, after, teams, 300)
    impatient.flush()
    p.flush_or_raise()

    t = tally(lone, steady)
    print(f"\nsingle broker, {t.sent} events, kill -9 after 30000: acked {t.acked}, "
          f"failed {t.failed}, acknowledged lost {t.acked_lost}, duplicated {t.duplicated}; "
          f"down {down['up'] - down['killed']:.1f}s; test {time.monotonic() - t0:.0f}s")
    assert t.sent == 100_000
    assert (t.acked, t.failed, t.unreported, t.acked_lost, t.duplicated) == (100_000, 0, 0, 0, 0)

    gave_up = tally(lone, short)  # sent while the broker was down, timed out before it returned
    assert (gave_up.sent, gave_up.failed, gave_up.unreported) == (300, 300, 0)
    assert set(short.failed.values()) == {"Local: Message timed out"}
    assert gave_up.failed_present == 0  # never left the producer: not in the topic either
    recovered = tally(lone, after)
    assert (recovered.acked, recovered.unreported, recovered.duplicated) == (300, 0, 0)
    assert recovered.acked_lost == 0


# ---------------------------------------------------------------- three brokers


@pytest.fixture(scope="module")
def trio(kafka_cluster3, registry):
    apply_registry(kafka_cluster3, registry)
    return kafka_cluster3


def set_min_isr(cluster, value: str | None) -> None:
    """A dynamic min.insync.replicas on llm_usage (None: back to the broker's)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    op = AlterConfigOpType.SET if value else AlterConfigOpType.DELETE
    res = ConfigResource(ResourceType.TOPIC, failover.TOPIC, incremental_configs=[
        ConfigEntry("min.insync.replicas", value or "", incremental_operation=op)])
    admin = cluster.admin_client()
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=60)


def test_leader_kill_then_a_second_broker(trio, registry, schemas):
    t0 = time.monotonic()
    lead = failover.leaders(trio.admin)
    victim = lead[0]
    written = {p for p, b in lead.items() if b == victim}
    ledger = Ledger()
    teams = failover.team_keys(written, len(lead), f"team_{ledger.run}")
    p = producer(trio, registry, schemas)
    killed: dict[str, float] = {}

    def between(i: int) -> None:
        if i == 3000:
            kafka.kill(home_of(trio), victim)
            killed["at"] = time.monotonic()

    # 1. The leader of every partition being written dies mid-stream.
    failover.send(p, ledger, teams, 20_000, rate=1000, between=between)
    p.flush_or_raise()
    resume = ledger.resume_seconds(killed["at"])
    t = tally(trio, ledger)
    print(f"\n3 brokers, {t.sent} events to partitions {sorted(written)} led by broker {victim}, "
          f"kill -9 after 3000: acked {t.acked}, acknowledged lost {t.acked_lost}, duplicated "
          f"{t.duplicated}, acknowledgements resumed after {resume:.1f}s")
    assert (t.acked, t.failed, t.unreported, t.acked_lost, t.duplicated) == (20_000, 0, 0, 0, 0)
    assert resume is not None and resume < 30  # the target: a failover costs seconds

    # 2. One broker down, two in sync: a topic that demands three refuses acks=all writes
    # with NOT_ENOUGH_REPLICAS, and the application is told so.
    set_min_isr(trio, "3")
    try:
        refused = Ledger(run=ledger.run)
        q = producer(trio, registry, schemas, **SHORT)
        failover.send(q, refused, teams, 50)
        with pytest.raises(DeliveryFailed, match="Not enough in-sync replicas"):
            q.flush_or_raise()
        t2 = tally(trio, refused)
        assert (t2.acked, t2.failed, t2.unreported, t2.failed_present) == (0, 50, 0, 0)
    finally:
        set_min_isr(trio, None)

    # 3. A second broker dies. Three combined nodes have lost two controllers: the metadata
    # quorum is gone, so the leader cannot even shrink the ISR and nothing is acknowledged;
    # each event is reported failed when its delivery timeout ends.
    second = next(b for b in sorted(set(lead.values())) if b != victim)
    kafka.kill(home_of(trio), second)
    dark = Ledger(run=ledger.run)
    q = producer(trio, registry, schemas, **SHORT)
    failover.send(q, dark, teams, 50)
    with pytest.raises(DeliveryFailed):
        q.flush_or_raise()
    assert (len(dark.acked), len(dark.failed), len(dark.unreported)) == (0, 50, 0)

    # 4. One comes back: the quorum returns, writes are acknowledged again, nothing lost.
    restart(trio, {victim})
    resumed = Ledger(run=ledger.run)
    failover.send(p, resumed, teams, 2000)
    p.flush_or_raise()
    restart(trio, {second})  # the module's cluster is whole again for the next test
    whole = Ledger(run=ledger.run, sent=ledger.sent | resumed.sent,
                   acked=ledger.acked | resumed.acked)
    t4 = tally(trio, whole)
    maybe = {i: n for i, n in failover.ids_in_topic(trio.admin, dark).items() if i in dark.sent}
    print(f"after the second kill: {len(dark.failed)} reported failed ({sum(maybe.values())} of "
          f"them possibly persisted, in the topic once); after one broker came back: "
          f"{len(resumed.acked)} acked; overall acknowledged lost {t4.acked_lost}, duplicated "
          f"{t4.duplicated}; test {time.monotonic() - t0:.0f}s")
    assert (t4.acked, t4.acked_lost, t4.duplicated) == (22_000, 0, 0)
    assert all(n == 1 for n in maybe.values())  # a failed event is never in twice
