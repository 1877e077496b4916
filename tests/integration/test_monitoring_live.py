"""Monitoring proven live: a real KRaft broker with the JMX agent, the lag exporter and a
real Prometheus (Debian package) scraping both and evaluating the project's rule files.

Checks that the JMX rule names exist on a real broker, that every name the rules and
dashboards use is really scraped, that every dashboard panel returns data, that lag
rises and drains in Prometheus as a consumer stops and resumes, and that a dead letter
fires its alert. The stack is this module's own (the session broker has no JMX agent).
"""

from __future__ import annotations

import contextlib
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hanzo_stream.artifacts import jars
from hanzo_stream.core import dead_letter
from hanzo_stream.core.connection import ENV, Connection
from hanzo_stream.local import credentials, kafka, kafka_exporter, prometheus
from hanzo_stream.monitoring import JMX_RULES_FILE, dashboards, rule_files
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration

TOPIC = "monitoring_probe"
GROUP = "monitoring-probe"


@dataclass
class Stack:
    cluster: kafka.LocalCluster
    admin: Connection
    exporter_url: str
    prometheus_url: str
    home: Path

    def jmx_scrape(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.cluster.jmx_ports[0]}/metrics",
                                    timeout=10) as r:
            return r.read().decode()

    def exporter_scrape(self) -> str:
        with urllib.request.urlopen(f"{self.exporter_url}/metrics", timeout=10) as r:
            return r.read().decode()

    def query(self, promql: str) -> list[dict]:
        return prometheus.query(self.prometheus_url, promql)


def produce(conn: Connection, topic: str, count: int, size: int = 200) -> None:
    from confluent_kafka import Producer

    p = Producer(conn.confluent() | {"linger.ms": 5, "acks": "all"})
    for i in range(count):
        p.produce(topic, key=f"team-{i % 7}", value=b"x" * size)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0, "messages left unsent"


def consume_all(conn: Connection, group: str, topic: str, timeout: float = 60) -> int:
    """Join `group`, read to the end of `topic`, commit, leave. Returns messages read."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(conn.confluent() | {"group.id": group, "auto.offset.reset": "earliest",
                                     "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        read, deadline = 0, time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                if not m.error():
                    read += 1
            assignment = c.assignment()
            if assignment:
                ends = {tp.partition: c.get_watermark_offsets(tp, timeout=5)[1] for tp in assignment}
                pos = {tp.partition: tp.offset for tp in c.position(assignment)}
                if all(pos[p] >= end or (end == 0) for p, end in ends.items()) and all(
                        pos[p] >= 0 or ends[p] == 0 for p in ends):
                    break
        else:
            pytest.fail(f"{group} did not reach the end of {topic} in {timeout}s")
        c.commit(offsets=[TopicPartition(tp.topic, tp.partition, tp.offset)
                          for tp in c.position(c.assignment()) if tp.offset >= 0],
                 asynchronous=False)
        return read
    finally:
        c.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    from confluent_kafka.admin import AdminClient, NewTopic

    home = tmp_path_factory.mktemp("monitoring")
    creds = credentials.of_home(home)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(kafka.stop, home / "kafka")
        cluster = kafka.start(home / "kafka", creds, jmx_agent=(jars.jmx_exporter_agent(), JMX_RULES_FILE))
        admin = cluster.connection("admin", creds.admin)
        client = AdminClient(admin.confluent())  # must outlive its futures
        futures = client.create_topics([NewTopic(TOPIC, 3, 1), NewTopic(dead_letter.TOPIC, 1, 1)])
        for f in futures.values():
            f.result(30)
        produce(admin, TOPIC, 300)
        assert consume_all(admin, GROUP, TOPIC) == 300

        # The exporter runs as `admin` here; in production its principal needs DESCRIBE
        # on topics and groups (see docs/monitoring.md).
        cleanup.callback(kafka_exporter.stop, home / "exporter")
        exporter_url = kafka_exporter.start(home / "exporter", admin)
        cleanup.callback(prometheus.stop, home / "prometheus")
        prom_url = prometheus.start(home / "prometheus",
                                    prometheus.platform_jobs(cluster.jmx_ports, exporter_url),
                                    scrape_interval="1s", evaluation_interval="1s")
        print(f"\nmonitoring stack: prometheus {prom_url}, exporter {exporter_url}, "
              f"jmx {cluster.jmx_ports}, broker logs {cluster.log_files()}")
        yield Stack(cluster, admin, exporter_url, prom_url, home)


# ---------------------------------------------------------------- names on the real agent

def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        if m and not line.startswith("#"):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


def _value(samples, name: str, **labels: str) -> float | None:
    for n, lbl, v in samples:
        if n == name and all(lbl.get(k) == val for k, val in labels.items()):
            return v
    return None


def test_jmx_agent_serves_stable_names_on_a_real_broker(stack: Stack) -> None:
    s = _samples(stack.jmx_scrape())
    assert _value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) >= 300
    assert _value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) >= 300 * 200
    assert _value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) > 0
    assert _value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert _value(s, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert _value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert _value(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert _value(s, "kafka_log_logmanager_offlinelogdirectorycount") == 0
    assert _value(s, "kafka_cluster_partition_underreplicated", topic=TOPIC, partition="2") == 0
    assert _value(s, "kafka_network_requestmetrics_totaltimems", request="Produce",
                  quantile="0.99") is not None
    assert _value(s, "kafka_network_requestmetrics_requests_total", request="Produce") > 0
    # The all-topics bean is not exported: per-topic series sum without double counting.
    assert not [lbl for n, lbl, _ in s
                if n == "kafka_server_brokertopicmetrics_messagesin_total" and "topic" not in lbl]


def _referenced(prefixes: tuple[str, ...]) -> set[str]:
    """Metric names with these prefixes used by the rule files and the dashboards."""
    exprs = [q.expr for q in dashboards.panel_queries()]
    exprs += [f.read_text() for f in rule_files()]
    names = set()
    for e in exprs:
        names |= {m for m in re.findall(r"\b(kafka_[a-z_]+)", e) if m.startswith(prefixes)}
    return names


def test_every_exporter_name_the_rules_and_dashboards_use_is_really_served(stack: Stack) -> None:
    jmx = {n for n, _, _ in _samples(stack.jmx_scrape())}
    used_jmx = _referenced(("kafka_server_", "kafka_controller_", "kafka_log_", "kafka_network_",
                            "kafka_cluster_"))
    assert len(used_jmx) >= 10
    assert used_jmx <= jmx, f"not served by the JMX agent: {sorted(used_jmx - jmx)}"
    lag = {n for n, _, _ in _samples(stack.exporter_scrape())}
    used_lag = _referenced(("kafka_consumergroup_", "kafka_topic_"))
    assert used_lag <= lag, f"not served by the lag exporter: {sorted(used_lag - lag)}"


def test_the_exporter_reads_the_certificates_clients_meet(stack: Stack) -> None:
    """The broker's served certificate and the CA, as the certificate alerts see them: read
    from the real listener with a verified handshake, and from the CA file, in the future by
    the validity the local CA gives them (hanzo_stream/local/tls.py)."""
    from cryptography import x509

    samples = _samples(stack.exporter_scrape())
    served = {lbl["address"]: v for n, lbl, v in samples
              if n == "hanzo_stream_broker_certificate_expiry_timestamp_seconds"}
    brokers = {lbl["address"] for n, lbl, _ in samples if n == "kafka_broker_info"}
    assert brokers and set(served) == brokers, served
    ca = [v for n, _, v in samples if n == "hanzo_stream_ca_certificate_expiry_timestamp_seconds"]
    ca_file = x509.load_pem_x509_certificate(Path(stack.admin.ca_file).read_bytes())
    assert ca == [ca_file.not_valid_after_utc.timestamp()]
    for not_after in served.values():
        assert 390 * 86400 < not_after - time.time() < 398 * 86400  # 397 days, issued just now


# ---------------------------------------------------------------- Prometheus

def test_prometheus_scrapes_every_target_and_evaluates_every_rule(stack: Stack) -> None:
    def all_up():
        t = prometheus.targets(stack.prometheus_url)
        return t if t and all(x["health"] == "up" for x in t) else None

    jobs = {t["labels"]["job"] for t in wait_for(all_up, 60, "every target up")}
    assert jobs == {"kafka-broker", "kafka-exporter"}

    def evaluated():
        groups = prometheus.rule_groups(stack.prometheus_url)
        rules = [r for g in groups for r in g["rules"]]
        return groups if rules and all(r["health"] == "ok" for r in rules) else None

    names = {g["name"] for g in wait_for(evaluated, 30, "every rule evaluated without error")}
    assert {"hanzo-stream-standard-names", "hanzo-stream-kafka", "hanzo-stream-exporters",
            "hanzo-stream-consumer-lag", "hanzo-stream-dead-letters"} <= names


def test_standard_names_have_data(stack: Stack) -> None:
    for name in ("kafka_messages_in_per_sec", "kafka_bytes_in_per_sec",
                 "kafka_under_replicated_partitions", "kafka_consumer_group_lag"):
        wait_for(lambda n=name: stack.query(n), 60, f"{name} in Prometheus")
    lag = stack.query(f'kafka_consumer_group_lag{{consumergroup="{GROUP}", topic="{TOPIC}"}}')
    assert {r["metric"]["partition"] for r in lag} == {"0", "1", "2"}


def test_every_dashboard_panel_returns_data(stack: Stack) -> None:
    # The LLM dashboard needs llm-metrics' series: tests/integration/test_llm_metrics_live.py;
    # the dead-letter one the monitor's: tests/integration/test_dead_letter_alerting.py
    # Free space on the data volumes comes from kubelet volume stats or node_exporter
    # (monitoring/rules/recording.yaml), neither of which this stack runs; its expression is
    # checked by promtool (test_monitoring_dashboards) and its thresholds against the alerts'.
    queries = [q for q in dashboards.panel_queries([dashboards.OVERVIEW.file])
               if q.panel not in dashboards.FROM_NODE_METRICS]
    assert len(queries) >= 40
    missing = {}
    deadline = time.monotonic() + 90
    pending = list(queries)
    while pending and time.monotonic() < deadline:
        still = []
        for q in pending:
            if not stack.query(dashboards.expand(q.expr)):
                still.append(q)
        pending = still
        if pending:
            time.sleep(1)
    missing = {f"{q.panel}: {q.expr}" for q in pending}
    assert not missing, "panels without data:\n" + "\n".join(sorted(missing))
    # And filtered to one group/topic, as on-call uses them.
    one = {"group": GROUP, "topic": TOPIC}
    for q in queries:
        if "$group" in q.expr or "$topic" in q.expr:
            assert stack.query(dashboards.expand(q.expr, one)), f"{q.panel} empty for {one}"


def _group_lag(stack: Stack) -> float | None:
    r = stack.query(f'sum(kafka_consumer_group_lag{{consumergroup="{GROUP}"}})')
    return float(r[0]["value"][1]) if r else None


def test_lag_rises_while_the_consumer_is_stopped_and_drains_when_it_resumes(stack: Stack) -> None:
    wait_for(lambda: _group_lag(stack) == 0, 60, "the caught-up group at lag 0")
    produce(stack.admin, TOPIC, 1500)
    lag = wait_for(lambda: (v := _group_lag(stack)) is not None and v >= 1500 and v, 60,
                   "lag >= 1500 in Prometheus while nobody consumes")
    assert lag == 1500
    assert consume_all(stack.admin, GROUP, TOPIC) == 1500
    wait_for(lambda: _group_lag(stack) == 0, 60, "lag back to 0 after the consumer resumed")
    # The standard's per-partition series drained too, not only the sum.
    parts = stack.query(f'kafka_consumer_group_lag{{consumergroup="{GROUP}"}}')
    assert parts and all(float(r["value"][1]) == 0 for r in parts)


def test_a_dead_letter_fires_the_dead_letter_alert(stack: Stack) -> None:
    def firing():
        return [a for a in prometheus.alerts(stack.prometheus_url)
                if a["labels"]["alertname"] == "DeadLettersArriving" and a["state"] == "firing"]

    assert not firing(), "dead-letter alert firing before any dead letter"
    wait_for(lambda: stack.query(f'kafka_topic_partition_current_offset{{topic="{dead_letter.TOPIC}"}}'),
             30, "the dead-letter topic's offset in Prometheus")
    time.sleep(2)  # at least two samples at offset 0 before the arrival
    produce(stack.admin, dead_letter.TOPIC, 1)
    alerts = wait_for(firing, 60, "DeadLettersArriving firing")
    assert alerts[0]["labels"]["consumergroup"] == "dead-letter-monitor"
    assert alerts[0]["labels"]["severity"] == "warning"


def test_a_stopped_exporter_shows_as_down(stack: Stack) -> None:
    """What KafkaMetricsTargetDown alerts on: up == 0 for the exporter's target."""
    def exporter_up() -> list[dict]:
        return stack.query('up{job="kafka-exporter"}')

    assert float(wait_for(exporter_up, 30, "the exporter target")[0]["value"][1]) == 1
    assert kafka_exporter.stop(stack.home / "exporter")
    try:
        wait_for(lambda: [r for r in exporter_up() if float(r["value"][1]) == 0], 30,
                 'up{job="kafka-exporter"} == 0 after stopping it')
    finally:
        assert kafka_exporter.start(stack.home / "exporter", stack.admin) == stack.exporter_url
    wait_for(lambda: [r for r in exporter_up() if float(r["value"][1]) == 1], 30,
             "the restarted exporter scraped again on the same port")


# ---------------------------------------------------------------- runbook commands, for real

def run_runbook(stack: Stack, tmp_path: Path, doc: str, block_ids: list[str], **env: str) -> str:
    """Run the runbook's setup block then the given blocks in one bash, as admin; returns stdout."""
    import os

    from tests import docs_blocks

    (tmp_path / "tmp").mkdir(exist_ok=True)
    full_env = {**os.environ,
                "TMPDIR": str(tmp_path / "tmp"),  # where `hanzo-stream kafka` puts its login file
                "KCAT_CFG": str(tmp_path / "kcat.properties"),
                **{var: str(getattr(stack.admin, f)) for f, var in ENV.items()
                   if getattr(stack.admin, f) is not None},
                **env}
    return docs_blocks.run(f"docs/runbooks/{doc}", ["setup", *block_ids], full_env, cwd=tmp_path,
                           timeout=180).stdout


def test_consumer_lag_runbook_describe_and_replay_a_window(stack: Stack, tmp_path: Path) -> None:
    wait_for(lambda: _group_lag(stack) == 0, 60, "a caught-up group before the runbook")
    out = run_runbook(stack, tmp_path, "consumer-lag.md", ["describe"], GROUP=GROUP, TOPIC=TOPIC)
    rows = [line.split() for line in out.splitlines() if line.startswith(GROUP)]
    described = {r[2]: r for r in rows if r[1] == TOPIC}
    assert set(described) == {"0", "1", "2"}, out
    assert all(r[5] == "0" for r in described.values()), f"LAG column not 0:\n{out}"
    assert list((tmp_path / "tmp").glob("hanzo-stream-kafka-*")) == []  # the login went with the tool

    total = sum(int(r[4]) for r in described.values())  # LOG-END-OFFSET
    dry = run_runbook(stack, tmp_path, "consumer-lag.md", ["reset-dry-run"], GROUP=GROUP, TOPIC=TOPIC,
                      FROM="2020-01-01T00:00:00.000")
    assert wait_for(lambda: _group_lag(stack) == 0, 10, "a dry run changing nothing")
    assert {line.split()[2]: line.split()[3] for line in dry.splitlines()
            if line.startswith(GROUP)} == {"0": "0", "1": "0", "2": "0"}, dry

    run_runbook(stack, tmp_path, "consumer-lag.md", ["reset-execute"], GROUP=GROUP, TOPIC=TOPIC,
                FROM="2020-01-01T00:00:00.000")
    wait_for(lambda: _group_lag(stack) == total, 60, f"lag == {total} after the reset (replay window)")
    assert consume_all(stack.admin, GROUP, TOPIC) == total
    wait_for(lambda: _group_lag(stack) == 0, 60, "lag drained after replaying")


def test_dead_letter_runbook_inspect(stack: Stack, tmp_path: Path) -> None:
    """The runbook's inspection commands; its replay is `hanzo-stream dead-letters replay`
    (tests/integration/test_dead_letter_replay.py, against the registry's ACLs)."""
    from confluent_kafka import Producer

    from hanzo_stream.core.dead_letter import H_ERROR_CLASS, H_ORIGINAL_KEY, H_SOURCE_TOPIC

    p = Producer(stack.admin.confluent())
    first_and_end = []
    for i, (source, error) in enumerate([(TOPIC, "schema.required"), ("other_topic", "json.malformed")]):
        p.produce(dead_letter.TOPIC, key=source.encode(), value=f'{{"bad": {i}}}'.encode(),
                  headers=[(H_SOURCE_TOPIC, source.encode()), (H_ERROR_CLASS, error.encode()),
                           (H_ORIGINAL_KEY, f"team-{i}".encode())],
                  on_delivery=lambda err, m: first_and_end.append(m.offset()))
    assert p.flush(30) == 0
    first = min(first_and_end)

    out = run_runbook(stack, tmp_path, "dead-letters.md", ["inspect"])
    assert f"{H_SOURCE_TOPIC}={TOPIC}" in out and f"{H_ERROR_CLASS}=schema.required" in out
    assert re.search(rf"\b1\s+{H_SOURCE_TOPIC}={TOPIC}\s+{H_ERROR_CLASS}=schema.required", out), out
    one = run_runbook(stack, tmp_path, "dead-letters.md", ["show-one"], OFFSET=str(first))
    assert '{"bad": 0}' in one


def test_status_snapshot_for_local_status(stack: Stack) -> None:
    from hanzo_stream.monitoring import status

    # one from the alert test, two from the runbook test: in Prometheus a scrape or two later
    snap = wait_for(lambda: ((s := status.read(stack.prometheus_url)).dead_letters or 0) >= 3 and s, 30,
                    "a status snapshot with the dead letters")
    assert snap.lag.get(GROUP) == 0
    assert TOPIC in snap.messages_in_per_sec
    assert snap.under_replicated == 0 and snap.active_controllers == 1
    assert "DeadLettersArriving dead-letter-monitor" in snap.firing
    assert set(snap.as_dict()) >= {"lag", "messages_in_per_sec", "dead_letters", "firing"}
