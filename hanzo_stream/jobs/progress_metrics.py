"""A Spark job's own /metrics, from each query's progress: how long a batch takes, the rate
rows arrive at against the rate they are processed at, rows read, and the state kept. The
on-call's first question about a lagging Spark group (is it slow, or is it fed faster than
it can go?) is answered by the dashboard's Spark row from these.

Served when HANZO_STREAM_METRICS_LISTEN is set (the local platform sets it for every job and
announces it to Prometheus through HANZO_STREAM_SCRAPE_TARGETS, as for the plain consumers).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

PREFIX = "hanzo_stream_spark"


class ProgressMetrics:
    """A prometheus_client collector over the latest progress of each of a job's queries."""

    def __init__(self, job: str):
        self.job = job
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, Any]] = {}
        self._rows: Counter[str] = Counter()
        self._batches: Counter[str] = Counter()
        self._duplicates: Counter[str] = Counter()
        self._late: Counter[str] = Counter()

    def update(self, progress: dict[str, Any]) -> None:
        """One StreamingQueryProgress (as JSON); a hook of the job's listener."""
        query = progress.get("name") or progress.get("id") or "query"
        with self._lock:
            self._latest[query] = progress
            self._rows[query] += int(progress.get("numInputRows") or 0)
            self._batches[query] += 1
            duplicates, late = dropped(progress)
            self._duplicates[query] += duplicates
            self._late[query] += late

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["spark_job", "query"]  # not "job": Prometheus keeps that for the scrape job
        fams = {
            "batch": GaugeMetricFamily(f"{PREFIX}_batch_duration_seconds",
                                       "Wall time of the query's last batch.", labels=labels),
            "in": GaugeMetricFamily(f"{PREFIX}_input_rows_per_second",
                                    "Rows arriving per second over the last batch.", labels=labels),
            "done": GaugeMetricFamily(f"{PREFIX}_processed_rows_per_second",
                                      "Rows processed per second in the last batch.", labels=labels),
            "state_rows": GaugeMetricFamily(f"{PREFIX}_state_rows",
                                            "Rows in the query's state stores.", labels=labels),
            "state_bytes": GaugeMetricFamily(f"{PREFIX}_state_bytes",
                                             "Memory the query's state stores use.", labels=labels),
            "at": GaugeMetricFamily(f"{PREFIX}_last_progress_timestamp_seconds",
                                    "When the query last reported progress.", labels=labels),
            "rows": CounterMetricFamily(f"{PREFIX}_input_rows", "Rows the query has read.",
                                        labels=labels),
            "batches": CounterMetricFamily(f"{PREFIX}_batches", "Batches the query has run.",
                                           labels=labels),
            "duplicates": CounterMetricFamily(
                f"{PREFIX}_duplicates_dropped", "Second copies of an envelope id dropped by "
                "dropDuplicatesWithinWatermark (at-least-once delivery).", labels=labels),
            "late": CounterMetricFamily(
                f"{PREFIX}_late_rows_dropped", "Rows a stateful operator dropped as older than "
                "its watermark.", labels=labels),
        }
        with self._lock:
            latest, rows, batches = dict(self._latest), dict(self._rows), dict(self._batches)
            duplicates, late = dict(self._duplicates), dict(self._late)
        for query, p in sorted(latest.items()):
            at = [self.job, query]
            state = p.get("stateOperators") or []
            fams["batch"].add_metric(at, float(p.get("batchDuration") or 0) / 1000)
            fams["in"].add_metric(at, _number(p.get("inputRowsPerSecond")))
            fams["done"].add_metric(at, _number(p.get("processedRowsPerSecond")))
            fams["state_rows"].add_metric(at, sum(int(s.get("numRowsTotal") or 0) for s in state))
            fams["state_bytes"].add_metric(at, sum(int(s.get("memoryUsedBytes") or 0) for s in state))
            fams["at"].add_metric(at, _timestamp(p.get("timestamp")))
            fams["rows"].add_metric(at, rows[query])
            fams["batches"].add_metric(at, batches[query])
            fams["duplicates"].add_metric(at, duplicates.get(query, 0))
            fams["late"].add_metric(at, late.get(query, 0))
        yield from fams.values()


def dropped(progress: dict[str, Any]) -> tuple[int, int]:
    """One batch's rows its stateful operators dropped: (duplicate ids, older than the watermark)."""
    ops = progress.get("stateOperators") or []
    return (sum(int((op.get("customMetrics") or {}).get("numDroppedDuplicateRows") or 0) for op in ops),
            sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in ops))


def _number(v: Any) -> float:
    """Spark reports NaN (or leaves the field out) for a batch without rows: 0 rows/s."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if f != f else f


def _timestamp(v: Any) -> float:
    try:
        return datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
