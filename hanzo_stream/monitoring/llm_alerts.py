"""Alert rules on llm-metrics' series, generated from consumers/llm-metrics.yaml `metrics.alerts`.

- LlmLatencyP95High: a model's p95 latency (histogram_quantile over the latency histogram)
  above `latency_p95_seconds` for `latency_for`.
- LlmCostSpike: a model's spend rate above `cost_usd_per_hour` for `cost_for`.

The thresholds live only in the spec; the output is committed as monitoring/rules/llm-alerts.yaml
with its promtool tests (monitoring/tests/llm-alerts.test.yaml), and
`python -m hanzo_stream.monitoring generate --check` fails while they disagree with it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..jobs.llm_metrics import Alerts, Settings
from . import MONITORING_DIR, RULES_DIR

JOB = "llm-metrics"
GENERATED_FILE = RULES_DIR / "llm-alerts.yaml"
GENERATED_TEST_FILE = MONITORING_DIR / "tests" / "llm-alerts.test.yaml"
RUNBOOK = "docs/runbooks/llm-metrics.md"
RATE_WINDOW = "5m"
HEADER = """\
# GENERATED from consumers/llm-metrics.yaml (metrics.alerts) by
# `python -m hanzo_stream.monitoring generate`: do not edit. Change the thresholds in the spec
# and regenerate; CI fails while this file and the spec disagree.
"""


def settings(root: Path = MONITORING_DIR.parent) -> Settings:
    from ..jobs.spec import load_spec
    from ..registry import load_registry

    spec = load_spec(JOB, load_registry(root / "topics.yaml"), root / "consumers", root / ".hanzo-stream")
    return Settings.of(spec)


def latency_expr(a: Alerts) -> str:
    return (f"histogram_quantile(0.95, sum by (model, provider, le) "
            f"(rate(hanzo_llm_latency_seconds_bucket[{RATE_WINDOW}]))) > {a.latency_p95_seconds:g}")


def cost_expr(a: Alerts) -> str:
    return (f"sum by (model, provider) (rate(hanzo_llm_cost_usd_total[{RATE_WINDOW}])) * 3600 "
            f"> {a.cost_usd_per_hour:g}")


def rules(a: Alerts) -> list[dict]:
    return [
        {"alert": "LlmLatencyP95High", "expr": latency_expr(a), "for": a.latency_for,
         "labels": {"severity": "warning", "consumergroup": JOB},
         "annotations": {
             "summary": "{{ $labels.model }} ({{ $labels.provider }}) p95 latency is "
                        "{{ $value | humanizeDuration }} (threshold " f"{a.latency_p95_seconds:g}s)",
             "description": f"95% of the model's requests took longer than {a.latency_p95_seconds:g}s "
                            f"for {a.latency_for}, measured from llm.usage.completed latency_ms. "
                            "Check the provider's status and the gateway's timeouts.",
             "runbook_url": RUNBOOK}},
        {"alert": "LlmCostSpike", "expr": cost_expr(a), "for": a.cost_for,
         "labels": {"severity": "warning", "consumergroup": JOB},
         "annotations": {
             "summary": "{{ $labels.model }} ({{ $labels.provider }}) spends "
                        "${{ $value | humanize }}/h (threshold " f"${a.cost_usd_per_hour:g}/h)",
             "description": f"Spend on the model above ${a.cost_usd_per_hour:g} per hour for {a.cost_for}, "
                            "from llm.usage.completed cost_usd. A runaway client or a price change: "
                            "find the team in billing_events.",
             "runbook_url": RUNBOOK}},
    ]


def render(s: Settings) -> str:
    return HEADER + yaml.safe_dump({"groups": [{"name": "hanzo-stream-llm", "rules": rules(s.alerts)}]},
                                   sort_keys=False, width=1000, allow_unicode=True)


def _series(metric: str, model: str, values: str, **labels: str) -> dict:
    extra = "".join(f', {k}="{v}"' for k, v in labels.items())
    return {"series": f'{metric}{{job="{JOB}", instance="llm-metrics:9464", model="{model}", '
                      f'provider="p"{extra}}}', "values": values}


def _minutes(d: str) -> int:
    from ..jobs.spec import seconds

    return int(seconds(d) // 60)


def tests(s: Settings) -> list[dict]:
    """promtool cases from the thresholds: quiet below them, firing above them for long enough,
    and another model that stays below never fires. Values are exact in a steady state: all
    requests of a window in one bucket, spend at a constant rate."""
    a = s.alerts
    t = a.latency_p95_seconds
    bounds = [t / 3, t, 2 * t]  # fast: all in (0, t/3] -> p95 0.95 t/3; slow: (t, 2t] -> 1.95 t
    lat_for, cost_for = _minutes(a.latency_for), _minutes(a.cost_for)
    quiet_until = 20  # minutes 0..19 fast, then slow
    n = quiet_until + 5 + lat_for + 5

    def buckets(model: str, slow_from: int | None) -> list[dict]:
        """100 requests a minute, all fast; from `slow_from` on all in (t, 2t]: the two
        lower buckets stop growing, 2t and +Inf keep counting them."""
        out = []
        for i, le in enumerate([*(f"{b:g}" for b in bounds), "+Inf"]):
            values = f"0+100x{n}"
            if slow_from is not None and i < 2:
                values = f"0+100x{slow_from - 1} {100 * (slow_from - 1)}+0x{n - slow_from + 1}"
            out.append(_series("hanzo_llm_latency_seconds_bucket", model, values, le=le))
        return out

    rule_lat, rule_cost = rules(a)

    def firing(rule: dict, model: str, value: str) -> list[dict]:
        ann = dict(rule["annotations"])
        ann["summary"] = (ann["summary"].replace("{{ $labels.model }}", model)
                          .replace("{{ $labels.provider }}", "p")
                          .replace("{{ $value | humanizeDuration }}", value)
                          .replace("{{ $value | humanize }}", value))
        return [{"exp_labels": {**rule["labels"], "model": model, "provider": "p"}, "exp_annotations": ann}]

    slow_p95 = f"{1.95 * t:g}s"
    latency = {
        "name": f"p95 latency above {t:g}s for {a.latency_for}", "interval": "1m",
        "input_series": [*buckets("slow-model", quiet_until), *buckets("fast-model", None)],
        "alert_rule_test": [
            {"eval_time": f"{quiet_until - 1}m", "alertname": "LlmLatencyP95High", "exp_alerts": []},
            {"eval_time": f"{quiet_until + lat_for - 1}m", "alertname": "LlmLatencyP95High",
             "exp_alerts": []},  # slow for less than `for`: pending
            {"eval_time": f"{n}m", "alertname": "LlmLatencyP95High",
             "exp_alerts": firing(rule_lat, "slow-model", slow_p95)}]}
    c = a.cost_usd_per_hour
    m = quiet_until + 5 + cost_for + 5
    spend = {
        "name": f"spend above ${c:g}/h for {a.cost_for}", "interval": "1m",
        "input_series": [
            _series("hanzo_llm_cost_usd_total", "spiky-model",
                    f"0+{c / 120:g}x{quiet_until} {c / 120 * quiet_until:g}+{c / 20:g}x{m - quiet_until}"),
            _series("hanzo_llm_cost_usd_total", "steady-model", f"0+{c / 120:g}x{m}")],
        "alert_rule_test": [
            {"eval_time": f"{quiet_until - 1}m", "alertname": "LlmCostSpike", "exp_alerts": []},
            {"eval_time": f"{quiet_until + cost_for - 1}m", "alertname": "LlmCostSpike",
             "exp_alerts": []},
            {"eval_time": f"{m}m", "alertname": "LlmCostSpike",
             "exp_alerts": firing(rule_cost, "spiky-model", _humanize(3 * c))}]}
    return [latency, spend]


def _humanize(v: float) -> str:
    from .alerts import _humanize as humanize

    return humanize(v)


def render_tests(s: Settings) -> str:
    doc = {"rule_files": [f"../rules/{GENERATED_FILE.name}"], "evaluation_interval": "1m",
           "tests": tests(s)}
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True)
