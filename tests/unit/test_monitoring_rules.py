"""Alert and recording rules: valid for promtool, tested by promtool, in sync with topics.yaml."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hanzo_stream.monitoring import MONITORING_DIR, RULES_DIR, alerts, rule_files
from hanzo_stream.monitoring.__main__ import generated
from hanzo_stream.monitoring.__main__ import main as generate_main
from hanzo_stream.registry import LagThresholds, Registry
from hanzo_stream.registry.model import DeadLetterThresholds

ROOT = Path(__file__).resolve().parents[2]


def promtool(*args: str | Path) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool")
    assert exe, "promtool missing: run .ci/install-monitoring.sh (Debian package `prometheus`)"
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=120)


def all_alerts() -> dict[str, dict]:
    out = {}
    for f in rule_files():
        for g in yaml.safe_load(f.read_text())["groups"]:
            for r in g["rules"]:
                if "alert" in r:
                    out.setdefault(r["alert"], r)
    return out


def test_rule_files_pass_promtool_check() -> None:
    files = rule_files()
    assert {f.name for f in files} == {"recording.yaml", "kafka-alerts.yaml", "registry-alerts.yaml",
                                       "llm-alerts.yaml"}
    res = promtool("check", "rules", *files)
    assert res.returncode == 0, res.stdout + res.stderr


def test_promtool_unit_tests_pass() -> None:
    tests = sorted((MONITORING_DIR / "tests").glob("*.test.yaml"))
    assert len(tests) == 4
    res = promtool("test", "rules", *tests)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_alert_has_a_firing_and_a_quiet_promtool_case() -> None:
    fired, quiet = set(), set()
    for f in (MONITORING_DIR / "tests").glob("*.test.yaml"):
        for t in yaml.safe_load(f.read_text())["tests"]:
            for case in t.get("alert_rule_test", []):
                (fired if case["exp_alerts"] else quiet).add(case["alertname"])
    required = {"KafkaUnderReplicatedPartitions", "KafkaOfflinePartitions", "KafkaActiveControllerCount",
                "KafkaUnderMinIsrPartitions", "KafkaOfflineLogDirectory", "KafkaDiskSpaceLow",
                "KafkaDiskSpaceCritical", "KafkaMetricsTargetDown", "KafkaLagExporterMissing",
                "ConsumerLagWarning", "ConsumerLagCritical", "ConsumerStalled", "ConsumerRunMissed",
                "DeadLettersArriving",
                "LlmLatencyP95High", "LlmCostSpike", "DeadLettersWarning", "DeadLettersCritical",
                "KafkaCertificateExpiresSoon", "KafkaCertificateExpiryCritical",
                "KafkaCaCertificateExpiresSoon", "KafkaLegacyPlaintextInUse", "SchemaRegistryDown"}
    assert set(all_alerts()) == required
    assert fired == required, f"never shown firing: {required - fired}"
    assert quiet == required, f"never shown quiet: {required - quiet}"


def test_the_schema_registry_alert_watches_the_deployment_the_program_creates() -> None:
    from infra import schema_registry
    from infra.settings import parse
    from infra.topology import Topology

    s = parse({})
    [deployment] = [m for m in schema_registry.manifests(s, Topology.of(s)) if m["kind"] == "Deployment"]
    rules = [r for f in rule_files() for g in yaml.safe_load(f.read_text())["groups"]
             for r in g["rules"] if r.get("alert") == "SchemaRegistryDown"]
    assert len(rules) == 2  # the local scrape and the Kubernetes Deployment
    assert f'deployment="{deployment["metadata"]["name"]}"' in rules[1]["expr"]


def test_the_standards_thresholds() -> None:
    rules = all_alerts()
    urp = rules["KafkaUnderReplicatedPartitions"]
    assert urp["expr"] == "sum(kafka_under_replicated_partitions) > 0" and urp["for"] == "5m"
    assert rules["KafkaActiveControllerCount"]["expr"].endswith("!= 1")
    # the sum over controllers, with no controller reporting at all read as 0
    assert rules["KafkaActiveControllerCount"]["expr"].startswith(
        "(sum(kafka_controller_kafkacontroller_activecontrollercount) or vector(0))")


def test_standard_metric_names_are_recorded() -> None:
    recorded = {r["record"] for g in yaml.safe_load((RULES_DIR / "recording.yaml").read_text())["groups"]
                for r in g["rules"]}
    assert {"kafka_messages_in_per_sec", "kafka_bytes_in_per_sec", "kafka_under_replicated_partitions",
            "kafka_consumer_group_lag"} <= recorded


def test_generated_files_match_the_registry(root: Path) -> None:
    """One fact in one place: the committed lag rules are exactly what topics.yaml implies."""
    for path, text in generated(root / "topics.yaml").items():
        assert path.read_text() == text, (
            f"{path} is stale: run `python -m hanzo_stream.monitoring generate`")
    assert generate_main(["generate", "--check"]) == 0


def _continuous(registry: Registry) -> list[str]:
    return [g.name for g in registry.groups if g.batch_every_ms is None]


def test_every_continuous_group_gets_warning_and_critical(registry: Registry) -> None:
    groups = yaml.safe_load(alerts.render(registry))["groups"]
    lag = next(g for g in groups if g["name"] == "hanzo-stream-consumer-lag")["rules"]
    for g in registry.groups:
        if g.batch_every_ms is None:
            mine = {r["labels"]["severity"]: r for r in lag if r["labels"]["consumergroup"] == g.name}
            assert mine["warning"]["expr"].endswith(f"> {g.lag.warning}")
            assert mine["critical"]["expr"].endswith(f"> {g.lag.critical}")
    assert len(lag) == 2 * len(_continuous(registry))


def test_every_continuous_group_gets_a_stall_alert_on_exporter_names(registry: Registry) -> None:
    groups = yaml.safe_load(alerts.render(registry))["groups"]
    stalled = next(g for g in groups if g["name"] == "hanzo-stream-consumer-stalled")["rules"]
    assert [r["labels"]["consumergroup"] for r in stalled] == _continuous(registry)
    for r in stalled:
        sel = f'{{consumergroup="{r["labels"]["consumergroup"]}"}}'
        assert r["alert"] == "ConsumerStalled" and r["labels"]["severity"] == "critical"
        assert f"kafka_consumergroup_lag{sel}) > 0" in r["expr"]
        assert f"delta(kafka_consumergroup_lag{sel}[5m])) > 0" in r["expr"]
        assert f"changes(kafka_consumergroup_current_offset{sel}[5m])) == 0" in r["expr"]
        assert r["annotations"]["runbook_url"] == "docs/runbooks/consumer-stalled.md"
    assert (ROOT / "docs" / "runbooks" / "consumer-stalled.md").exists()


@pytest.mark.parametrize("clause", ["offset", "growth"])
def test_promtool_catches_a_stall_alert_missing_a_condition(tmp_path: Path, registry: Registry,
                                                            clause: str) -> None:
    """Without the offset clause a healthy consumer whose lag creeps up pages; without the
    growth clause an idle one (nothing produced, nothing to commit) does."""
    test_file = _write_rules(tmp_path, registry)
    rules = tmp_path / "rules" / "registry-alerts.yaml"
    drop = (r" and sum by \(consumergroup\) \(changes\([^)]*\)\) == 0" if clause == "offset"
            else r" and sum by \(consumergroup\) \(delta\([^)]*\)\) > 0")
    text, n = re.subn(drop, "", rules.read_text())
    assert n == len(_continuous(registry))
    rules.write_text(text)
    res = promtool("test", "rules", test_file)
    assert res.returncode != 0
    assert "healthy with a small steady lag, then idle" in res.stdout + res.stderr


def test_dead_letter_alert_is_addressed_to_the_monitor(registry: Registry) -> None:
    rule = alerts.dead_letter_alert(registry)
    assert rule["labels"]["consumergroup"] == "dead-letter-monitor"
    assert 'topic="dead_letter"' in rule["expr"]


def _write_rules(tmp_path: Path, registry: Registry) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    shutil.copy(RULES_DIR / "recording.yaml", tmp_path / "rules" / "recording.yaml")
    (tmp_path / "rules" / "registry-alerts.yaml").write_text(alerts.render(registry))
    test_file = tmp_path / "tests" / "registry-alerts.test.yaml"
    test_file.write_text(alerts.render_tests(registry))
    return test_file


def test_batch_readers_are_watched_for_missed_runs_only(registry: Registry) -> None:
    """The standard's readers run daily: no lag or stall alert (their lag grows between runs by
    design), one warning when no run committed for 1.25 x `every`."""
    batch = {g.name: g for g in registry.groups if g.batch_every_ms is not None}
    assert set(batch) == {"compliance", "commerce", "reporting"}
    groups = {g["name"]: g["rules"] for g in yaml.safe_load(alerts.render(registry))["groups"]}
    watched = {r["labels"]["consumergroup"] for name in ("hanzo-stream-consumer-lag",
                                                          "hanzo-stream-consumer-stalled")
               for r in groups[name]}
    assert not watched & set(batch)
    missed = groups["hanzo-stream-batch-readers"]
    assert sorted(r["labels"]["consumergroup"] for r in missed) == sorted(batch)
    for r in missed:
        assert r["alert"] == "ConsumerRunMissed" and r["labels"]["severity"] == "warning"
        assert "offset 30h" in r["expr"] and "every 24h" in r["annotations"]["description"]


def test_a_missed_run_alert_for_any_allowed_every_passes_promtool_check(tmp_path: Path,
                                                                       registry: Registry) -> None:
    """90m makes an overdue of 112.5 minutes: PromQL wants it as 6750s, not 1.875h."""
    assert [alerts.promql_duration(ms) for ms in (5_400_000, 6_750_000, 86_400_000, 108_000_000)] \
        == ["90m", "6750s", "24h", "30h"]
    odd = dataclasses.replace(registry, groups=tuple(
        dataclasses.replace(g, batch_every_ms=90 * 60_000) if g.batch_every_ms else g
        for g in registry.groups))
    rules = tmp_path / "registry-alerts.yaml"
    rules.write_text(alerts.render(odd))
    res = promtool("check", "rules", rules)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "offset 6750s" in rules.read_text()


def test_promtool_catches_a_missed_run_alert_without_its_history_clause(
        tmp_path: Path, registry: Registry) -> None:
    """Compared with changes() over the window, a reader whose last run is inside the window
    would page before its history exists (a new Prometheus): the promtool case fails."""
    _write_rules(tmp_path, registry)
    test_file = tmp_path / "tests" / alerts.BATCH_TEST_FILE.name
    test_file.write_text(alerts.render_batch_tests(registry))
    rules = tmp_path / "rules" / "registry-alerts.yaml"
    text, n = re.subn(r"\(sum by \(consumergroup\) \((kafka_consumergroup_current_offset\{[^}]*\})\)"
                      r" - [^)]*\)[^)]*\)\) <= 0",
                      r"sum by (consumergroup) (changes(\1[30h])) == 0", rules.read_text())
    assert n == 3
    rules.write_text(text)
    res = promtool("test", "rules", test_file)
    assert res.returncode != 0
    assert "miss their run" in res.stdout + res.stderr


def test_thresholds_changed_in_the_registry_change_the_alerts(tmp_path: Path, registry: Registry) -> None:
    custom = dataclasses.replace(registry, groups=tuple(
        dataclasses.replace(g, lag=LagThresholds(warning=5_000 + i, critical=70_000 + i))
        for i, g in enumerate(registry.groups)))
    res = promtool("test", "rules", _write_rules(tmp_path, custom))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "> 5000\n" in (tmp_path / "rules" / "registry-alerts.yaml").read_text()


def test_promtool_catches_rules_that_ignore_the_registry(tmp_path: Path, registry: Registry) -> None:
    """The generated promtool test is not vacuous: rules with other thresholds fail it."""
    test_file = _write_rules(tmp_path, registry)
    rules = tmp_path / "rules" / "registry-alerts.yaml"
    rules.write_text(rules.read_text().replace("> 100000\n", "> 150000\n"))
    res = promtool("test", "rules", test_file)
    assert res.returncode != 0
    assert "ConsumerLagWarning" in res.stdout + res.stderr


def test_dead_letters_alert_per_topic_with_its_registry_thresholds(registry: Registry) -> None:
    rules = alerts.dead_letter_class_alerts(registry)
    audit = {r["labels"]["severity"]: r for r in rules if r["labels"].get("source_topic") == "audit_log"}
    assert audit["critical"]["expr"] == 'hanzo_stream:dead_letters:increase10m{source_topic="audit_log"} >= 1'
    assert registry.topic("audit_log").dead_letters == DeadLetterThresholds(warning=1, critical=1)
    summary = audit["critical"]["annotations"]["summary"]
    assert all(f"$labels.{label}" in summary for label in ("source_topic", "stage", "error_class"))
    catch_all = [r for r in rules if "source_topic" not in r["labels"]]
    assert [r["labels"]["severity"] for r in catch_all] == ["warning", "critical"]
    assert all("source_topic!~" in r["expr"] and "|audit_log|" in r["expr"] for r in catch_all)
    assert len(rules) == 2 * (len(registry.topics) + 1)


def test_dead_letter_thresholds_changed_in_the_registry_change_the_alerts(tmp_path: Path,
                                                                           registry: Registry) -> None:
    custom = dataclasses.replace(registry, topics=tuple(
        dataclasses.replace(t, dead_letters=DeadLetterThresholds(warning=2, critical=11))
        for t in registry.topics))
    res = promtool("test", "rules", _write_rules(tmp_path, custom))
    assert res.returncode == 0, res.stdout + res.stderr
    assert '{source_topic="audit_log"} >= 11\n' in (tmp_path / "rules" / "registry-alerts.yaml").read_text()


@pytest.mark.parametrize("mutation", [
    ('{source_topic="audit_log"} >= 1\n', '{source_topic="audit_log"} >= 2\n'),  # ignores the registry
    ("(hanzo_stream_dead_letters_total unless hanzo_stream_dead_letters_total offset 10m) or ", ""),
    ("or (hanzo_stream_dead_letters_total < hanzo_stream_dead_letters_total offset 10m) ", ""),
])
def test_promtool_catches_dead_letter_rules_that_miss_a_case(tmp_path: Path, registry: Registry,
                                                               mutation: tuple[str, str]) -> None:
    """Each part of the window count matters: a new series' first letters, a monitor restart,
    and the registry's threshold."""
    test_file = _write_rules(tmp_path, registry)
    rules = tmp_path / "rules" / "registry-alerts.yaml"
    text = rules.read_text()
    assert mutation[0] in text
    rules.write_text(text.replace(mutation[0], mutation[1]))
    res = promtool("test", "rules", test_file)
    assert res.returncode != 0
    assert "dead letters by source topic, stage and class" in res.stdout + res.stderr


@pytest.mark.parametrize("bad", ["sum(kafka_under_replicated_partitions) > 0", "0"])
def test_promtool_catches_a_broken_urp_alert(tmp_path: Path, bad: str) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    shutil.copy(RULES_DIR / "recording.yaml", tmp_path / "rules")
    text = (RULES_DIR / "kafka-alerts.yaml").read_text()
    if bad == "0":  # an alert that can never fire
        text = text.replace("expr: sum(kafka_under_replicated_partitions) > 0", "expr: vector(0) > 0")
    else:  # drop the 5-minute window: the blip case must now fire
        text = text.replace("        for: 5m\n", "        for: 0m\n", 1)
    (tmp_path / "rules" / "kafka-alerts.yaml").write_text(text)
    shutil.copy(MONITORING_DIR / "tests" / "kafka-alerts.test.yaml", tmp_path / "tests")
    res = promtool("test", "rules", tmp_path / "tests" / "kafka-alerts.test.yaml")
    assert res.returncode != 0
    assert "KafkaUnderReplicatedPartitions" in res.stdout + res.stderr


def test_humanize_matches_prometheus() -> None:
    assert alerts._humanize(100_001) == "100k"
    assert alerts._humanize(1_000_001) == "1M"
    assert alerts._humanize(5_001) == "5.001k"
    assert alerts._humanize(42) == "42"
