"""A dead letter pages, for real: broker -> dead-letter-monitor -> Prometheus -> Alertmanager ->
a PagerDuty Events API v2 endpoint on this machine.

The session broker with the registry applied (the monitor logs in as its own principal, with
only the ACLs topics.yaml derives), the monitor as `local up` runs it, Debian's Prometheus
with the project's generated rules (1 s scrape and evaluation) and Debian's Alertmanager with
the configuration production loads, its PagerDuty receiver pointed at an HTTP endpoint in this
test that checks and keeps what would page. The lag exporter is scraped too (the monitor's own
lag, the retained dead letters), so every panel of the dead-letter dashboard runs against it.
"""

from __future__ import annotations

import contextlib
import re
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from hanzo_stream.core import dead_letter as dl
from hanzo_stream.local import alertmanager, dead_letter_monitor, kafka_exporter, prometheus
from hanzo_stream.monitoring import RULES_DIR, RUNBOOK_BASE_URL, alerts, dashboards, pager_inbox
from hanzo_stream.monitoring.alertmanager import dedup_key
from hanzo_stream.registry.platform import LAG_EXPORTER
from tests.integration.conftest import apply_registry, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ROUTING_KEY = "0123456789abcdef0123456789abcdef"  # a test key; never in a file, log or config

# (source topic, stage, error class) -> how many; the principal that parks them.
LETTERS = {
    ("audit_log", "job:audit-archive", "schema.required"): ("audit-archiver", 2),
    ("events_plugin_ingestion", "producer:insights-capture", "json.malformed"): ("insights-capture", 3),
    ("no_such_topic", "producer:rogue", "Not A Class"): ("llm-gateway", 1),
}
# Source offsets no real record of the shared session cluster has: the job tests find their
# own dead letters by (partition, offset), and offsets 0 and 1 of audit_log are theirs.
FAKE_OFFSET = 10**15
COUNTED = {  # the labels the monitor gives them (bounded values)
    ("audit_log", "job:audit-archive", "schema.required"): 2,
    ("events_plugin_ingestion", "producer:insights-capture", "json.malformed"): 3,
    ("other", "producer:rogue", "invalid"): 1,
}


@dataclass
class Stack:
    home: Path
    monitor_url: str
    prometheus_url: str
    alertmanager_url: str
    inbox: pager_inbox.Inbox

    def counters(self) -> dict[tuple[str, str, str], float]:
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"{self.monitor_url}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == "hanzo_stream_dead_letters_total":
                    out[(s.labels["source_topic"], s.labels["stage"], s.labels["error_class"])] = s.value
                if s.name.startswith("hanzo_stream_dead_letter_monitor_"):
                    out[(s.name, s.labels.get("partition", ""), "")] = s.value
        return out

    def pages(self, **where: str) -> list[dict]:
        return [e for e in list(self.inbox.events)
                if all(e.get("payload", {}).get(k) == v for k, v in where.items())]


@pytest.fixture(scope="module")
def stack(hip_cluster, registry, tmp_path_factory) -> Iterator[Stack]:
    apply_registry(hip_cluster, registry)  # another module may have changed the cluster
    home = tmp_path_factory.mktemp("alerting")
    inbox = pager_inbox.Inbox()
    server = pager_inbox.make_server("127.0.0.1", 0, ROUTING_KEY, inbox.keep)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    inbox_url = f"http://127.0.0.1:{server.server_address[1]}{pager_inbox.PATH}"
    principal = registry.group(dead_letter_monitor.NAME).principal
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(server.shutdown)
        cleanup.callback(dead_letter_monitor.stop, home / "monitor")
        monitor = dead_letter_monitor.start(home / "monitor", hip_cluster.as_(principal),
                                            ROOT / "topics.yaml")
        cleanup.callback(kafka_exporter.stop, home / "exporter")
        exporter = kafka_exporter.start(home / "exporter", hip_cluster.as_(LAG_EXPORTER))
        cleanup.callback(alertmanager.stop, home / "alertmanager")
        am = alertmanager.start(home / "alertmanager", ROUTING_KEY, inbox_url, group_wait="1s",
                                group_interval="2s", repeat_interval="5s")
        cleanup.callback(prometheus.stop, home / "prometheus")
        prom = prometheus.start(
            home / "prometheus", [prometheus.ScrapeJob.from_urls(dead_letter_monitor.NAME, [monitor]),
                                  prometheus.ScrapeJob.from_urls(prometheus.EXPORTER_JOB, [exporter])],
            rules=[RULES_DIR / "recording.yaml", alerts.GENERATED_FILE], scrape_interval="1s",
            evaluation_interval="1s", alertmanagers=[am])
        print(f"\nalerting stack: monitor {monitor}, exporter {exporter}, prometheus {prom}, "
              f"alertmanager {am}, inbox {inbox_url}")
        yield Stack(home, monitor, prom, am, inbox)


def _end_offset(cluster) -> int:
    from confluent_kafka import Consumer

    c = Consumer(cluster.admin.confluent() | {"group.id": "test-dead-letter-end"})
    try:
        return c.get_watermark_offsets(TopicPartition(dl.TOPIC, 0), timeout=10)[1]
    finally:
        c.close()


def _caught_up(stack: Stack, cluster) -> dict | None:
    c = stack.counters()
    end = _end_offset(cluster)
    ready = (c.get(("hanzo_stream_dead_letter_monitor_assigned_partitions", "", "")) == 1
             and c.get(("hanzo_stream_dead_letter_monitor_offset", "0", "")) == end)
    return c if ready else None


def test_dead_letters_are_counted_by_source_topic_stage_and_error_class(stack: Stack, hip_cluster) -> None:
    """Each letter is written twice, as at-least-once writing does: a job's replayed batch
    writes its letter again with a new failed-at, a producer's resend the same bytes. Each
    failure counts once; the copies show as duplicates."""
    before = wait_for(lambda: _caught_up(stack, hip_cluster), 120, "the monitor assigned and caught up")
    now = datetime.now(UTC)
    failed_at, replayed_at = (t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
                              for t in (now, now + timedelta(seconds=30)))
    for (topic, stage, cls), (principal, n) in LETTERS.items():
        p = Producer(hip_cluster.as_(principal).confluent() | {"enable.idempotence": True})
        by_producer = stage.startswith("producer:")  # never reached Kafka: no partition, no offset
        for i in range(n):
            for at in (failed_at, failed_at if by_producer else replayed_at):
                r = dl.dead_letter_record(
                    topic, b'{"broken": %d}' % i, b"k", error_class=cls,
                    error_message="`x` is required; add it", schema="", stage=stage, failed_at=at,
                    partition=-1 if by_producer else 0, offset=-1 if by_producer else FAKE_OFFSET + i)
                p.produce(r.topic, key=r.key, value=r.value, headers=r.headers)
        assert p.flush(30) == 0
    after = wait_for(lambda: _caught_up(stack, hip_cluster), 60, "the monitor caught up again")
    grown = {k: after.get(k, 0) - before.get(k, 0) for k in COUNTED}
    assert grown == COUNTED
    assert all(after[k] == before.get(k, 0) for k in after
               if k not in COUNTED and not k[0].startswith("hanzo_stream_dead_letter_monitor_"))
    dup = ("hanzo_stream_dead_letter_monitor_duplicates_total", "", "")
    assert after[dup] - before.get(dup, 0) == sum(COUNTED.values())


def test_every_dead_letter_dashboard_panel_has_data_once_the_letters_are_counted(stack: Stack) -> None:
    """The committed dashboard's queries, as Grafana runs them (All, then filtered to each label set
    the test produced), against this Prometheus: a wrong name or label is an empty panel, a failure."""
    queries = dashboards.panel_queries([dashboards.DEAD_LETTER_DASHBOARD.file])
    assert len(queries) >= 10

    def empty(values: dict[str, str]) -> list[str]:
        return [f"{q.panel}: {dashboards.expand(q.expr, values)}" for q in queries
                if not prometheus.query(stack.prometheus_url, dashboards.expand(q.expr, values))]

    # All, then filtered to each set, as on-call narrows it down. Each set's series needs its own
    # scrapes (rate() two samples), so every view is waited for, not only the first.
    views = [{}, *(dict(zip(alerts.DEAD_LETTER_LABELS, key, strict=True)) for key in COUNTED)]

    def every_panel_has_data() -> bool:
        left = [f"{view or 'All'} {panel}" for view in views for panel in empty(view)]
        assert not left, "panels without data: " + "; ".join(left)  # wait_for reports the last
        return True

    wait_for(every_panel_has_data, 120, "data in every dead-letter dashboard panel", every=1)

    # The first panel: the exact window count the alerts page on, the letters just produced.
    window = next(q for q in queries if q.panel == dashboards.DL_IN_WINDOW.title)
    for view, n in zip(views[1:], COUNTED.values(), strict=True):
        got = prometheus.query(stack.prometheus_url, dashboards.expand(window.expr, view))
        assert float(got[0]["value"][1]) == n, (view, got)


def test_a_dead_letter_pages_with_topic_stage_and_class_and_a_stable_dedup_key(stack: Stack) -> None:
    labels = {"alertname": "DeadLettersCritical", "consumergroup": "dead-letter-monitor",
              "source_topic": "audit_log", "stage": "job:audit-archive", "error_class": "schema.required"}
    key = dedup_key(labels)
    summary = "2 dead letter(s) from audit_log at job:audit-archive: schema.required (in 10m, critical at 1)"

    def paged() -> list[dict]:
        pages = [e for e in stack.pages(summary=summary) if e.get("event_action") == "trigger"]
        return pages if len(pages) >= 2 else []  # the first page and a repeat

    pages = wait_for(paged, 180, "two pages for the audit_log dead letters")
    first = pages[0]
    assert first["routing_key_matches"] is True
    assert {e["dedup_key"] for e in pages} == {key}  # stable: one incident, computable from labels
    payload = first["payload"]
    assert payload["severity"] == "critical"
    assert (payload["component"], payload["group"], payload["class"]) == (
        "audit_log", "job:audit-archive", "schema.required")
    assert payload["source"] and first["client"] == "Hanzo Stream"
    # A link the pager opens: the repository's docs (local Prometheus, prometheus.linked_rules).
    assert payload["custom_details"]["runbook"] == RUNBOOK_BASE_URL + alerts.DEAD_LETTER_RUNBOOK

    # A flood below the topic's critical threshold warns, with its own incident.
    # (Other tests on the shared session broker dead-letter too, e.g. stage producer:fuzz:
    # each page is picked by its topic, stage and class.)
    warned = wait_for(lambda: [e for e in stack.pages(severity="warning", component="events_plugin_ingestion",
                                                      group="producer:insights-capture",
                                                      **{"class": "json.malformed"})
                               if e["event_action"] == "trigger"], 60, "the warning page")
    assert warned[0]["payload"]["summary"] == (
        "3 dead letter(s) from events_plugin_ingestion at producer:insights-capture: json.malformed "
        "(in 10m, warning at 1)")
    assert warned[0]["dedup_key"] == dedup_key(
        {"alertname": "DeadLettersWarning", "consumergroup": "dead-letter-monitor",
         "source_topic": "events_plugin_ingestion", "stage": "producer:insights-capture",
         "error_class": "json.malformed"}) != key
    # A source topic the registry does not know pages through the catch-all rule.
    assert wait_for(lambda: stack.pages(severity="warning", component="other"), 60, "the catch-all page")
    # The critical audit_log alert inhibits its own warning: no second page for it.
    assert not stack.pages(severity="warning", component="audit_log", group="job:audit-archive")


def test_the_routing_key_is_in_no_rendered_file_or_log(stack: Stack) -> None:
    key_file = stack.home / "alertmanager" / alertmanager.KEY_FILE
    assert key_file.read_text() == ROUTING_KEY and key_file.stat().st_mode & 0o077 == 0
    config = (stack.home / "alertmanager" / "alertmanager.yml").read_text()
    assert f"routing_key_file: {key_file}" in config
    files = [p for p in stack.home.rglob("*") if p.is_file() and p != key_file
             and p.suffix in (".yml", ".yaml", ".log", ".json", ".jsonl")]
    assert len(files) >= 5
    leaks = [str(p) for p in files if ROUTING_KEY in p.read_text(errors="replace")]
    assert not leaks
    assert not re.search(ROUTING_KEY, "".join(str(e) for e in stack.inbox.events))
