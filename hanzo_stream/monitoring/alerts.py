"""Alert rules that depend on topics.yaml, generated so each threshold lives only there.

- Consumer lag: one warning and one critical alert per registry group, with the group's
  `lag.warning` / `lag.critical` (defaults 100K / 1M, the standard's numbers).
- Stalled consumers: one critical alert per registry group when its lag grows while its
  committed offsets stand still (the job is down or stuck on a record), long before the
  lag reaches a threshold.
- Dead letters: an alert when the dead-letter topic's log end moves, addressed to the
  groups that read it (dead-letter-monitor); and, from the dead-letter-monitor's counters,
  a warning and a critical alert per (source topic, stage, error class) with the source
  topic's `dead_letters` thresholds, each naming the topic, the stage and the class.

The output is committed as monitoring/rules/registry-alerts.yaml (Prometheus and infra
load files, not Python); tests/unit/test_monitoring_rules.py fails when it is stale.
"""

from __future__ import annotations

import yaml

from ..core import dead_letter
from ..registry import Group, Registry
from ..registry.model import DeadLetterThresholds
from . import MONITORING_DIR, RULES_DIR

GENERATED_FILE = RULES_DIR / "registry-alerts.yaml"
GENERATED_TEST_FILE = MONITORING_DIR / "tests" / "registry-alerts.test.yaml"
BATCH_TEST_FILE = MONITORING_DIR / "tests" / "batch-readers.test.yaml"
TEST_RULE_FILES = ["../rules/recording.yaml", f"../rules/{GENERATED_FILE.name}"]  # from tests/
LAG_METRIC = "kafka_consumer_group_lag"  # the standard's name (recording rule)
OFFSET_METRIC = "kafka_topic_partition_current_offset"  # kafka_exporter's log-end offset
EXPORTER_LAG_METRIC = "kafka_consumergroup_lag"  # kafka_exporter's, per partition
COMMITTED_METRIC = "kafka_consumergroup_current_offset"  # kafka_exporter's committed offset
STALL_WINDOW = "5m"  # no commit and growing lag over this window means stalled
STALL_FOR = "2m"
OVERDUE_FOR = "10m"
DEAD_LETTER_COUNTER = "hanzo_stream_dead_letters_total"  # dead_letter_monitor.py
DEAD_LETTER_WINDOW = "10m"
DEAD_LETTER_RECORD = f"hanzo_stream:dead_letters:increase{DEAD_LETTER_WINDOW}"
DEAD_LETTER_LABELS = ("source_topic", "stage", "error_class")
DEAD_LETTER_ALERT = "DeadLetters"  # every dead-letter alert's name starts with it
LAG_RUNBOOK = "docs/runbooks/consumer-lag.md"
STALLED_RUNBOOK = "docs/runbooks/consumer-stalled.md"
DEAD_LETTER_RUNBOOK = "docs/runbooks/dead-letters.md"

HEADER = """\
# GENERATED from topics.yaml by `python -m hanzo_stream.monitoring generate`: do not edit.
# Change a group's `lag: {warning, critical}` in topics.yaml and regenerate; CI fails
# while this file and the registry disagree.
"""


def _group_alert(alert: str, group: Group, severity: str, expr: str, wait: str, summary: str,
                 description: str, runbook: str) -> dict:
    """One rule about a consumer group, labelled so Alertmanager routes it by group."""
    return {"alert": alert, "expr": expr, "for": wait,
            "labels": {"severity": severity, "consumergroup": group.name},
            "annotations": {"summary": summary, "description": description, "runbook_url": runbook}}


def _selector(group: Group) -> str:
    return f'{{consumergroup="{group.name}"}}'


BY_GROUP = "sum by (consumergroup)"


def lag_alerts(group: Group) -> list[dict]:
    """Warning and critical alerts on the group's total lag across its topics."""
    topics = ", ".join(group.topics)
    return [
        _group_alert(
            f"ConsumerLag{severity.capitalize()}", group, severity,
            f"{BY_GROUP} ({LAG_METRIC}{_selector(group)}) > {threshold}", "5m",
            f"Consumer group {group.name} is {{{{ $value | humanize }}}} messages behind "
            f"(threshold {threshold:,})",
            f"{group.name} reads {topics} with {group.consumers} expected consumer(s). Lag above "
            f"{threshold:,} for 5 minutes: the job is down, stuck, or slower than its producers.",
            LAG_RUNBOOK)
        for severity, threshold in (("warning", group.lag.warning), ("critical", group.lag.critical))
    ]


def stalled_alert(group: Group) -> dict:
    """Critical when the group's lag is positive and grew over STALL_WINDOW while not one of
    its committed offsets moved: a consumer that is down or stuck, whatever the thresholds.

    A healthy consumer with a steady small lag commits, and an idle one's lag does not grow,
    so neither fires.
    """
    sel = _selector(group)
    return _group_alert(
        "ConsumerStalled", group, "critical",
        f"{BY_GROUP} ({EXPORTER_LAG_METRIC}{sel}) > 0"
        f" and {BY_GROUP} (delta({EXPORTER_LAG_METRIC}{sel}[{STALL_WINDOW}])) > 0"
        f" and {BY_GROUP} (changes({COMMITTED_METRIC}{sel}[{STALL_WINDOW}])) == 0", STALL_FOR,
        f"Consumer group {group.name} commits nothing while its lag grows "
        f"({{{{ $value | humanize }}}} messages behind)",
        f"{group.name} reads {', '.join(group.topics)}. No committed offset moved for "
        f"{STALL_WINDOW} while its lag grew: the consumer is down, crash-looping or stuck on one "
        "record. Nothing it reads is processed until it is fixed.",
        STALLED_RUNBOOK)


def promql_duration(ms: int) -> str:
    """A PromQL duration, which takes whole numbers only (`offset 1.875h` is a parse error)."""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def overdue_alert(group: Group) -> dict:
    """Warning when a batch reader's committed offsets are where they were `overdue` ago while
    records wait: a run was missed. `offset` rather than changes(): with no samples from then
    (a new Prometheus, a new group) the comparison is empty and nothing fires."""
    assert group.batch_every_ms is not None
    sel = _selector(group)
    overdue, every = promql_duration(group.batch_overdue_ms), promql_duration(group.batch_every_ms)
    return _group_alert(
        "ConsumerRunMissed", group, "warning",
        f"{BY_GROUP} ({EXPORTER_LAG_METRIC}{sel}) > 0 and ({BY_GROUP} ({COMMITTED_METRIC}{sel})"
        f" - {BY_GROUP} ({COMMITTED_METRIC}{sel} offset {overdue})) <= 0", OVERDUE_FOR,
        f"Batch reader {group.name} has committed nothing for {overdue} "
        f"({{{{ $value | humanize }}}} messages waiting)",
        f"{group.name} reads {', '.join(group.topics)} every {every} (topics.yaml batch.every). "
        f"No committed offset moved for {overdue}: its last run did not happen or did not finish.",
        STALLED_RUNBOOK)


def dead_letter_alert(registry: Registry) -> dict:
    watchers = sorted(g.name for g in registry.groups if dead_letter.TOPIC in g.topics)
    return {
        "alert": f"{DEAD_LETTER_ALERT}Arriving",
        "expr": f'sum by (topic) (delta({OFFSET_METRIC}{{topic="{dead_letter.TOPIC}"}}[5m])) > 0',
        "for": "0m",
        "labels": {"severity": "warning", "consumergroup": ",".join(watchers)},
        "annotations": {
            "summary": f"Events are arriving on {dead_letter.TOPIC}",
            "description": "Producers or jobs parked events they could not process. Read the "
                           "hs.error.* headers to find the cause, fix it, then replay.",
            "runbook_url": DEAD_LETTER_RUNBOOK,
        },
    }


def dead_letter_recording() -> dict:
    """Dead letters per (source topic, stage, error class) within the window, exactly.

    Not `increase()`: it extrapolates (1 letter reads as 1.2) and misses a label set's first
    letters (a series that appears at 1 has no increase). Instead, per series: its value if it
    is new within the window (it started at zero then: the monitor creates a series on its
    first letter), its value if it fell (the monitor restarted: counted since), else value
    minus value a window ago.
    """
    x, w = DEAD_LETTER_COUNTER, DEAD_LETTER_WINDOW
    per_series = f"({x} unless {x} offset {w}) or ({x} < {x} offset {w}) or ({x} - {x} offset {w})"
    return {"record": DEAD_LETTER_RECORD,
            "expr": f"sum by ({', '.join(DEAD_LETTER_LABELS)}) ({per_series})"}


def dead_letter_class_alerts(registry: Registry) -> list[dict]:
    """Warning and critical per source topic, thresholds from its `dead_letters:`; one more
    pair with the defaults for source topics the registry does not know."""
    watchers = ",".join(sorted(g.name for g in registry.groups if dead_letter.TOPIC in g.topics))
    known = sorted(t.name for t in registry.topics)
    # The series' own source_topic label, repeated as a static one: rule names and labels stay
    # unique per topic (promtool refuses duplicates).
    scopes = [(f'source_topic="{t.name}"', {"source_topic": t.name}, t.dead_letters.warning,
               t.dead_letters.critical) for t in registry.topics]
    scopes.append((f'source_topic!~"{"|".join(known)}"', {}, DeadLetterThresholds().warning,
                   DeadLetterThresholds().critical))
    out = []
    for selector, static, warning, critical in scopes:
        for severity, threshold in (("warning", warning), ("critical", critical)):
            out.append({
                "alert": f"{DEAD_LETTER_ALERT}{severity.capitalize()}",
                "expr": f"{DEAD_LETTER_RECORD}{{{selector}}} >= {threshold}",
                "for": "0m",
                "labels": {"severity": severity, "consumergroup": watchers, **static},
                "annotations": {
                    "summary": "{{ $value | humanize }} dead letter(s) from {{ $labels.source_topic }} "
                               "at {{ $labels.stage }}: {{ $labels.error_class }} "
                               f"(in {DEAD_LETTER_WINDOW}, {severity} at {threshold})",
                    "description": "Events of {{ $labels.source_topic }} were refused by "
                                   "{{ $labels.stage }} with error class {{ $labels.error_class }} "
                                   "and parked on dead_letter. Their hs.error.message names the "
                                   "field and the fix; replay them once fixed.",
                    "runbook_url": DEAD_LETTER_RUNBOOK,
                },
            })
    return out


def _by_schedule(registry: Registry) -> tuple[list[Group], list[Group]]:
    """The continuous groups (lag and stall alerts) and the batch readers (missed runs)."""
    return ([g for g in registry.groups if g.batch_every_ms is None],
            [g for g in registry.groups if g.batch_every_ms is not None])


def rule_groups(registry: Registry) -> list[dict]:
    continuous, batch = _by_schedule(registry)
    return [
        {"name": "hanzo-stream-consumer-lag",
         "rules": [r for g in continuous for r in lag_alerts(g)]},
        {"name": "hanzo-stream-consumer-stalled", "rules": [stalled_alert(g) for g in continuous]},
        *([{"name": "hanzo-stream-batch-readers", "rules": [overdue_alert(g) for g in batch]}]
          if batch else []),
        {"name": "hanzo-stream-dead-letters",
         "rules": [dead_letter_alert(registry), dead_letter_recording(),
                   *dead_letter_class_alerts(registry)]},
    ]


def _humanize(v: float) -> str:
    """Prometheus' `humanize` template function, for exact expected annotations."""
    prefix = ""
    for p in ("k", "M", "G", "T", "P"):
        if abs(v) < 1000:
            break
        prefix, v = p, v / 1000
    return f"{v:.4g}{prefix}"


def _split(total: int) -> tuple[int, int]:
    return total // 2, total - total // 2


def lag_test(group: Group) -> dict:
    """A promtool test: lag below warning, then above it, then above critical.

    Lag is split over two partitions (the alert must sum them) and an unregistered
    group lags far more (it must not fire anything).
    """
    w, c = group.lag.warning, group.lag.critical
    phases = [w - 1, w + 1, c + 1]  # minutes 0-9, 10-19, 20-30
    series = []
    for part in (0, 1):
        values = [_split(v)[part] for v in phases]
        series.append({
            "series": f'kafka_consumergroup_lag{{job="kafka-exporter", instance="exporter:9308", '
                      f'consumergroup="{group.name}", topic="{group.topics[0]}", partition="{part}"}}',
            "values": f"{values[0]}+0x9 {values[1]}+0x9 {values[2]}+0x10"})
    series.append({"series": 'kafka_consumergroup_lag{job="kafka-exporter", instance="exporter:9308", '
                             'consumergroup="unregistered-group", topic="t", partition="0"}',
                   "values": f"{c * 10}+0x30"})

    def expected(severity: str, value: int) -> list[dict]:
        rule = next(r for r in lag_alerts(group) if r["labels"]["severity"] == severity)
        return [{"exp_labels": {"severity": severity, "consumergroup": group.name},
                 "exp_annotations": {
                     **rule["annotations"],
                     "summary": rule["annotations"]["summary"].replace(
                         "{{ $value | humanize }}", _humanize(value))}}]

    tests = []
    for at, warn, crit in (("9m", None, None), ("13m", None, None),  # 13m: pending (for: 5m)
                           ("19m", w + 1, None), ("29m", c + 1, c + 1)):
        tests.append({"eval_time": at, "alertname": "ConsumerLagWarning",
                      "exp_alerts": expected("warning", warn) if warn else []})
        tests.append({"eval_time": at, "alertname": "ConsumerLagCritical",
                      "exp_alerts": expected("critical", crit) if crit else []})
    return {"name": f"lag of {group.name} (warning {w}, critical {c})", "interval": "1m",
            "input_series": series, "alert_rule_test": tests}


def _stall_series(group: str, topic: str, part: int, offsets: str, lag: str) -> list[dict]:
    where = (f'job="kafka-exporter", instance="exporter:9308", consumergroup="{group}", '
             f'topic="{topic}", partition="{part}"')
    return [{"series": f"{COMMITTED_METRIC}{{{where}}}", "values": offsets},
            {"series": f"{EXPORTER_LAG_METRIC}{{{where}}}", "values": lag}]


def stalled_tests(group: Group) -> list[dict]:
    """Two promtool tests: the group stalls at minute 9 (quiet at 12m, firing by 17m; an
    unregistered group stalling too fires nothing), and a healthy group (small lag, offsets
    advancing) that then goes idle (nothing produced, nothing committed): quiet throughout."""
    topic, name = group.topics[0], "ConsumerStalled"
    rule = stalled_alert(group)

    def firing(lag: int) -> list[dict]:
        summary = rule["annotations"]["summary"].replace("{{ $value | humanize }}", _humanize(lag))
        return [{"exp_labels": rule["labels"],
                 "exp_annotations": {**rule["annotations"], "summary": summary}}]

    def lag_at(minute: int) -> int:  # the two stalled partitions' lag, summed
        return (5 + 10 * (minute - 10)) + (7 + 20 * (minute - 10))

    stalled = [*_stall_series(group.name, topic, 0, "100+10x9 190+0x20", "5+0x9 5+10x20"),
               *_stall_series(group.name, topic, 1, "300+20x9 480+0x20", "7+0x9 7+20x20"),
               *_stall_series("unregistered-group", "t", 0, "0+0x30", "1+100x30")]
    # Healthy: partition 0 at a constant small lag, partition 1's creeping up (so the group's
    # lag grows: only the advancing offsets keep it quiet); from minute 15 idle.
    healthy = [*_stall_series(group.name, topic, 0, "100+10x15 250+0x15", "3+0x30"),
               *_stall_series(group.name, topic, 1, "0+50x15 750+0x15", "2+1x15 17+0x15")]
    return [
        {"name": f"{group.name} stalls while its lag grows", "interval": "1m", "input_series": stalled,
         "alert_rule_test": [{"eval_time": "12m", "alertname": name, "exp_alerts": []},
                             {"eval_time": "17m", "alertname": name, "exp_alerts": firing(lag_at(17))},
                             {"eval_time": "30m", "alertname": name, "exp_alerts": firing(lag_at(30))}]},
        {"name": f"{group.name} healthy with a small steady lag, then idle", "interval": "1m",
         "input_series": healthy,
         "alert_rule_test": [{"eval_time": t, "alertname": name, "exp_alerts": []}
                             for t in ("8m", "12m", "15m", "22m", "30m")]},
    ]


def overdue_tests(groups: list[Group]) -> list[dict]:
    """Two promtool tests of batch readers that run every E hours (overdue O = 1.25 E), with a
    sample every 5 minutes and the lag growing by one a sample between runs: runs at 0 and E
    then none (quiet before O: no history, though nothing moved yet; quiet while the run at E
    is within O; firing from E + O), and runs every E (quiet throughout). One test holds every
    group with that E: each 5-minute step evaluates every rule, over days."""
    name, rules = "ConsumerRunMissed", [overdue_alert(g) for g in groups]
    every, overdue = groups[0].batch_every_ms // 300_000, groups[0].batch_overdue_ms // 300_000
    assert all(g.batch_every_ms == groups[0].batch_every_ms for g in groups)
    end = every + overdue + 24  # two hours past the first moment it can fire

    def runs(count: int) -> tuple[str, str]:
        """Committed offsets stepping by 100 at each of `count` runs E apart, and the lag."""
        spans = [every] * (count - 1) + [end + 1 - every * (count - 1)]
        return (" ".join(f"{100 * (k + 1)}+0x{n - 1}" for k, n in enumerate(spans)),
                " ".join(f"0+1x{n - 1}" for n in spans))

    def at(sample: int) -> str:
        return f"{sample * 5}m"

    def series(offsets_and_lag: tuple[str, str]) -> list[dict]:
        return [s for g in groups for s in _stall_series(g.name, g.topics[0], 0, *offsets_and_lag)]

    fired = overdue + every + 2  # the pending 10 minutes have passed
    firing = [{"exp_labels": r["labels"],
               "exp_annotations": {**r["annotations"], "summary": r["annotations"]["summary"].replace(
                   "{{ $value | humanize }}", _humanize(fired - every))}} for r in rules]
    names, period = ", ".join(g.name for g in groups), promql_duration(groups[0].batch_every_ms)
    return [
        {"name": f"{names} miss their run after {period}", "interval": "5m",
         "input_series": [*series(runs(2)),
                          *_stall_series("unregistered-group", "t", 0, "7+0x300", "1+1x300")],
         "alert_rule_test": [
             *({"eval_time": at(t), "alertname": name, "exp_alerts": []}
               for t in (every - 1, overdue - 1, overdue + every - 1)),
             {"eval_time": at(fired), "alertname": name, "exp_alerts": firing}]},
        {"name": f"{names} run every {period}", "interval": "5m",
         "input_series": series(runs(-(-end // every))),
         "alert_rule_test": [{"eval_time": at(t), "alertname": name, "exp_alerts": []}
                             for t in (overdue - 1, overdue + every - 1, fired, end)]},
    ]


def render_batch_tests(registry: Registry) -> str:
    """The promtool tests of the missed-run alerts, in a file of their own: they span days, so
    they evaluate every 5 minutes (the other tests need 1)."""
    by_every: dict[int, list[Group]] = {}
    for g in _by_schedule(registry)[1]:
        by_every.setdefault(g.batch_every_ms, []).append(g)
    doc = {"rule_files": TEST_RULE_FILES, "evaluation_interval": "5m",
           "tests": [t for groups in by_every.values() for t in overdue_tests(groups)]}
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True)


def dead_letter_test(registry: Registry) -> dict:
    """Quiet dead-letter topic, then arrivals, then quiet again; other topics never count."""
    rule = dead_letter_alert(registry)
    offset = f'{OFFSET_METRIC}{{job="kafka-exporter", instance="exporter:9308", partition="0", '
    firing = [{"exp_labels": {**rule["labels"], "topic": dead_letter.TOPIC},
               "exp_annotations": rule["annotations"]}]
    return {
        "name": "dead letters arriving",
        "interval": "1m",
        "input_series": [
            {"series": offset + f'topic="{dead_letter.TOPIC}"}}', "values": "5+0x9 6+1x4 10+0x15"},
            {"series": offset + 'topic="some_busy_topic"}', "values": "0+1000x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "9m", "alertname": "DeadLettersArriving", "exp_alerts": []},
            {"eval_time": "12m", "alertname": "DeadLettersArriving", "exp_alerts": firing},
            {"eval_time": "30m", "alertname": "DeadLettersArriving", "exp_alerts": []},
        ],
    }


def dead_letter_class_test(registry: Registry) -> dict:
    """Exact window counts, and the alerts they fire at the registry's thresholds, for a series
    that appears, one that grows steadily, one whose monitor restarted, and one from a source
    topic the registry does not know."""
    topics = {t.name: t.dead_letters for t in registry.topics}
    default = DeadLetterThresholds()
    scenarios = [  # (source_topic, stage, error_class, values from minute 0, {eval minute: count})
        ("audit_log", "job:audit-archive", "schema.required", "_ _ _ _ _ 1+0x25", {10: 1, 13: 1, 30: 0}),
        ("events_plugin_ingestion", "producer:insights-capture", "json.malformed", "0+1x20 20+0x10",
         {10: 10, 13: 10, 30: 0}),
        ("llm_usage", "job:billing-agg", "event.late", "40+0x10 0 2+0x19", {10: 0, 13: 2, 30: 0}),
        ("no_such_topic", "producer:other-service", "schema.value", "_ _ 3+0x28", {10: 3, 13: 0, 30: 0}),
    ]
    scenarios = [sc for sc in scenarios if sc[0] in topics or sc[0] == "no_such_topic"]
    series, expr_tests, alert_tests = [], [], []
    for topic, stage, cls, values, _ in scenarios:
        series.append({"series": f'{DEAD_LETTER_COUNTER}{{job="dead-letter-monitor", instance="m:9309", '
                                 f'source_topic="{topic}", stage="{stage}", error_class="{cls}"}}',
                       "values": values})
    for minute in (10, 13, 30):
        at = [(topic, stage, cls, counts[minute]) for topic, stage, cls, _, counts in scenarios
              if minute in counts]
        expr_tests.append({"expr": DEAD_LETTER_RECORD, "eval_time": f"{minute}m", "exp_samples": [
            {"labels": f'{DEAD_LETTER_RECORD}{{source_topic="{topic}", stage="{stage}", '
                       f'error_class="{cls}"}}', "value": v} for topic, stage, cls, v in at]})
        for severity in ("warning", "critical"):
            fired = []
            for topic, stage, cls, value in at:
                limits = topics.get(topic, default)
                threshold = limits.warning if severity == "warning" else limits.critical
                if value < threshold or value == 0:
                    continue
                rule = next(r for r in dead_letter_class_alerts(registry)
                            if r["labels"]["severity"] == severity
                            and r["labels"].get("source_topic") == (topic if topic in topics else None))
                labels = {"source_topic": topic, "stage": stage, "error_class": cls}
                fired.append({"exp_labels": {**rule["labels"], **labels}, "exp_annotations": {
                    k: v.replace("{{ $value | humanize }}", _humanize(value))
                        .replace("{{ $labels.source_topic }}", topic).replace("{{ $labels.stage }}", stage)
                        .replace("{{ $labels.error_class }}", cls)
                    for k, v in rule["annotations"].items()}})
            alert_tests.append({"eval_time": f"{minute}m", "alertname": f"DeadLetters{severity.capitalize()}",
                                "exp_alerts": fired})
    return {"name": "dead letters by source topic, stage and class", "interval": "1m",
            "input_series": series, "promql_expr_test": expr_tests, "alert_rule_test": alert_tests}


def render_tests(registry: Registry, rule_files: list[str] | None = None) -> str:
    """The promtool test file for the generated rules (paths relative to the test file)."""
    continuous = _by_schedule(registry)[0]
    doc = {
        "rule_files": rule_files or TEST_RULE_FILES,
        "evaluation_interval": "1m",
        "tests": [lag_test(g) for g in continuous]
                 + [t for g in continuous for t in stalled_tests(g)]
                 + [dead_letter_test(registry), dead_letter_class_test(registry)],
    }
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True)


def render(registry: Registry) -> str:
    """The generated rule file's exact text (stable: same registry, same bytes)."""
    body = yaml.safe_dump({"groups": rule_groups(registry)}, sort_keys=False, width=1000,
                          allow_unicode=True)
    return HEADER + body
