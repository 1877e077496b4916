"""Taking over the standard's running insights-kafka in place (hanzo_stream/pods/takeover.py).

A real Kafka 3.7 broker configured as the standard runs it (tests/integration/legacy_kafka.py)
gets the standard's topics from its own kafka-topics.sh lines, events of every type in every
codec, and consumer groups at known committed offsets. Producers keep writing (acks=all,
idempotent, the standard's defaults) while it stops and this platform's broker starts on its
log directory. Afterwards: every record is there byte for byte at its offset, every
acknowledged write of the switch too, every group's offsets are where they were; then the
registry is applied (SCRAM users, ACLs), the platform's clients work over SASL_SSL, anonymous
PLAINTEXT clients are refused where ACLs now exist, and the metadata version is raised.
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from hanzo_stream.local import credentials
from hanzo_stream.local import takeover as local_takeover
from hanzo_stream.local.kafka import free_ports
from hanzo_stream.monitoring import JMX_RULES_FILE
from hanzo_stream.pods import takeover
from tests.integration import legacy_kafka
from tests.integration.conftest import Cluster, apply_registry, wait_for, wait_until_logged_in
from tests.integration.takeover_data import (
    GROUPS,
    LIVE_TOPIC,
    LiveProducer,
    anonymous_write,
    committed,
    examples,
    read_everything,
    seed,
    with_legacy_window,
)

pytestmark = pytest.mark.integration


def test_insights_kafka_is_taken_over_in_place_without_losing_an_event(tmp_path, registry):
    old = legacy_kafka.start(tmp_path / "insights-kafka")
    plain = {"bootstrap.servers": old.bootstrap, "log_level": 0}
    try:
        for line in legacy_kafka.topic_lines(old.bootstrap):
            old.tool("org.apache.kafka.tools.TopicCommand", *line)
        events = examples(registry)
        groups_before = seed(plain, registry)
        topics = list(legacy_kafka.TOPICS)
        meta = AdminClient(plain).list_topics(timeout=30).topics
        before = read_everything(plain, topics)

        creds = credentials.of_home(tmp_path / "platform", registry.principal_names())
        prepared = local_takeover.prepare(tmp_path / "platform", old.data, creds, legacy_port=old.port)
        live = LiveProducer(old.bootstrap)
        live.thread.start()
        time.sleep(3)  # writing before the switch
        acked_before_switch = len(live.acked)
        switch_began = time.monotonic()
        stop_s = old.stop()
        jmx_port = free_ports(1)[0]
        up = local_takeover.start(prepared, creds.admin, jmx=(jmx_port, JMX_RULES_FILE))
    except BaseException:
        old.stop()
        raise
    try:
        ready_s = time.monotonic() - switch_began
        ready_at = time.monotonic()
        deadline = ready_at + 90
        while live.last_ack < ready_at and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3)  # writing after the switch

        # The platform's credentials, with the transition window open for the producer that
        # still dials PLAINTEXT: it keeps writing through the apply.
        local_takeover.admin_scram(up, creds.admin)
        cluster = Cluster(up.bootstrap, up.ca_file, creds)
        apply_registry(cluster, with_legacy_window(registry, tmp_path, ["llm-gateway"]))
        applied_at = time.monotonic()
        time.sleep(3)
        # What KafkaLegacyPlaintextInUse reads: the anonymous producer, named by its library.
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{jmx_port}/metrics", timeout=10).read().decode()
        legacy = [line for line in scrape.splitlines()
                  if line.startswith("kafka_server_socket_server_metrics_connections{")
                  and 'listener="LEGACY"' in line and 'client_software_name="confluent-kafka-python"' in line]
        assert sum(float(line.rsplit(" ", 1)[1]) for line in legacy) >= 1, legacy
        assert live.stop() == 0, "records still unacknowledged after the switch"
        times = sorted(live.ack_times)
        gap = max(b - a for a, b in zip(times, times[1:], strict=False))
        print(f"\ntakeover: {len(before)} records, {len(groups_before)} groups; live producer "
              f"{len(live.acked)} acknowledged ({acked_before_switch} before the switch), "
              f"{len(live.errors)} errors; old broker stopped in {stop_s:.1f}s, new one ready "
              f"{ready_s:.1f}s after the stop began; longest time without an acknowledgement "
              f"{gap:.1f}s")
        assert live.errors == []
        assert live.last_ack > applied_at, "the anonymous producer stopped at the registry's ACLs"

        admin_plain = up.connection("admin", creds.admin, "PLAIN").confluent() | {"log_level": 0}
        after = read_everything(admin_plain, topics)
        missing = [k for k in before if k not in after]
        changed = [k for k in before if k in after and after[k] != before[k]]
        assert not missing and not changed, (missing[:5], changed[:5])
        live_after = {(p, o): after.get((LIVE_TOPIC, p, o)) for p, o, _ in live.acked}
        lost = [(p, o) for p, o, v in live.acked if (live_after[(p, o)] or (None, None))[1] != v]
        assert not lost, f"{len(lost)} acknowledged writes are not at their offsets: {lost[:5]}"
        for g, topic in GROUPS.items():
            assert committed(admin_plain, g, topic, len(meta[topic].partitions)) == groups_before[g], g

        # The platform's own clients over SASL_SSL; a group resumes where it was.
        wait_until_logged_in([cluster.as_("llm-gateway"), cluster.as_("billing-aggregator")])
        p = Producer(cluster.as_("llm-gateway").confluent() | {"log_level": 0})
        p.produce("llm_usage", events[0][2], key=b"team_abc123")
        assert p.flush(30) == 0
        del p
        c = Consumer(cluster.as_("billing-aggregator").confluent()
                     | {"group.id": "billing-agg", "enable.auto.commit": False, "log_level": 0})
        try:
            part = max(groups_before["billing-agg"], key=lambda q: groups_before["billing-agg"][q])
            c.assign([TopicPartition("llm_usage", part, groups_before["billing-agg"][part])])
            m = None
            for _ in range(60):
                m = c.poll(1)
                if m is not None and not m.error():
                    break
            assert m is not None and not m.error() and m.offset() == groups_before["billing-agg"][part]
            assert m.value() == after[("llm_usage", part, m.offset())][1]
        finally:
            c.close()
        # Anonymous clients may do only what the window lists, and nothing once it closes.
        assert anonymous_write(up.legacy_bootstrap, "audit_log") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert anonymous_write(up.legacy_bootstrap, "llm_usage") is None
        apply_registry(cluster, registry)  # the window closed: its ACLs go
        assert anonymous_write(up.legacy_bootstrap, "llm_usage") == KafkaError.TOPIC_AUTHORIZATION_FAILED

        features = local_takeover.finalize(up, creds.admin)
        finalized = {line.split()[1]: line.split("FinalizedVersionLevel:")[1].split()[0]
                     for line in features.splitlines() if line.startswith("Feature:")}
        assert finalized["metadata.version"].startswith(takeover.release() + "-"), features
        assert finalized["kraft.version"] == "1", features  # the quorum is dynamic from here

        # The first routine restart: the platform's own broker_config(), dynamic quorum.
        up = local_takeover.restart_settled(prepared, up, creds.admin)
        again = wait_for(lambda: read_everything(admin_plain | {"bootstrap.servers": up.bootstrap}, topics),
                         90, "every partition to be led again after the restart")
        assert all(again[k] == v for k, v in after.items()), "a record changed in the restart"
        assert len(again) == len(after) + 2  # + the SCRAM write and the anonymous one after `after`
        assert committed(cluster.admin.confluent(), "audit-archive", "audit_log",
                         len(meta["audit_log"].partitions)) == groups_before["audit-archive"]
    finally:
        up.stop()
    with pytest.raises(KafkaException):  # nothing listens any more: the test leaves no broker
        AdminClient(plain | {"socket.timeout.ms": 2000}).list_topics(timeout=3)
