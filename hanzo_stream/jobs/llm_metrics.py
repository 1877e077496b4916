"""llm-metrics: llm.usage.completed events -> Prometheus series per model and provider.

What it counts, from the events' own fields (schemas/events/llm.usage.completed.json):

| series | type | from |
|---|---|---|
| `hanzo_llm_requests_total{model,provider}` | counter | one per event |
| `hanzo_llm_cache_hits_total{model,provider}` | counter | events with `cache_hit: true` |
| `hanzo_llm_tokens_total{model,provider,kind}` | counter | kind prompt, completion: those fields |
| `hanzo_llm_cost_usd_total{model,provider}` | counter | `cost_usd`, summed exactly as decimals |
| `hanzo_llm_latency_seconds{model,provider}` | histogram | `latency_ms` (optional: absent, not observed) |
| `hanzo_llm_metrics_events_total{outcome}` | counter | counted, duplicate (same id again), dead_lettered |

Every count is an integer and cost is an exact Decimal until exposition, so the numbers are a
pure function of the events counted: the live test asserts them to the bucket. The state
serializes to JSON (`to_json`/`from_json`) so a restart continues the same counters
(hanzo_stream/jobs/consumer.py checkpoints it with the offsets it covers).

Settings come from consumers/llm-metrics.yaml `metrics:` (`Settings.of(spec)`): bucket
bounds, the label cardinality cap and the alert thresholds monitoring/ is generated from.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .spec import JobSpec, SpecInvalid

OTHER = "_other"  # model and provider label once max_series pairs exist
OUTCOMES = ("counted", "duplicate", "dead_lettered")
KEYS = {"listen", "latency_buckets", "max_series", "dedupe_window", "alerts"}
ALERT_KEYS = {"latency_p95_seconds", "latency_for", "cost_usd_per_hour", "cost_for"}


@dataclass(frozen=True)
class Alerts:
    """Thresholds of the generated alerts (hanzo_stream/monitoring/llm_alerts.py)."""

    latency_p95_seconds: float = 30.0
    latency_for: str = "10m"
    cost_usd_per_hour: float = 100.0
    cost_for: str = "15m"


@dataclass(frozen=True)
class Settings:
    listen: str = "0.0.0.0:9464"  # host:port of /metrics; HANZO_STREAM_METRICS_LISTEN overrides
    latency_buckets: tuple[Decimal, ...] = tuple(Decimal(b) for b in (
        "0.25", "0.5", "1", "2.5", "5", "10", "20", "30", "60", "120"))  # seconds
    max_series: int = 500  # distinct (model, provider) pairs before the rest count as _other
    dedupe_window: int = 2_000  # recent event ids remembered per partition (re-read on assignment)
    alerts: Alerts = field(default_factory=Alerts)

    @staticmethod
    def of(spec: JobSpec) -> Settings:
        """The spec's `metrics:` block, checked; problems name the file and field."""
        doc = spec.metrics or {}
        where = f"{spec.source_file}: metrics"
        problems = [f"{where}.{k}: unknown key; allowed: {', '.join(sorted(KEYS))}" for k in doc
                    if k not in KEYS]
        alerts = doc.get("alerts") or {}
        problems += [f"{where}.alerts.{k}: unknown key; allowed: {', '.join(sorted(ALERT_KEYS))}"
                     for k in alerts if k not in ALERT_KEYS]
        buckets = doc.get("latency_buckets", Settings.latency_buckets)
        try:
            bounds = tuple(Decimal(str(b)) for b in buckets)
        except ArithmeticError:
            bounds = ()
        if not bounds or any(b <= 0 for b in bounds) or list(bounds) != sorted(set(bounds)):
            problems.append(f"{where}.latency_buckets: increasing positive seconds, e.g. [0.5, 1, 2.5]")
        for k in ("max_series", "dedupe_window"):
            v = doc.get(k, getattr(Settings, k))
            if not isinstance(v, int) or v < 1:
                problems.append(f"{where}.{k}: a positive integer")
        for k in ("latency_p95_seconds", "cost_usd_per_hour"):
            v = alerts.get(k, getattr(Alerts, k))
            if not isinstance(v, int | float) or v <= 0:
                problems.append(f"{where}.alerts.{k}: a positive number")
        if problems:
            raise SpecInvalid(problems)
        return Settings(listen=str(doc.get("listen", Settings.listen)), latency_buckets=bounds,
                        max_series=doc.get("max_series", Settings.max_series),
                        dedupe_window=doc.get("dedupe_window", Settings.dedupe_window),
                        alerts=Alerts(**{k: alerts[k] for k in ALERT_KEYS if k in alerts}))


@dataclass
class Series:
    """Everything counted for one (model, provider)."""

    requests: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    latency_count: int = 0
    latency_sum_ms: int = 0
    latency_buckets: list[int] = field(default_factory=list)  # per bucket, not cumulative


class LlmUsage:
    """The counters, updated per valid event; `published()` is what /metrics shows."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.bounds_ms = [b * 1000 for b in settings.latency_buckets]
        self.series: dict[tuple[str, str], Series] = {}
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self._recent: dict[int, OrderedDict[str, None]] = {}

    # -- counting

    def seen(self, partition: int, event_id: str) -> bool:
        """True if this id was counted recently on this partition (a producer retry)."""
        recent = self._recent.setdefault(partition, OrderedDict())
        if event_id in recent:
            recent.move_to_end(event_id)
            return True
        recent[event_id] = None
        if len(recent) > self.settings.dedupe_window:
            recent.popitem(last=False)
        return False

    def forget(self, partition: int) -> None:
        """Drop a partition's remembered ids (it is re-read from before its position)."""
        self._recent.pop(partition, None)

    def observe(self, event: dict[str, Any], partition: int = 0) -> str:
        """Count one valid event (numbers parsed as Decimal); returns its outcome."""
        if self.seen(partition, event["id"]):
            self.outcomes["duplicate"] += 1
            return "duplicate"
        d = event["data"]
        s = self._series(d["model"], d["provider"])
        s.requests += 1
        s.cache_hits += d.get("cache_hit") is True
        s.prompt_tokens += int(d["prompt_tokens"])
        s.completion_tokens += int(d["completion_tokens"])
        s.cost_usd += Decimal(d["cost_usd"])
        if d.get("latency_ms") is not None:
            ms = int(d["latency_ms"])
            s.latency_count += 1
            s.latency_sum_ms += ms
            i = next((i for i, b in enumerate(self.bounds_ms) if ms <= b), len(self.bounds_ms))
            if i < len(self.bounds_ms):  # above the last bound: only +Inf (the count) has it
                s.latency_buckets[i] += 1
        self.outcomes["counted"] += 1
        return "counted"

    def dead_lettered(self, n: int = 1) -> None:
        self.outcomes["dead_lettered"] += n

    def _series(self, model: str, provider: str) -> Series:
        key = (model, provider)
        if key not in self.series and len(self.series) >= self.settings.max_series:
            key = (OTHER, OTHER)  # bounded cardinality: an unbounded label set would sink Prometheus
        if key not in self.series:
            self.series[key] = Series(latency_buckets=[0] * len(self.bounds_ms))
        return self.series[key]

    # -- state

    def to_json(self) -> dict[str, Any]:
        return {"buckets": [str(b) for b in self.settings.latency_buckets],
                "outcomes": dict(self.outcomes),
                "series": [{"model": m, "provider": p, **{k: str(v) if isinstance(v, Decimal) else v
                                                         for k, v in vars(s).items()}}
                           for (m, p), s in sorted(self.series.items())]}

    def restore(self, doc: dict[str, Any]) -> None:
        """Continue from a checkpoint. Changed bucket bounds restart the histograms only."""
        same_buckets = doc.get("buckets") == [str(b) for b in self.settings.latency_buckets]
        self.outcomes = {k: int(doc.get("outcomes", {}).get(k, 0)) for k in OUTCOMES}
        self.series = {}
        for row in doc.get("series", []):
            s = Series(requests=row["requests"], cache_hits=row["cache_hits"],
                       prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
                       cost_usd=Decimal(row["cost_usd"]),
                       latency_buckets=[0] * len(self.bounds_ms))
            if same_buckets:
                s.latency_count, s.latency_sum_ms = row["latency_count"], row["latency_sum_ms"]
                s.latency_buckets = list(row["latency_buckets"])
            self.series[(row["model"], row["provider"])] = s

    def snapshot(self) -> LlmUsage:
        """A frozen copy for /metrics: what the last checkpoint covers, nothing newer."""
        out = LlmUsage.__new__(LlmUsage)
        out.settings, out.bounds_ms = self.settings, self.bounds_ms
        out.series, out.outcomes = copy.deepcopy(self.series), dict(self.outcomes)
        out._recent = {}
        return out

    # -- exposition

    def collect(self) -> Iterator[Any]:
        """prometheus_client metric families (a custom collector's collect())."""
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        labels = ["model", "provider"]
        requests = CounterMetricFamily("hanzo_llm_requests", "LLM requests completed (llm_usage events).",
                                       labels=labels)
        hits = CounterMetricFamily("hanzo_llm_cache_hits", "LLM requests served from the gateway cache.",
                                   labels=labels)
        tokens = CounterMetricFamily("hanzo_llm_tokens", "Tokens processed, by kind (prompt, completion).",
                                     labels=[*labels, "kind"])
        cost = CounterMetricFamily("hanzo_llm_cost_usd", "Cost in US dollars (exact decimal sum of "
                                   "cost_usd).", labels=labels)
        latency = HistogramMetricFamily("hanzo_llm_latency_seconds",
                                        "End-to-end request latency (latency_ms), per model and provider.",
                                        labels=labels)
        for (model, provider), s in sorted(self.series.items()):
            lv = [model, provider]
            requests.add_metric(lv, s.requests)
            hits.add_metric(lv, s.cache_hits)
            tokens.add_metric([*lv, "prompt"], s.prompt_tokens)
            tokens.add_metric([*lv, "completion"], s.completion_tokens)
            cost.add_metric(lv, float(s.cost_usd))
            cumulative, running = [], 0
            for bound, n in zip(self.settings.latency_buckets, s.latency_buckets, strict=True):
                running += n
                cumulative.append((_le(bound), running))
            cumulative.append(("+Inf", s.latency_count))
            latency.add_metric(lv, cumulative, sum_value=s.latency_sum_ms / 1000)
        events = CounterMetricFamily("hanzo_llm_metrics_events", "llm_usage records read by llm-metrics, "
                                     "by outcome.", labels=["outcome"])
        for k in OUTCOMES:
            events.add_metric([k], self.outcomes[k])
        yield from (requests, hits, tokens, cost, latency, events)


def _le(bound: Decimal) -> str:
    """A bucket bound as Prometheus writes floats (1 -> 1.0, 0.25 -> 0.25)."""
    return repr(float(bound))
