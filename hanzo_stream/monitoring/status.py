"""What on-call and `hanzo-stream local status` want at a glance, read from Prometheus.

Same queries as the dashboard (the standard's names), so the terminal and Grafana agree.
Every field is empty/None rather than an error when its series do not exist yet.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from ..core import dead_letter
from . import prom_api


@dataclass
class LiveMetrics:
    lag: dict[str, int] = field(default_factory=dict)  # consumer group -> messages behind
    messages_in_per_sec: dict[str, float] = field(default_factory=dict)  # topic -> msg/s
    bytes_in_per_sec: float = 0.0  # whole cluster
    dead_letters: int | None = None  # records retained on the dead-letter topic
    under_replicated: int | None = None
    active_controllers: int | None = None
    firing: list[str] = field(default_factory=list)  # "AlertName group" of firing alerts

    def as_dict(self) -> dict:
        return asdict(self)


def _vector(url: str, promql: str, label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in prom_api.query(url, promql)}


def _scalar(url: str, promql: str) -> float | None:
    r = prom_api.query(url, promql)
    return float(r[0]["value"][1]) if r else None


def read(url: str) -> LiveMetrics:
    """One snapshot from the Prometheus at `url` (5 instant queries and the alerts list)."""
    lag = _vector(url, "sum by (consumergroup) (kafka_consumer_group_lag)", "consumergroup")
    rates = _vector(url, "kafka_messages_in_per_sec", "topic")
    retained = _scalar(url, f'sum(kafka_topic_partition_current_offset{{topic="{dead_letter.TOPIC}"}}) '
                            f'- sum(kafka_topic_partition_oldest_offset{{topic="{dead_letter.TOPIC}"}})')
    urp = _scalar(url, "sum(kafka_under_replicated_partitions)")
    controllers = _scalar(url, "sum(kafka_controller_kafkacontroller_activecontrollercount)")
    firing = sorted(
        " ".join(filter(None, [a["labels"]["alertname"], a["labels"].get("consumergroup")]))
        for a in prom_api.alerts(url) if a["state"] == "firing")
    return LiveMetrics(
        lag={g: int(v) for g, v in sorted(lag.items())},
        messages_in_per_sec={t: round(v, 2) for t, v in sorted(rates.items())},
        bytes_in_per_sec=round(_scalar(url, "sum(kafka_bytes_in_per_sec)") or 0.0, 1),
        dead_letters=None if retained is None else int(retained),
        under_replicated=None if urp is None else int(urp),
        active_controllers=None if controllers is None else int(controllers),
        firing=firing,
    )


def grouped(firing: list[str]) -> list[str]:
    """Firing alerts once each, with how many series fire it (one dead-letter alert fires per
    topic, stage and class: a dozen lines of the same name say less than one with x12)."""
    return [name if n == 1 else f"{name} x{n}" for name, n in sorted(Counter(firing).items())]


def topic_records(url: str, topic: str) -> int | None:
    """Records ever written to a topic (sum of its partitions' end offsets), per the exporter."""
    v = _scalar(url, f'sum(kafka_topic_partition_current_offset{{topic="{topic}"}})')
    return None if v is None else int(v)


def llm_requests(url: str) -> int | None:
    """LLM requests llm-metrics has counted (its checkpointed counters), all models."""
    v = _scalar(url, "sum(hanzo_llm_requests_total)")
    return None if v is None else int(v)
