"""Grafana dashboards as code, and the list of every PromQL query they run.

Built here (ids, layout and datasource wiring are mechanical) and committed as JSON
under monitoring/dashboards/ so Grafana (or infra's ConfigMaps) import the files
directly. `panel_queries()` reads any dashboard JSON back into (panel, query) pairs:
the live test runs each against real Prometheus and requires data.

Order follows what on-call looks at first: consumer lag by group and partition, then
messages and bytes in, replication health, controller state, request latency. The LLM
dashboard covers llm-metrics and the settlement jobs; the dead-letter dashboard what
dead-letter-monitor counts (the exact window counts the alerts page on first), and the
monitor's own health.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core import dead_letter
from ..jobs.events import FUTURE
from ..jobs.totals import LATE
from . import DASHBOARDS_DIR, alerts
from . import dead_letter_monitor as monitor

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GROUP = 'consumergroup=~"$group"'
TOPIC = 'topic=~"$topic"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # timeseries | stat | table (instant query, one row per series)
    unit: str = "short"
    width: int = 12
    height: int = 8
    description: str = ""
    thresholds: tuple[tuple[float, str], ...] = ()  # (value, color) above the base
    base: str = "green"  # the colour below the first threshold ("red" for must-be-at-least)
    hide: tuple[str, ...] = ()  # table: columns not shown (labels that say nothing)


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    rows: tuple[Row, ...]
    tags: tuple[str, ...] = ("hanzo-stream", "kafka")
    variables: tuple[dict, ...] = field(default_factory=tuple)

    @property
    def file(self) -> Path:
        return DASHBOARDS_DIR / f"{self.uid}.json"


def _q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


RED = ((1, "red"),)
EXACTLY_ONE = ((1, "green"), (2, "red"))  # with base="red": red at 0, green at 1, red above

LAG = Row("Consumer lag", (
    Panel("Lag by consumer group", (
        _q(f"sum by (consumergroup) (kafka_consumer_group_lag{{{GROUP}, {TOPIC}}})",
           "{{consumergroup}}"),), width=16,
        description="Messages between each group's committed offsets and the log end. "
                    "Alerts: registry thresholds per group (topics.yaml lag.warning/critical)."),
    Panel("Current lag", (
        _q(f"sum by (consumergroup) (kafka_consumer_group_lag{{{GROUP}, {TOPIC}}})",
           "{{consumergroup}}"),), kind="stat", width=8),
    Panel("Lag by partition", (
        _q(f"kafka_consumer_group_lag{{{GROUP}, {TOPIC}}}",
           "{{consumergroup}} {{topic}}/{{partition}}"),), width=16,
        description="A single hot or stuck partition shows here before it moves the total."),
    Panel("Members per group", (
        _q(f"kafka_consumergroup_members{{{GROUP}}}", "{{consumergroup}}"),), kind="stat", width=8,
        description="0 members with growing lag: the job is not running."),
    Panel("Consumption rate (committed messages/s)", (
        _q(f"sum by (consumergroup) (rate(kafka_consumergroup_current_offset_sum{{{GROUP}, {TOPIC}}}[2m]))",
           "{{consumergroup}}"),), unit="short"),
    Panel("Production rate of the groups' topics (messages/s)", (
        _q(f"sum by (topic) (rate(kafka_topic_partition_current_offset{{{TOPIC}}}[2m]))",
           "{{topic}}"),), unit="short"),
))

THROUGHPUT = Row("Throughput", (
    Panel("Messages in/s by topic", (_q(f"kafka_messages_in_per_sec{{{TOPIC}}}", "{{topic}}"),),
          unit="short"),
    Panel("Bytes in/s by topic", (_q(f"kafka_bytes_in_per_sec{{{TOPIC}}}", "{{topic}}"),),
          unit="Bps"),
    Panel("Bytes out/s by topic", (
        _q(f"sum by (topic) (rate(kafka_server_brokertopicmetrics_bytesout_total{{{TOPIC}}}[2m]))",
           "{{topic}}"),), unit="Bps"),
    Panel("Messages in/s (cluster)", (_q("sum(kafka_messages_in_per_sec)", "messages/s"),),
          kind="stat", unit="short"),
))

REPLICATION = Row("Replication health", (
    Panel("Under-replicated partitions", (_q("sum(kafka_under_replicated_partitions)"),),
          kind="stat", width=6, thresholds=RED, description="Alert when > 0 for 5 minutes."),
    Panel("Under min ISR", (_q("sum(kafka_server_replicamanager_underminisrpartitioncount)"),),
          kind="stat", width=6, thresholds=RED),
    Panel("Offline partitions", (_q("max(kafka_controller_kafkacontroller_offlinepartitionscount)"),),
          kind="stat", width=6, thresholds=RED),
    Panel("Offline log directories", (_q("sum(kafka_log_logmanager_offlinelogdirectorycount)"),),
          kind="stat", width=6, thresholds=RED),
    Panel("Under-replicated partitions by topic", (
        _q(f"sum by (topic) (kafka_cluster_partition_underreplicated{{{TOPIC}}})", "{{topic}}"),)),
    Panel("Under-replicated partitions by broker", (
        _q("kafka_under_replicated_partitions", "{{instance}}"),)),
    Panel("ISR shrinks and expands /s", (
        _q("sum(rate(kafka_server_replicamanager_isrshrinks_total[5m]))", "shrinks"),
        _q("sum(rate(kafka_server_replicamanager_isrexpands_total[5m]))", "expands"))),
    Panel("Partitions and leaders per broker", (
        _q("kafka_server_replicamanager_partitioncount", "partitions {{instance}}"),
        _q("kafka_server_replicamanager_leadercount", "leaders {{instance}}"))),
))

CONTROLLER = Row("Controller state", (
    Panel("Active controllers (must be 1)", (
        _q("sum(kafka_controller_kafkacontroller_activecontrollercount) or vector(0)"),),
        kind="stat", width=6, base="red", thresholds=EXACTLY_ONE,
        description="KRaft: only controller-role nodes report; the cluster-wide sum must be 1. "
                    "0 (or no controller reporting at all) and 2 or more are red."),
    Panel("Active controller", (
        _q("kafka_controller_kafkacontroller_activecontrollercount == 1", "{{instance}}"),),
        kind="stat", width=6),
    Panel("Brokers: active / fenced", (
        _q("max(kafka_controller_kafkacontroller_activebrokercount)", "active"),
        _q("max(kafka_controller_kafkacontroller_fencedbrokercount)", "fenced")), kind="stat",
        width=6),
    Panel("Topics / partitions", (
        _q("max(kafka_controller_kafkacontroller_globaltopiccount)", "topics"),
        _q("max(kafka_controller_kafkacontroller_globalpartitioncount)", "partitions")),
        kind="stat", width=6),
    Panel("Scrape targets up", (_q('up{job=~".*kafka.*"}', "{{job}} {{instance}}"),), width=24,
          height=6),
))

REQUESTS = Row("Requests and saturation", (
    Panel("Request time p99 (ms)", (
        _q('kafka_network_requestmetrics_totaltimems{quantile="0.99", '
           'request=~"Produce|FetchConsumer|OffsetCommit"}', "{{request}} {{instance}}"),),
        unit="ms"),
    Panel("Requests/s", (
        _q('sum by (request) (rate(kafka_network_requestmetrics_requests_total'
           '{request=~"Produce|FetchConsumer|OffsetCommit"}[2m]))', "{{request}}"),)),
    Panel("Request handler idle", (
        _q("kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent", "{{instance}}"),),
        unit="percentunit"),
))

QUORUM = Row("KRaft quorum", (
    Panel("Quorum leader (node id)", (_q("max(kafka_server_raftmetrics_current_leader)"),),
          kind="stat", width=6, base="red", thresholds=((0, "green"),),
          description="-1 (red): no controller knows a leader; nothing can change metadata."),
    Panel("Voters / observers", (
        _q("max(kafka_server_raftmetrics_number_of_voters)", "voters"),
        _q("max(kafka_server_raftmetrics_number_of_observers)", "observers")), kind="stat",
        width=6, description="Voters: 1, 3 or 5 (an odd count; deploy.md, Fewer brokers)."),
    Panel("Voter change in flight / voters unreachable", (
        _q("max(kafka_server_raftmetrics_uncommitted_voter_change)", "change"),
        _q("max(kafka_server_raftmetrics_number_unknown_voter_connections)", "unreachable")),
        kind="stat", width=6, thresholds=((1, "orange"),),
        description="A change stays in flight while a joining controller catches up."),
    Panel("Quorum epoch", (_q("max(kafka_server_raftmetrics_current_epoch)"),), kind="stat",
          width=6, description="Rises by one per leader election."),
    Panel("Metadata log behind the quorum (records)", (
        _q("scalar(max(kafka_server_raftmetrics_high_watermark)) "
           "- kafka_server_raftmetrics_high_watermark", "{{instance}}"),),
        description="Each controller's high watermark behind the highest; a restarted broker "
                    "rejoins the roll only once this is near 0."),
    Panel("Metadata applied behind (ms)", (
        _q("kafka_server_brokermetadatametrics_last_applied_record_lag_ms", "{{instance}}"),),
        unit="ms", description="How old the newest metadata each broker has applied is."),
))

# The brokers' JVMs. The lag exporter is a Python process with process_* series of its own.
BROKER = 'job=~".*kafka.*", job!~".*exporter.*"'

JVM = Row("Broker JVM and host", (
    Panel("CPU (cores)", (_q(f"rate(process_cpu_seconds_total{{{BROKER}}}[5m])", "{{instance}}"),)),
    Panel("Heap used and max", (
        _q(f'jvm_memory_used_bytes{{area="heap", {BROKER}}}', "used {{instance}}"),
        _q(f'jvm_memory_max_bytes{{area="heap", {BROKER}}}', "max {{instance}}")), unit="bytes"),
    Panel("GC time (share of wall time)", (
        _q(f"sum by (instance) (rate(jvm_gc_collection_seconds_sum{{{BROKER}}}[5m]))",
           "{{instance}}"),), unit="percentunit"),
    Panel("File descriptors used (of the limit)", (
        _q(f"process_open_fds{{{BROKER}}} / process_max_fds{{{BROKER}}}", "{{instance}}"),),
        unit="percentunit", description="Every partition's segments hold files open."),
    Panel("Resident memory (heap, page-cache excluded)", (
        _q(f"process_resident_memory_bytes{{{BROKER}}}", "{{instance}}"),), unit="bytes"),
    Panel("Threads", (_q(f"jvm_threads_current{{{BROKER}}}", "{{instance}}"),)),
))

# Panels whose series come only from a cluster's node metrics (kubelet volume stats on
# Kubernetes, node_exporter elsewhere): the local platform and its tests have neither.
FROM_NODE_METRICS = frozenset({"Data volume free"})

DISK = Row("Disk", (
    Panel("Data volume free", (
        _q("hanzo_stream:kafka_volume_available:ratio",
           "{{persistentvolumeclaim}}{{mountpoint}} {{instance}}"),),
        kind="stat", unit="percentunit", width=8, base="red",
        thresholds=((0.05, "orange"), (0.15, "green")),
        description="The KafkaDiskSpaceLow/Critical alerts' series (monitoring/rules/recording.yaml):"
                    " kubelet volume stats on Kubernetes, node_exporter elsewhere."),
    Panel("Log size by topic", (
        _q(f"sum by (topic) (kafka_log_log_size{{{TOPIC}}})", "{{topic}}"),), unit="bytes", width=8),
    Panel("Log size by broker", (
        _q("sum by (instance) (kafka_log_log_size)", "{{instance}}"),), unit="bytes", width=8),
))


DATASOURCE_VARIABLE = {"name": "datasource", "label": "Prometheus", "type": "datasource",
                       "query": "prometheus", "current": {}, "hide": 0, "options": [], "refresh": 1}


def _variable(name: str, label: str, query: str) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": f"{name}-var"}, "definition": query,
            "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "refresh": 2, "sort": 1, "hide": 0, "options": []}


OVERVIEW = Dashboard(
    uid="hanzo-stream-overview",
    title="Hanzo Stream / Kafka overview",
    rows=(LAG, THROUGHPUT, REPLICATION, CONTROLLER, QUORUM, REQUESTS, JVM, DISK),
    variables=(
        DATASOURCE_VARIABLE,
        _variable("group", "Consumer group", "label_values(kafka_consumergroup_lag, consumergroup)"),
        _variable("topic", "Topic", "label_values(kafka_topic_partition_current_offset, topic)"),
    ),
)

# ---------------------------------------------------------------- LLM usage and settlements

LLM = 'model=~"$model", provider=~"$provider"'
SETTLEMENT_TOPICS = "billing_events|agent_rpc_settlements"
SETTLEMENT_GROUPS = "llm-metrics|billing-agg|rpc-billing"


def _quantile(q: float) -> Query:
    return _q(f"histogram_quantile({q}, sum by (model, le) "
              f"(rate(hanzo_llm_latency_seconds_bucket{{{LLM}}}[5m])))", f"p{int(q * 100)} {{{{model}}}}")


LLM_USAGE = Row("LLM usage (llm-metrics)", (
    Panel("Requests/s by model", (
        _q(f"sum by (model, provider) (rate(hanzo_llm_requests_total{{{LLM}}}[5m]))",
           "{{model}} ({{provider}})"),), width=8),
    Panel("Tokens/s by model and kind", (
        _q(f"sum by (model, kind) (rate(hanzo_llm_tokens_total{{{LLM}}}[5m]))", "{{model}} {{kind}}"),),
        width=8),
    Panel("Cost (USD/h) by model", (
        _q(f"sum by (model, provider) (rate(hanzo_llm_cost_usd_total{{{LLM}}}[5m])) * 3600",
           "{{model}} ({{provider}})"),), unit="currencyUSD", width=8,
        description="Alert LlmCostSpike: threshold in consumers/llm-metrics.yaml (metrics.alerts)."),
    Panel("Latency p50 / p95 / p99 by model", (_quantile(0.5), _quantile(0.95), _quantile(0.99)),
          unit="s", width=16,
          description="From the latency histogram (latency_ms). Alert LlmLatencyP95High: threshold "
                      "in consumers/llm-metrics.yaml (metrics.alerts)."),
    Panel("Cache-hit ratio by model", (
        _q(f"sum by (model) (rate(hanzo_llm_cache_hits_total{{{LLM}}}[5m])) / "
           f"sum by (model) (rate(hanzo_llm_requests_total{{{LLM}}}[5m]))", "{{model}}"),),
        unit="percentunit", width=8),
    Panel("llm_usage records read by llm-metrics, by outcome (/s)", (
        _q("sum by (outcome) (rate(hanzo_llm_metrics_events_total[5m]))", "{{outcome}}"),),
        description="dead_lettered: records that fail schemas/ (on dead_letter, stage job:llm-metrics); "
                    "duplicate: a retried event id counted once."),
))

SETTLEMENTS = Row("Settlements and the new groups", (
    Panel("Settlement records written per hour", (
        _q("sum by (topic) (increase(kafka_topic_partition_current_offset"
           f'{{topic=~"{SETTLEMENT_TOPICS}"}}[1h]))', "{{topic}}"),),
        description="billing-agg -> billing_events (per team and hour), rpc-billing -> "
                    "agent_rpc_settlements (per agent and hour): one record per closed window."),
    Panel("Lag of llm-metrics, billing-agg, rpc-billing", (
        _q(f'sum by (consumergroup) (kafka_consumer_group_lag{{consumergroup=~"{SETTLEMENT_GROUPS}"}})',
           "{{consumergroup}}"),),
        description="Settlement jobs emit an hour once the watermark passes it: a lag that keeps "
                    "growing delays invoices."),
))

LLM_DASHBOARD = Dashboard(
    uid="hanzo-stream-llm",
    title="Hanzo Stream / LLM usage and settlements",
    rows=(LLM_USAGE, SETTLEMENTS),
    tags=("hanzo-stream", "llm", "billing"),
    variables=(
        DATASOURCE_VARIABLE,
        _variable("model", "Model", "label_values(hanzo_llm_requests_total, model)"),
        _variable("provider", "Provider", "label_values(hanzo_llm_requests_total, provider)"),
    ),
)

# ---------------------------------------------------------------- the Spark jobs

SPARK = 'spark_job=~"$spark_job"'
SPARK_JOBS = Row("Spark jobs (each query's progress, hanzo_stream/jobs/progress_metrics.py)", (
    Panel("Batch duration (s)", (
        _q(f"hanzo_stream_spark_batch_duration_seconds{{{SPARK}}}", "{{spark_job}} {{query}}"),),
        unit="s", description="Wall time of each query's last batch. Longer than the trigger "
                              "interval: batches run back to back and the group's lag is queueing."),
    Panel("Rows in vs processed per second", (
        _q(f"sum by (spark_job) (hanzo_stream_spark_input_rows_per_second{{{SPARK}}})",
           "in {{spark_job}}"),
        _q(f"sum by (spark_job) (hanzo_stream_spark_processed_rows_per_second{{{SPARK}}})",
           "processed {{spark_job}}")),
        description="Processed below in for minutes: the job cannot keep up and its lag grows "
                    "(the overview's Consumer lag row); give it executors or a larger batch."),
    Panel("Rows read per second (5m)", (
        _q(f"sum by (spark_job) (rate(hanzo_stream_spark_input_rows_total{{{SPARK}}}[5m]))",
           "{{spark_job}}"),)),
    Panel("State rows", (
        _q(f"sum by (spark_job) (hanzo_stream_spark_state_rows{{{SPARK}}})", "{{spark_job}}"),),
        description="Open windows and deduplication keys (billing's hours); growing without end: "
                    "the watermark does not advance."),
    Panel("State memory", (
        _q(f"sum by (spark_job) (hanzo_stream_spark_state_bytes{{{SPARK}}})", "{{spark_job}}"),),
        unit="bytes"),
    Panel("Seconds since the last progress", (
        _q(f"time() - hanzo_stream_spark_last_progress_timestamp_seconds{{{SPARK}}}",
           "{{spark_job}} {{query}}"),), unit="s",
        description="A running query reports after every batch, and every few seconds when "
                    "idle; a growing value is a stuck driver."),
))

JOBS_DASHBOARD = Dashboard(
    uid="hanzo-stream-jobs",
    title="Hanzo Stream / Spark jobs",
    rows=(SPARK_JOBS,),
    tags=("hanzo-stream", "spark"),
    variables=(
        DATASOURCE_VARIABLE,
        _variable("spark_job", "Job", "label_values(hanzo_stream_spark_batches_total, spark_job)"),
    ),
)

# ---------------------------------------------------------------- dead letters

# Every name below comes from alerts.py (the rules page on the same series) or the monitor.
DL_COUNTER, DL_RECORD, DL_WINDOW = (alerts.DEAD_LETTER_COUNTER, alerts.DEAD_LETTER_RECORD,
                                   alerts.DEAD_LETTER_WINDOW)
DL = ", ".join(f'{label}=~"${label}"' for label in alerts.DEAD_LETTER_LABELS)
DL_TOPIC = f'topic="{dead_letter.TOPIC}"'
OLDEST_OFFSET_METRIC = "kafka_topic_partition_oldest_offset"  # kafka_exporter's log start
# The Prometheus Operator names the job after the Service (dead-letter-monitor), `local up` after
# the group; a namespace prefix is tolerated as for the Kafka jobs.
MONITOR_UP = f'up{{job=~".*{monitor.GROUP}.*"}}'
RUNBOOK = f"Runbook: `{alerts.DEAD_LETTER_RUNBOOK}`"

DL_IN_WINDOW = Panel(
    f"Dead letters in the last {DL_WINDOW}", (_q(f"sum({DL_RECORD}{{{DL}}})", "dead letters"),),
    kind="stat", width=6, thresholds=RED,
    description=f"Exact count over the alert window (`{DL_RECORD}`, the series the DeadLetters "
                "alerts compare with topics.yaml's `dead_letters` thresholds). 0: nothing was "
                "refused lately; no data: the monitor counted nothing since it started, or it is "
                "down (bottom row). Above 0: the table below says which topic, stage and class; "
                f"start at step 1 of the runbook. {RUNBOOK}")

DL_NOW = Row(f"Dead letters now (last {DL_WINDOW}, exact)", (
    DL_IN_WINDOW,
    Panel("Firing dead-letter alerts", (
        _q(f'ALERTS{{alertstate="firing", alertname=~"{alerts.DEAD_LETTER_ALERT}.*"}}'),),
        kind="table", width=18, hide=("alertstate", "consumergroup", "Value"),
        description="One row per PagerDuty incident (alert, source topic, stage, error class); "
                    "DeadLettersCritical silences its own DeadLettersWarning. DeadLettersArriving "
                    f"alone means {dead_letter.TOPIC} grows but the per-class alerts are blind: "
                    f"check the monitor's row at the bottom. {RUNBOOK}"),
    Panel(f"Last {DL_WINDOW} by source topic, stage and error class", (
        _q(f"sort_desc({DL_RECORD}{{{DL}}})"),), kind="table", width=18,
        description="Who refused what, and why. stage `producer:<principal>`: that service sent "
                    "events its schema refuses (its team fixes the producer); `job:<group>`: a job "
                    f"refused them (`schema.*`/`json.*`: still the producer; `{LATE}`: decide "
                    f"with billing; `{FUTURE}`: that producer's clock is ahead). The error "
                    "class names the cause; each record's hs.error.message "
                    f"names the field (runbook step 1 reads them, step 2 finds the cause). A row at 0 "
                    f"had letters earlier but none in {DL_WINDOW}. {RUNBOOK}"),
    Panel(f"Retained on {dead_letter.TOPIC} (replayable)", (
        _q(f"sum({alerts.OFFSET_METRIC}{{{DL_TOPIC}}}) - sum({OLDEST_OFFSET_METRIC}{{{DL_TOPIC}}})",
           "records"),), kind="stat", width=6,
        description=f"Records still on {dead_letter.TOPIC} (all sources, 30 days retention): what "
                    "runbook step 3 can replay once the cause is fixed. Replay within 30 days or "
                    f"the events are gone. {RUNBOOK}"),
))

_RATE_NOTE = ("rate() over 5m: a new label set's first letter does not show here (it appears "
              f"at 1); the exact counts are in the row above. {RUNBOOK}")
DL_RATES = Row("Dead letters per second", (
    Panel("Dead letters/s by source topic", (
        _q(f"sum by (source_topic) (rate({DL_COUNTER}{{{DL}}}[5m]))", "{{source_topic}}"),), width=8,
        description="Which topic's events are being parked. A step up right after a deploy of "
                    f"that topic's producer: roll the deploy back first. {_RATE_NOTE}"),
    Panel("Dead letters/s by stage", (
        _q(f"sum by (stage) (rate({DL_COUNTER}{{{DL}}}[5m]))", "{{stage}}"),), width=8,
        description="Who refuses them: `producer:<principal>` or `job:<group>`; `invalid`: "
                    f"the record carried no valid hs.stage header. {_RATE_NOTE}"),
    Panel("Dead letters/s by error class", (
        _q(f"sum by (error_class) (rate({DL_COUNTER}{{{DL}}}[5m]))", "{{error_class}}"),), width=8,
        description=f"Why: `json.malformed`, `schema.required`, `{LATE}`, ... (`invalid`: no "
                    f"valid hs.error.class header). {_RATE_NOTE}"),
))

DL_MONITOR = Row(f"{monitor.GROUP} (the counters above)", (
    Panel("Monitor up", (_q(MONITOR_UP, "{{instance}}"),), kind="stat", width=6, base="red",
          thresholds=((1, "green"),),
          description="0 or no data: Prometheus cannot scrape the monitor, so the counts above "
                      "stop and the per-class alerts are blind; DeadLettersArriving still fires. "
                      f"Check `kubectl -n hanzo get deploy {monitor.GROUP}` (locally "
                      f"`hanzo-stream local status`) and its log. {RUNBOOK}"),
    Panel(f"{dead_letter.TOPIC} partitions assigned", (
        _q(f"sum({monitor.ASSIGNED_METRIC})", "partitions"),), kind="stat", width=6, base="red",
        thresholds=((1, "green"),),
        description=f"0 while up: the monitor is not in its group (rebalancing, or its principal "
                    f"lost READ on {dead_letter.TOPIC} or on group {monitor.GROUP}: the reconciler "
                    "applies topics.yaml's ACLs)."),
    Panel(f"Monitor lag on {dead_letter.TOPIC}", (
        _q(f'sum by (consumergroup) ({alerts.LAG_METRIC}{{consumergroup="{monitor.GROUP}"}})',
           "{{consumergroup}}"),), width=12,
        description="Dead letters not counted yet: the counts and alerts above are late by this "
                    "many. Growing while the monitor is up: it is stuck and ConsumerStalled pages "
                    f"for {monitor.GROUP} (runbook `{alerts.STALLED_RUNBOOK}`)."),
    Panel("Records read and failed commits (/s)", (
        _q(f"sum(rate({monitor.RECORDS_METRIC}_total[5m]))", "records read"),
        _q(f"sum(rate({monitor.COMMIT_FAILURES_METRIC}_total[5m]))", "failed commits")),
        width=24, height=6,
        description="Failed commits are retried with the next batch; a restart in between counts "
                    "those records again (a dead letter may page twice, never zero times)."),
))

DEAD_LETTER_DASHBOARD = Dashboard(
    uid="hanzo-stream-dead-letters",
    title="Hanzo Stream / Dead letters",
    rows=(DL_NOW, DL_RATES, DL_MONITOR),
    tags=("hanzo-stream", "kafka", "dead-letters"),
    variables=(
        DATASOURCE_VARIABLE,
        *(_variable(label, label.replace("_", " ").capitalize(), f"label_values({DL_COUNTER}, {label})")
          for label in alerts.DEAD_LETTER_LABELS),
    ),
)

DASHBOARDS: tuple[Dashboard, ...] = (OVERVIEW, LLM_DASHBOARD, DEAD_LETTER_DASHBOARD, JOBS_DASHBOARD)


def _panel_json(p: Panel, pid: int, x: int, y: int) -> dict:
    steps = [{"color": p.base, "value": None}] + [{"color": c, "value": v} for v, c in p.thresholds]
    out: dict = {
        "id": pid, "type": p.kind, "title": p.title, "datasource": DATASOURCE,
        "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": p.unit,
                                     "thresholds": {"mode": "absolute", "steps": steps}},
                        "overrides": []},
        "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": q.expr,
                     "legendFormat": q.legend or "__auto", "range": True}
                    for i, q in enumerate(p.queries)],
    }
    if p.kind == "table":  # the current value of each series, its labels as columns
        for t in out["targets"]:
            t.update({"range": False, "instant": True, "format": "table"})
        out["transformations"] = [{"id": "organize", "options": {
            "excludeByName": {c: True for c in ("Time", "__name__", *p.hide)}}}]
    if p.description:
        out["description"] = p.description
    if p.kind == "stat":
        out["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                          "colorMode": "value", "graphMode": "area", "textMode": "auto"}
    elif p.kind == "table":
        out["options"] = {"showHeader": True, "cellHeight": "sm",
                          "sortBy": [{"displayName": "Value", "desc": True}]}
    else:
        out["options"] = {"legend": {"displayMode": "table", "placement": "bottom",
                                     "calcs": ["lastNotNull", "max"]},
                          "tooltip": {"mode": "multi", "sort": "desc"}}
    return out


def to_json(d: Dashboard) -> dict:
    """The importable Grafana model (schema 39; `id: null` so import creates or overwrites by uid)."""
    panels: list[dict] = []
    y, pid = 0, 1
    for row in d.rows:
        panels.append({"id": pid, "type": "row", "title": row.title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y, x, row_h = pid + 1, y + 1, 0, 0
        for p in row.panels:
            if x + p.width > 24:
                x, y, row_h = 0, y + row_h, 0
            panels.append(_panel_json(p, pid, x, y))
            pid, x, row_h = pid + 1, x + p.width, max(row_h, p.height)
        y += row_h
    return {
        "id": None, "uid": d.uid, "title": d.title, "tags": list(d.tags),
        "timezone": "utc", "editable": True, "schemaVersion": 39, "version": 1,
        "refresh": "30s", "time": {"from": "now-3h", "to": "now"},
        "templating": {"list": list(d.variables)},
        "annotations": {"list": [{
            "name": "Firing alerts", "datasource": DATASOURCE, "enable": True,
            "expr": 'ALERTS{alertstate="firing", '
                    'alertname=~"Kafka.*|Consumer.*|DeadLetters.*|Llm.*|SchemaRegistry.*"}',
            "iconColor": "red", "titleFormat": "{{alertname}}", "textFormat": "{{consumergroup}}"}]},
        "panels": panels,
    }


def render(d: Dashboard) -> str:
    return json.dumps(to_json(d), indent=2) + "\n"


# ---------------------------------------------------------------- reading dashboards back

@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    expr: str


def panel_queries(paths: Iterable[Path] | None = None) -> list[PanelQuery]:
    """Every target expression of every panel in the given dashboard files (default: all)."""
    files = sorted(DASHBOARDS_DIR.glob("*.json")) if paths is None else list(paths)
    out = []
    for f in files:
        doc = json.loads(Path(f).read_text())
        stack = list(doc.get("panels", []))
        while stack:
            p = stack.pop(0)
            stack.extend(p.get("panels", []))  # collapsed rows nest their panels
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append(PanelQuery(doc["uid"], p["title"], t["expr"]))
    return out


def expand(expr: str, values: Mapping[str, str] | None = None) -> str:
    """Substitute dashboard variables ($group, ${topic}, ...) as Grafana would; default All (.*)."""
    values = values or {}
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), ".*"), expr)
