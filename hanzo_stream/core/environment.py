"""Every HANZO_STREAM_* environment variable the platform reads or sets, in one table.

docs/environment.md is rendered from it (`python -m hanzo_stream.core.environment`), and
tests/unit/test_environment.py fails when code reads a variable this table does not list, or
the page differs from the table.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from .connection import ENV


@dataclass(frozen=True)
class Variable:
    name: str  # a trailing "_<NAME>" stands for a family (one per principal)
    used_by: str
    meaning: str


CONNECTION = "every command, client and job"

VARIABLES: tuple[Variable, ...] = (
    Variable(ENV["bootstrap"], CONNECTION,
             'Brokers, `host:port[,host:port]`. `eval "$(hanzo-stream local env)"` sets all six '
             "connection variables for the local platform; the matching flags override them."),
    Variable(ENV["security_protocol"], CONNECTION,
             "`SASL_SSL` (default), `SASL_PLAINTEXT`, `SSL` or `PLAINTEXT`."),
    Variable(ENV["sasl_mechanism"], CONNECTION, "`SCRAM-SHA-512` (default) or `PLAIN`."),
    Variable(ENV["username"], CONNECTION, "The principal to log in as."),
    Variable(ENV["password"], CONNECTION, "Its password (prefer this to the flag, which `ps` shows)."),
    Variable(ENV["ca_file"], CONNECTION, "The CA bundle (PEM) the brokers' certificates chain to."),
    Variable("HANZO_STREAM_SECRETS_FILE", "plan, apply; the jobs",
             "A JSON file `{principal: password}`: the SCRAM passwords apply sets, and the jobs "
             "log in with."),
    Variable("HANZO_STREAM_PASSWORD_<NAME>", "plan, apply; the jobs",
             "One principal's SCRAM password (name upper-cased, `-` as `_`); wins over the "
             "secrets file."),
    Variable("HANZO_STREAM_REGISTRY", "the Python client", "The registry file (default `topics.yaml`)."),
    Variable("HANZO_STREAM_SCHEMAS", "the Python client, the jobs",
             "The schemas directory (default `schemas/` of the checkout)."),
    Variable("HANZO_STREAM_SCHEMA_REGISTRY_URL", "schemas register",
             "The schema registry (Confluent API); `hanzo-stream local env` prints the local one."),
    Variable("HANZO_STREAM_SCHEMA_REGISTRY_AUTH", "schemas register", "`user:password` for it."),
    Variable("HANZO_STREAM_HOME", "the local platform, jobs run",
             "Where the local platform keeps data, logs, certificates and credentials (default "
             "`./.hanzo-stream`)."),
    Variable("HANZO_STREAM_CACHE", "install, the local platform, the Kubernetes build",
             "Downloads and builds: jars, Go binaries, images (default "
             "`$XDG_CACHE_HOME/hanzo-stream` or `~/.cache/hanzo-stream`)."),
    Variable("HANZO_STREAM_DEMO_RATE", "local up",
             "The demo producers' events/s over all services (default 20)."),
    Variable("HANZO_STREAM_PROMETHEUS_URL", "local env (sets it)", "The local Prometheus, for queries."),
    Variable("HANZO_STREAM_SQL_URL", "local env (sets it)",
             "analytics-ingest's read-only ClickHouse HTTP endpoint (curl, clickhouse-connect)."),
    Variable("HANZO_STREAM_PAGERDUTY_URL", "the local Alertmanager",
             "Where pages go (default: the local PagerDuty inbox)."),
    Variable("HANZO_STREAM_PAGERDUTY_ROUTING_KEY", "the local Alertmanager and PagerDuty inbox",
             "The Events API routing key pages carry."),
    Variable("HANZO_STREAM_RUNBOOK_BASE_URL", "the local Prometheus",
             "Where alerts' runbook links open: this URL + `docs/runbooks/...` (default the "
             "repository's docs on GitHub; a stack's is its `runbookBaseUrl`)."),
    Variable("HANZO_STREAM_SPARK_MASTER", "jobs run", "Spark master (default `local[2]`)."),
    Variable("HANZO_STREAM_SPARK_LOG_LEVEL", "the Spark jobs", "Spark's log level (default `WARN`)."),
    Variable("HANZO_STREAM_LOCAL_JIT", "local JVMs (brokers, tools, registry, s3proxy, local "
             "Spark drivers) and the local Kubernetes stacks' javaOptions",
             "`quick` (default: C1 only, quick to start) or `full` (C2 too, as production; "
             "bench/ sets it)."),
    Variable("HANZO_STREAM_CHECKPOINT", "the Spark jobs",
             "The checkpoint location (the Pulumi program sets it per job)."),
    Variable("HANZO_STREAM_JOB", "the Spark drivers (set by the Pulumi program)", "The job's name."),
    Variable("HANZO_STREAM_GROUP", "the Spark drivers (set by the Pulumi program)", "Its consumer group."),
    Variable("HANZO_STREAM_TOPICS", "the Spark drivers (set by the Pulumi program)",
             "The topics it reads, comma-separated."),
    Variable("HANZO_STREAM_JOB_METRICS", "the Spark jobs",
             "A JSON-lines file of per-batch numbers (what the benchmarks read)."),
    Variable("HANZO_STREAM_CLICKHOUSE_URL", "analytics-ingest",
             "ClickHouse over HTTP; empty: the embedded chDB of the spec."),
    Variable("HANZO_STREAM_SQL_PORT", "analytics-ingest (embedded chDB)",
             "Port on 127.0.0.1 of its read-only ClickHouse HTTP endpoint (`local sql`); "
             "0 or empty: a free one."),
    Variable("HANZO_STREAM_POSTGRES_DSN", "billing-agg, rpc-billing (their `postgres` sink)",
             "PostgreSQL DSN their hourly records are also upserted into; unset: that copy is off "
             "(`local up` sets it; on Kubernetes the `postgresDsn` secret setting)."),
    Variable("HANZO_STREAM_ARCHIVE_PATH", "audit-archive",
             "Where the Parquet goes (default: the spec's sink)."),
    Variable("HANZO_STREAM_S3_ENDPOINT", "the Spark jobs, the local object store",
             "The S3-compatible endpoint (default: the spec's, else the local platform's)."),
    Variable("HANZO_STREAM_METRICS_LISTEN", "the plain consumers (llm-metrics)",
             "`host:port` of their `/metrics` (`127.0.0.1:0`: any free port)."),
    Variable("HANZO_STREAM_SCRAPE_TARGETS", "the plain consumers, locally",
             "A directory of Prometheus file_sd files where each registers its `/metrics`."),
    Variable("HANZO_STREAM_KUBE_BUILD", ".ci/install, .ci/install-kube.sh",
             "`background`: build Kubernetes, Pulumi and the images beside the test suite (CI)."),
    Variable("HANZO_STREAM_KUBE_REUSE", "the Kubernetes tests",
             "`1`: use (and keep) the node `hanzo-stream local kube up` started."),
    Variable("HANZO_STREAM_KUBE_REPORT", "the Kubernetes tests",
             "Where each change's cost (plan, restarts, losses) is written."),
    Variable("HANZO_STREAM_LANE", "the test suite (tests/lanes.sh sets it)",
             "`unit` or `integration`: the lane a pytest run is, named in its profile."),
    Variable("HANZO_STREAM_LANE_CGROUP", "the test suite (tests/lanes.sh sets it)",
             "The lane's cpuacct cgroup, whose CPU its profile counts (empty: the machine's)."),
    Variable("HANZO_STREAM_SUITE_PROFILE", "the test suite",
             "Where each lane's profile goes (default `.hanzo-stream/suite-profile`)."),
    Variable("HANZO_STREAM_COVERAGE", "tests/lanes.sh",
             "`1`: measure the production code's line coverage in every Python process the "
             "suite starts (bench/suite_profile.py --coverage)."),
)


FAMILY = "_<NAME>"


def listed_as(v: Variable, name: str) -> bool:
    """Whether `name` is `v`, or a member of v's family (HANZO_STREAM_PASSWORD_BILLING_AGG)."""
    if not v.name.endswith(FAMILY):
        return v.name == name
    stem = v.name[:-len(FAMILY)]
    return name == stem or name.startswith(stem + "_")


def covers(name: str) -> bool:
    return any(listed_as(v, name) for v in VARIABLES)


def render() -> str:
    lines = ["# Environment variables",
             "",
             "Every `HANZO_STREAM_*` variable the platform reads or sets, generated from",
             "`hanzo_stream/core/environment.py` (`python -m hanzo_stream.core.environment`). The flags of",
             "each command say in `--help` which variable they override.",
             "",
             "| variable | used by | meaning |",
             "|---|---|---|"]
    lines += [f"| `{v.name}` | {v.used_by} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(lines) + "\n"


DOC = Path(__file__).resolve().parents[2] / "docs" / "environment.md"

if __name__ == "__main__":
    DOC.write_text(render())
    sys.stdout.write(f"wrote {DOC}\n")
