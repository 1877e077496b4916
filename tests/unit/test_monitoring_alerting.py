"""Alert routing and the dead-letter monitor without a broker: the Alertmanager configuration
(checked by amtool), its dedup keys, the PagerDuty endpoint's checks, bounded labels, and the
secrets of the local object store and Alertmanager kept out of files, argv and logs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hanzo_stream.core import dead_letter as dl
from hanzo_stream.local import credentials, object_store, prometheus
from hanzo_stream.monitoring import alertmanager, pager_inbox
from hanzo_stream.monitoring.dead_letter_monitor import Labels, Monitor

KEY = "0123456789abcdef0123456789abcdef"


def amtool(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("amtool")
    assert exe, "amtool missing: run .ci/install-monitoring.sh (Debian package prometheus-alertmanager)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    f = tmp_path / "alertmanager.yml"
    f.write_text(alertmanager.render(str(tmp_path / "key"), "http://127.0.0.1:1/v2/enqueue"))
    return f


def test_the_routing_is_a_config_alertmanager_accepts_without_the_key(config_file: Path) -> None:
    res = amtool("check-config", str(config_file))
    assert res.returncode == 0, res.stdout + res.stderr
    cfg = yaml.safe_load(config_file.read_text())
    (pd,) = cfg["receivers"][0]["pagerduty_configs"]
    assert pd["routing_key_file"].endswith("/key") and "routing_key" not in pd
    assert pd["send_resolved"] is True and "CommonAnnotations.summary" in pd["description"]
    assert "error_class" in pd["class"] and "source_topic" in pd["component"]


@pytest.mark.parametrize("labels", [
    {"alertname": "DeadLettersCritical", "severity": "critical", "source_topic": "audit_log"},
    {"alertname": "ConsumerLagWarning", "severity": "warning", "consumergroup": "billing-agg"},
    {"alertname": "KafkaOfflinePartitions", "severity": "critical"},
])
def test_every_alert_routes_to_pagerduty(config_file: Path, labels: dict) -> None:
    res = amtool("config", "routes", "test", f"--config.file={config_file}",
                 *(f"{k}={v}" for k, v in labels.items()))
    assert res.returncode == 0 and res.stdout.strip() == alertmanager.RECEIVER, res.stdout + res.stderr


def test_dedup_key_is_alertmanagers_group_key_hash() -> None:
    import hashlib

    labels = {"alertname": "DeadLettersCritical", "severity": "critical", "instance": "x:1",
              "source_topic": "audit_log", "stage": "job:audit-archive", "error_class": "schema.required",
              "consumergroup": "dead-letter-monitor"}
    group_key = ('{}:{alertname="DeadLettersCritical", consumergroup="dead-letter-monitor", '
                 'error_class="schema.required", source_topic="audit_log", stage="job:audit-archive"}')
    assert alertmanager.dedup_key(labels) == hashlib.sha256(group_key.encode()).hexdigest()
    # Labels outside group_by (severity, instance, a changing value) do not move the incident.
    assert alertmanager.dedup_key(labels | {"instance": "y:2"}) == alertmanager.dedup_key(labels)
    assert alertmanager.dedup_key(labels | {"stage": "producer:x"}) != alertmanager.dedup_key(labels)


def test_the_pagerduty_endpoint_checks_like_pagerduty_and_keeps_no_key() -> None:
    good = {"routing_key": KEY, "event_action": "trigger", "dedup_key": "d",
            "payload": {"summary": "s", "source": "am", "severity": "critical"}}
    assert pager_inbox.check(good, KEY) == []
    assert pager_inbox.check(good | {"routing_key": "x" * 32}, KEY) == ["'routing_key' is invalid"]
    assert pager_inbox.check(good | {"payload": {"summary": " ", "source": "am", "severity": "page"}},
                             KEY) == ["'payload.summary' is missing or blank",
                                      "'payload.severity' must be one of critical, error, info, warning"]
    assert pager_inbox.check({"routing_key": KEY, "event_action": "resolve"}, KEY) == [
        "'dedup_key' is required to acknowledge or resolve"]
    kept = pager_inbox.redacted(good, KEY)
    assert "routing_key" not in kept and kept["routing_key_matches"] is True


def test_dead_letter_labels_are_bounded(registry) -> None:
    labels = Labels((t.name for t in registry.topics), max_series=3)

    def headers(topic: str, stage: str, cls: str) -> dict[str, bytes]:
        return {dl.H_SOURCE_TOPIC: topic.encode(), dl.H_STAGE: stage.encode(),
                dl.H_ERROR_CLASS: cls.encode()}

    assert labels.of(headers("audit_log", "job:audit-archive", "schema.required")) == (
        "audit_log", "job:audit-archive", "schema.required")
    assert labels.of(headers("made_up", "producer:svc", "json.malformed")) == (
        "other", "producer:svc", "json.malformed")
    assert labels.of({}) == ("unknown", "invalid", "invalid")  # headers missing (hand-written record)
    assert labels.of(headers("audit_log", "producer:" + "x" * 80, "Bad Class")) == ("other",) * 3  # 4th set
    assert labels.of(headers("audit_log", "job:audit-archive", "schema.required"))[0] == "audit_log"


def test_monitor_exposes_counters_without_created_series(registry) -> None:
    from prometheus_client import generate_latest

    m = Monitor(None, registry)  # type: ignore[arg-type]  (the consumer is only built by run())
    m.dead_letters.labels("audit_log", "job:audit-archive", "schema.required").inc(2)
    text = generate_latest(m.metrics).decode()
    assert ('hanzo_stream_dead_letters_total{error_class="schema.required",source_topic="audit_log",'
            'stage="job:audit-archive"} 2.0') in text
    assert "_created" not in text and "process_resident_memory_bytes" in text


def test_prometheus_config_alerts_to_alertmanager_and_scrapes_extra_jobs(tmp_path: Path) -> None:
    from hanzo_stream.monitoring import rule_files

    jobs = prometheus.platform_jobs([7071], None, [prometheus.ScrapeJob.from_urls(
        "dead-letter-monitor", ["http://127.0.0.1:9309"])])
    text = prometheus.render_config(jobs, rule_files(), "2s", "1s", ["http://127.0.0.1:9093"])
    cfg = yaml.safe_load(text)
    assert cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]
    assert {c["job_name"] for c in cfg["scrape_configs"]} == {"kafka-broker", "dead-letter-monitor"}
    (tmp_path / "p.yml").write_text(text)
    res = subprocess.run([shutil.which("promtool") or "promtool", "check", "config", str(tmp_path / "p.yml")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_service_secrets_are_generated_once_and_kept_0600(tmp_path: Path) -> None:
    f = tmp_path / "credentials.json"
    first = credentials.load_or_create(f, ["a"])
    assert len(first.service(credentials.PAGERDUTY_ROUTING_KEY)) == 32
    assert len(first.service(credentials.S3_ACCESS_KEY)) == 20
    assert credentials.load_or_create(f, ["a", "b"]).services == first.services
    assert f.stat().st_mode & 0o777 == 0o600


def test_object_store_keys_go_to_stdin_not_argv(tmp_path: Path, monkeypatch) -> None:
    from hanzo_stream.local.daemon import Daemon

    creds = credentials.of_home(tmp_path)
    seen = {}

    def spawn(self, argv, env=None, stdin=None):
        seen.update(argv=argv, stdin=stdin)
        raise RuntimeError("stop here")

    monkeypatch.setattr(Daemon, "spawn", spawn)
    monkeypatch.setattr(object_store.jars, "s3proxy_jar", lambda: Path("/s3proxy.jar"))
    with pytest.raises(RuntimeError, match="stop here"):
        object_store.start(tmp_path / "object-store", creds)
    secret = creds.service(credentials.S3_SECRET_KEY)
    assert secret not in " ".join(seen["argv"]) and "--properties" in seen["argv"]
    assert f"s3proxy.credential={secret}".encode() in seen["stdin"]
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "credentials.json"
                and secret in p.read_text(errors="replace")]


def test_the_exporter_serves_certificate_expiries_it_read():
    from hanzo_stream.monitoring.lag_exporter import Snapshot, render

    text = render(Snapshot({0: "kafka-0:9093"}, (), (), certificates={"kafka-0:9093": 1.9e9},
                           ca_expiry=2.1e9))
    assert ('hanzo_stream_broker_certificate_expiry_timestamp_seconds{address="kafka-0:9093"} '
            "1900000000") in text
    assert "hanzo_stream_ca_certificate_expiry_timestamp_seconds 2100000000" in text
    plain = render(Snapshot({0: "kafka-0:9092"}, (), ()))  # no TLS: no series
    assert "\nhanzo_stream_ca_certificate_expiry_timestamp_seconds " not in plain


def test_the_exporter_keeps_every_digit_of_an_offset():
    from hanzo_stream.monitoring.lag_exporter import GroupState, PartitionState, Snapshot, render

    snap = Snapshot({0: "b:9093"}, (PartitionState("t", 0, 0, (0,), (0,), 0, 12_345_678),),
                    (GroupState("g", 1, {("t", 0): 10_000_001}),))
    text = render(snap)
    assert 'kafka_topic_partition_current_offset{partition="0",topic="t"} 12345678' in text
    assert 'kafka_consumergroup_lag{consumergroup="g",partition="0",topic="t"} 2345677' in text
