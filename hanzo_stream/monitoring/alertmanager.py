"""Alert routing as code: the Alertmanager configuration, rendered once for both places.

Every alert goes to PagerDuty through the Events API v2 (`pagerduty_configs`), with
PagerDuty's own fields filled from the alert: `summary` is the alert's summary annotation
(a dead-letter page names the source topic, the stage and the error class), `severity` its
severity label (PagerDuty maps it to urgency: warning low, critical high), `component` the
source topic, `group` the stage or consumer group, `class` the error class. The dedup key is
Alertmanager's: the SHA-256 of the alert group's key (route + grouping labels), so every
notification of one (alert, topic, stage, class) lands on the same incident, across repeats
and Alertmanager restarts, and its resolve closes it.

The routing key is a secret: the configuration names a file (`routing_key_file`), never the
key. Locally that file is <home>/alertmanager/pagerduty-routing-key (0600, from
credentials.json); on Kubernetes a Secret mounted read-only (infra/monitoring.py).

Inhibitions: a critical alert silences its own warning (lag per consumer group, dead letters
per topic/stage/class), and the per-class dead-letter alerts silence the coarse
DeadLettersArriving, which remains the fallback while the monitor is down.
"""

from __future__ import annotations

import hashlib

import yaml

RECEIVER = "pagerduty"
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
GROUP_BY = ("alertname", "consumergroup", "source_topic", "stage", "error_class")


def _first(*labels: str, default: str = "") -> str:
    """A template giving the first of these common labels that is set, else `default`."""
    out = default
    for label in reversed(labels):
        value = f".CommonLabels.{label}"
        out = f"{{{{ if {value} }}}}{{{{ {value} }}}}{{{{ else }}}}{out}{{{{ end }}}}"
    return out


def config(routing_key_file: str, pagerduty_url: str = PAGERDUTY_EVENTS_URL,
           group_wait: str = "30s", group_interval: str = "5m", repeat_interval: str = "4h") -> dict:
    """The configuration as data (unit-tested; `amtool check-config` checks the rendering)."""
    return {
        "route": {
            "receiver": RECEIVER,
            "group_by": list(GROUP_BY),
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": repeat_interval,
        },
        "inhibit_rules": [
            {"source_matchers": ['alertname="ConsumerLagCritical"'],
             "target_matchers": ['alertname="ConsumerLagWarning"'], "equal": ["consumergroup"]},
            {"source_matchers": ['alertname="DeadLettersCritical"'],
             "target_matchers": ['alertname="DeadLettersWarning"'],
             "equal": ["source_topic", "stage", "error_class"]},
            {"source_matchers": ['alertname=~"DeadLetters(Warning|Critical)"'],
             "target_matchers": ['alertname="DeadLettersArriving"']},
        ],
        "receivers": [{
            "name": RECEIVER,
            "pagerduty_configs": [{
                "routing_key_file": routing_key_file,
                "url": pagerduty_url,
                "send_resolved": True,
                "client": "Hanzo Stream",
                "severity": _first("severity", default="error"),
                "description": ("{{ if .CommonAnnotations.summary }}{{ .CommonAnnotations.summary }}"
                                '{{ else }}{{ template "pagerduty.default.description" . }}{{ end }}'),
                "component": _first("source_topic", "topic"),
                "group": _first("stage", "consumergroup"),
                "class": _first("error_class", "alertname"),
                "details": {
                    "alerts": "{{ .Alerts.Firing | len }} firing, {{ .Alerts.Resolved | len }} resolved",
                    "runbook": "{{ .CommonAnnotations.runbook_url }}",
                    "description": "{{ .CommonAnnotations.description }}",
                },
            }],
        }],
    }


def render(routing_key_file: str, pagerduty_url: str = PAGERDUTY_EVENTS_URL, **timing: str) -> str:
    return ("# Written by hanzo_stream.monitoring.alertmanager; the routing key is in the file it"
            " names, never here.\n" + yaml.safe_dump(config(routing_key_file, pagerduty_url, **timing),
                                                     sort_keys=False, width=1000))


def dedup_key(labels: dict[str, str], route_key: str = "{}") -> str:
    """The dedup key Alertmanager sends for an alert group with these grouping labels.

    Alertmanager's group key is `<route key>:{name="value", ...}` over the group_by labels the
    alert has (sorted); the root route's key is `{}`. On-call can compute the incident of an
    alert from its labels, and the tests check Alertmanager really sends this.
    """
    grouped = sorted((k, v) for k, v in labels.items() if k in GROUP_BY and v)
    key = route_key + ":{" + ", ".join(f'{k}="{v}"' for k, v in grouped) + "}"
    return hashlib.sha256(key.encode()).hexdigest()
