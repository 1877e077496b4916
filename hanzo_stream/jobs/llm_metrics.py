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
| `hanzo_llm_dedupe_evicted_total` | counter | ids forgotten by `dedupe_max_ids` before the window ended |

Every count is an integer and cost is an exact Decimal until exposition, so the numbers are a
pure function of the events counted: the live test asserts them to the bucket. The state
serializes to JSON (`to_json`/`from_json`) so a restart continues the same counters
(hanzo_stream/jobs/consumer.py checkpoints it with the offsets it covers).

Settings come from consumers/llm-metrics.yaml `metrics:` (`Settings.of(spec)`): bucket
bounds, the label cardinality cap, the dedupe memory cap and the alert thresholds monitoring/
is generated from; the dedupe window is the spec's top-level `dedupe_window` (a duration).
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
KEYS = {"listen", "latency_buckets", "max_series", "dedupe_max_ids", "alerts"}
MOVED = {"dedupe_window": "moved to top-level dedupe_window, a duration such as 1h"}
DEFAULT_DEDUPE_WINDOW = 3600  # seconds, when the spec has no dedupe_window
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
    dedupe_window_seconds: int = DEFAULT_DEDUPE_WINDOW  # the spec's top-level dedupe_window
    # Ids remembered per partition at most, whatever the window: ~230 bytes each, so 8 partitions
    # on one replica stay within its 512 MiB limit (infra/monitoring.py) during a flood.
    dedupe_max_ids: int = 200_000
    alerts: Alerts = field(default_factory=Alerts)

    @staticmethod
    def of(spec: JobSpec) -> Settings:
        """The spec's `metrics:` block, checked; problems name the file and field."""
        doc = spec.metrics or {}
        where = f"{spec.source_file}: metrics"
        problems = [f"{where}.{k}: unknown key; allowed: {', '.join(sorted(KEYS))}" for k in doc
                    if k not in KEYS and k not in MOVED]
        problems += [f"{where}.{k}: {fix}" for k, fix in MOVED.items() if k in doc]
        window = spec.dedupe_window_seconds
        if window is None:
            window = DEFAULT_DEDUPE_WINDOW
        elif window < 1:
            problems.append(f"{spec.source_file}: dedupe_window: a duration of at least 1s, such as 1h")
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
        for k in ("max_series", "dedupe_max_ids"):
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
                        dedupe_window_seconds=window,
                        dedupe_max_ids=doc.get("dedupe_max_ids", Settings.dedupe_max_ids),
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


@dataclass
class Recent:
    """One partition's remembered ids: id -> time (ms) of its first copy, oldest first."""

    ids: OrderedDict[str, int] = field(default_factory=OrderedDict)
    newest: int | None = None  # the newest record time seen on the partition (ms)


class LlmUsage:
    """The counters, updated per valid event; `published()` is what /metrics shows."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.bounds_ms = [b * 1000 for b in settings.latency_buckets]
        self.series: dict[tuple[str, str], Series] = {}
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.evicted = 0  # ids the cap forgot before their window ended (the window shrank)
        self._recent: dict[int, Recent] = {}

    # -- counting

    def seen(self, partition: int, event_id: str, at_ms: int | None = None, *,
             relearn: bool = False) -> bool:
        """True if this id's first copy on this partition is within `dedupe_window` of the
        newest record time seen there (a retry); else remember it at `at_ms`.

        Times are Kafka record timestamps, not the envelope `timestamp`: the re-read on
        assignment can only seek by record time (offsets_for_times), so only then is the
        window after a restart the one before it; an application's resend gets the time it
        was written, so the window is the delay between the copies, not the event's age; and
        an event's `timestamp` is the sender's data (a replayed or buffered event can be days
        old, a wrong clock can be anywhere), while the record's is the producer library's
        clock, which the broker can bound (message.timestamp.after.max.ms). No timestamp
        (`at_ms` None): the partition's newest time. `relearn`: re-reading ids counted before,
        whose evictions were counted then.
        """
        recent = self._recent.setdefault(partition, Recent())
        if at_ms is not None and (recent.newest is None or at_ms > recent.newest):
            recent.newest = at_ms
        now = recent.newest if recent.newest is not None else 0
        at = now if at_ms is None else at_ms
        horizon = now - self.settings.dedupe_window_seconds * 1000
        while recent.ids and next(iter(recent.ids.values())) < horizon:
            recent.ids.popitem(last=False)  # arrival order: a late arrival may outstay this loop
        first = recent.ids.get(event_id)
        if first is not None and first >= horizon:
            return True
        recent.ids.pop(event_id, None)  # older than the horizon, not yet expired (arrival order)
        if at >= horizon:  # an older first copy would be forgotten at once
            recent.ids[event_id] = at
            if len(recent.ids) > self.settings.dedupe_max_ids:
                _, first_at = recent.ids.popitem(last=False)
                self.evicted += first_at >= horizon and not relearn
        return False

    def forget(self, partition: int, newest: int | None = None) -> None:
        """Drop a partition's remembered ids (revoked, or re-read from before its position);
        `newest`: the newest record time before its position, when known."""
        self._recent.pop(partition, None)
        if newest is not None:
            self._recent[partition] = Recent(newest=newest)

    def remembered(self) -> int:
        """Ids held for dedupe, all partitions (memory: ~230 bytes each)."""
        return sum(len(r.ids) for r in self._recent.values())

    def newest(self, partition: int) -> int | None:
        """The newest record time (ms) seen on a partition: where its window ends."""
        recent = self._recent.get(partition)
        return recent.newest if recent else None

    def observe(self, event: dict[str, Any], partition: int = 0, at_ms: int | None = None) -> str:
        """Count one valid event (numbers parsed as Decimal) written at `at_ms` (its Kafka
        record timestamp); returns its outcome."""
        if self.seen(partition, event["id"], at_ms):
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
                "outcomes": dict(self.outcomes), "dedupe_evicted": self.evicted,
                "series": [{"model": m, "provider": p, **{k: str(v) if isinstance(v, Decimal) else v
                                                         for k, v in vars(s).items()}}
                           for (m, p), s in sorted(self.series.items())]}

    def restore(self, doc: dict[str, Any]) -> None:
        """Continue from a checkpoint. Changed bucket bounds restart the histograms only."""
        same_buckets = doc.get("buckets") == [str(b) for b in self.settings.latency_buckets]
        self.outcomes = {k: int(doc.get("outcomes", {}).get(k, 0)) for k in OUTCOMES}
        self.evicted = int(doc.get("dedupe_evicted", 0))
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
        out.evicted = self.evicted
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
        evicted = CounterMetricFamily("hanzo_llm_dedupe_evicted", "Event ids forgotten by "
                                      "metrics.dedupe_max_ids before dedupe_window ended (their "
                                      "retries count again).", value=self.evicted)
        yield from (requests, hits, tokens, cost, latency, events, evicted)


def _le(bound: Decimal) -> str:
    """A bucket bound as Prometheus writes floats (1 -> 1.0, 0.25 -> 0.25)."""
    return repr(float(bound))
