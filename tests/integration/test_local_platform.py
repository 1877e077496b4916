"""The README's first command, for real: `hanzo-stream local up` brings up the whole platform.

One platform for the module, in its own HANZO_STREAM_HOME: the broker (SASL_SSL, ACLs, JMX
agent), the reconciler, Apicurio with the schemas registered, the lag exporter, Prometheus
with the project's rules, the four Spark jobs and llm-metrics as their own principals and the
demo traffic. `up` itself only returns 0 once rows reached ClickHouse, billing windows reached
billing_events, RPC settlements agent_rpc_settlements, llm-metrics counted LLM requests, audit
files were committed, dead letters arrived and every job's lag is in Prometheus. The tests
then check the pieces from the outside, stop a Spark job to watch its lag rise and drain in
Prometheus, and tear everything down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hanzo_stream.jobs import process
from hanzo_stream.local import pager, prometheus, schema_registry
from hanzo_stream.monitoring import dashboards
from tests import suite_profile
from tests.integration.conftest import exports, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JOBS = ("analytics-ingest", "audit-archive", "billing-agg", "llm-metrics", "rpc-billing")


@dataclass
class Platform:
    home: Path
    env: dict[str, str]
    up_output: str

    def cli(self, *args: str, timeout: float = 600, extra_env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hanzo_stream", *args], cwd=ROOT,
                              env=self.env | (extra_env or {}), capture_output=True, text=True,
                              timeout=timeout)

    def status(self) -> dict:
        res = self.cli("local", "status", "--json", timeout=120)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    @property
    def prometheus_url(self) -> str:
        url = prometheus.url(self.home / "prometheus")
        assert url, "prometheus is not running"
        return url

    def lag(self, group: str) -> float | None:
        return self._sum(f'kafka_consumer_group_lag{{consumergroup="{group}"}}')

    def committed(self, group: str) -> float | None:
        """The group's committed offsets, summed over its topics' partitions."""
        return self._sum(f'kafka_consumergroup_current_offset_sum{{consumergroup="{group}"}}')

    def topic_end(self, group: str) -> float | None:
        """The end offsets of the group's topics, summed over their partitions."""
        return self._sum('kafka_topic_partition_current_offset and on(topic) '
                         f'kafka_consumergroup_current_offset_sum{{consumergroup="{group}"}}')

    def _sum(self, selector: str) -> float | None:
        r = prometheus.query(self.prometheus_url, f"sum({selector})")
        return float(r[0]["value"][1]) if r else None


@pytest.fixture(scope="module")
def platform(tmp_path_factory) -> Iterator[Platform]:
    home = tmp_path_factory.mktemp("platform")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANZO_STREAM_")}
    env |= {"HANZO_STREAM_HOME": str(home), "HANZO_STREAM_DEMO_RATE": "30"}
    p = Platform(home, env, "")
    try:
        res = p.cli("local", "up", "--wait", "480", timeout=900)
        p.up_output = res.stdout + res.stderr
        assert res.returncode == 0, p.up_output[-6000:]
        yield p
    finally:
        p.cli("local", "down", timeout=300)


def test_up_waits_until_every_part_of_the_pipeline_delivered(platform: Platform) -> None:
    out = platform.up_output
    for component in ("kafka", "reconcile", "schema-registry", "schemas", "object-store",
                      "postgres", "kafka-exporter", "prometheus", *JOBS, "demo"):
        assert f"✓ {component}:" in out, f"{component} not reported started:\n{out[-3000:]}"
    flat = " ".join(out.split())  # rich wraps long lines at the terminal's width
    assert ("events reach ClickHouse, billing_events (and PostgreSQL), agent_rpc_settlements, "
            "llm-metrics and the audit") in flat
    assert "password" not in out.lower()


def test_status_shows_every_component_and_the_pipeline(platform: Platform) -> None:
    st = platform.status()
    comps, pipe = st["components"], st["pipeline"]
    for name in ("kafka", "schema-registry", "object-store", "postgres", "kafka-exporter", "prometheus",
                 *JOBS, "demo"):
        assert comps[name]["running"] is True, (name, comps[name])
    assert comps["reconcile"]["converged"] is True
    assert comps["schemas"]["subjects"] == 13  # every event type on a registry topic
    assert set(JOBS) <= set(pipe["lag"])
    assert pipe["clickhouse_rows"] > 0 and pipe["billing_events"] > 0 and pipe["audit_objects"] > 0
    assert pipe["settlements"] > 0 and pipe["llm_requests"] > 0  # rpc-billing, llm-metrics
    assert pipe["billing_rows"] > 0  # PostgreSQL
    assert pipe["dead_letters"] > 0
    assert pipe["under_replicated"] == 0 and pipe["active_controllers"] == 1
    assert pipe["messages_in_per_sec"]["events_plugin_ingestion"] > 0


def test_the_audit_archive_is_on_the_object_store_for_any_s3_client(platform: Platform) -> None:
    """boto3, with the platform's keys, lists and reads what audit-archive wrote through s3a;
    the count `local status` shows is the sink log's, a subset of what is listed."""
    import io

    import pyarrow.parquet as pq

    from hanzo_stream.jobs import s3
    from hanzo_stream.local import credentials, object_store

    creds = credentials.of_home(platform.home)
    client = object_store.access(platform.home / object_store.NAME, creds).client()
    # The sink log first, the listing after: the job keeps writing, and what was committed
    # before the listing is in it (listed first, a commit in between broke the count once).
    committed = platform.status()["pipeline"]["audit_objects"]
    keys = [k for k in s3.list_keys(client, "hanzo-audit", "audit_log/") if k.endswith(".parquet")]
    assert 0 < committed <= len(keys)
    table = pq.read_table(io.BytesIO(client.get_object(Bucket="hanzo-audit", Key=keys[0])["Body"].read()))
    assert table.num_rows > 0 and {"id", "type", "raw", "kafka_offset"} <= set(table.column_names)
    assert s3.list_keys(client, "hanzo-stream", "checkpoints/audit-archive/archive/commits/")


def test_the_docs_blocks_for_a_running_platform_run_as_written(platform: Platform) -> None:
    """README.md's second block (local env, plan, apply, a service's login in a subshell) and
    the runbooks' local commands, pasted into a shell as a reader has it at that point."""
    from tests import docs_blocks

    readme = docs_blocks.run("README.md", ["local-env"], platform.env, timeout=300,
                             then='echo "after: $HANZO_STREAM_SASL_USERNAME"\n').stdout
    # plan exited 0 (set -e): converged; the subshell logged in as the service, the shell stayed admin
    assert "logged in as llm-gateway" in readme and readme.rstrip().endswith("after: admin"), readme
    reader = platform.env | _local_env(platform)  # `eval "$(hanzo-stream local env)"` done before
    queries = docs_blocks.run("docs/monitoring.md", ["queries"], reader).stdout
    assert queries.count('"status":"success"') == 2, queries
    status = docs_blocks.run("docs/runbooks/consumer-stalled.md", ["status"], reader)
    assert "billing-agg" in status.stderr, status  # `local status` draws its table on stderr
    metrics = docs_blocks.run("docs/runbooks/llm-metrics.md", ["is-it-the-metrics"], reader).stdout
    assert [ln for ln in metrics.splitlines() if ln.startswith("llm-metrics") and "llm_usage" in ln], metrics
    hole = docs_blocks.run("docs/runbooks/retention-outran-job.md", ["measure-the-hole"], platform.env).stdout
    assert [ln for ln in hole.splitlines() if ln.startswith("llm_usage:")], hole  # log start offsets
    assert [ln for ln in hole.splitlines() if ln.startswith("billing-agg") and "llm_usage" in ln], hole


def test_local_env_points_the_cli_at_the_platform(platform: Platform) -> None:
    exported = _local_env(platform)
    assert exported["HANZO_STREAM_SECURITY_PROTOCOL"] == "SASL_SSL"
    reg = platform.cli("schemas", "register", "--json", extra_env=exported, timeout=120)
    assert reg.returncode == 0, reg.stdout + reg.stderr
    assert {o["action"] for o in json.loads(reg.stdout)} == {"unchanged"}


def test_broken_demo_events_are_dead_lettered_by_the_client_and_by_each_job(platform: Platform) -> None:
    """Every service's 40th event is refused by its client, its 80th only the Spark job sees."""
    from confluent_kafka import Consumer, TopicPartition

    from hanzo_stream.core import dead_letter as dl
    from hanzo_stream.local import credentials, kafka

    producers = {"producer:insights-capture", "producer:llm-gateway", "producer:iam-service"}
    wanted = producers | {f"job:{j}" for j in JOBS}
    cluster = kafka.LocalCluster.load(platform.home / "kafka")
    creds = credentials.of_home(platform.home)
    c = Consumer(cluster.connection("admin", creds.admin).confluent()
                 | {"group.id": "test-dead-letters", "enable.auto.commit": False})
    stages: dict[str, int] = {}
    try:
        c.assign([TopicPartition(dl.TOPIC, 0, 0)])
        deadline = time.monotonic() + 180  # the slowest stage: audit-archive's 30 s trigger
        while not wanted <= set(stages) and time.monotonic() < deadline:
            m = c.poll(2)
            if m is None or m.error():
                continue
            h = dict(m.headers() or [])
            assert m.value() is not None and h[dl.H_ERROR_MESSAGE], h  # original bytes + why
            assert int(h[dl.H_SOURCE_PARTITION]) >= -1 and h[dl.H_SOURCE_TOPIC], h
            stage = h[dl.H_STAGE].decode()
            stages[stage] = stages.get(stage, 0) + 1
    finally:
        c.close()
    assert wanted <= set(stages), f"missing {wanted - set(stages)}; got {stages}"


def _billing_events(platform: Platform) -> dict[str, dict]:
    """billing_events up to its end now, by billing_id (decimals exact)."""
    from decimal import Decimal

    from confluent_kafka import Consumer, TopicPartition

    from hanzo_stream.local import credentials, kafka

    cluster = kafka.LocalCluster.load(platform.home / "kafka")
    c = Consumer(cluster.connection("admin", credentials.of_home(platform.home).admin).confluent()
                 | {"group.id": "test-billing-rows", "enable.auto.commit": False})
    out: dict[str, dict] = {}
    try:
        parts = c.list_topics("billing_events", timeout=30).topics["billing_events"].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition("billing_events", p), timeout=30)[1]
                for p in parts}
        c.assign([TopicPartition("billing_events", p, 0) for p, end in ends.items() if end > 0])
        at = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 120
        while any(at[p] < end for p, end in ends.items()) and time.monotonic() < deadline:
            m = c.poll(1)
            if m is None or m.error():
                continue
            at[m.partition()] = m.offset() + 1
            e = json.loads(m.value(), parse_float=Decimal)
            out[e["data"]["billing_id"]] = {**e["data"], "event_id": e["id"]}
    finally:
        c.close()
    assert all(at[p] >= end for p, end in ends.items()), (at, ends)
    return out


def test_billing_rows_in_postgresql_are_exactly_billing_events(platform: Platform) -> None:
    """billing-agg upserts each record into PostgreSQL after Kafka has it: read Kafka, then
    PostgreSQL, then Kafka again, and the rows sit between the two reads, equal field by field."""
    import psycopg
    from psycopg.rows import dict_row

    from hanzo_stream.local import credentials, postgres

    before = _billing_events(platform)
    dsn = postgres.dsn(platform.home, credentials.of_home(platform.home))
    assert dsn, "postgres is not running"

    def caught_up() -> dict | None:  # a batch read between its two writes is a moment away
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            rows = {r["billing_id"]: r for r in conn.execute("SELECT * FROM billing_usage_hourly")}
        return rows if set(before) <= set(rows) else None

    rows = wait_for(caught_up, 60, "PostgreSQL to hold every billing record Kafka had")
    after = _billing_events(platform)
    assert before and set(rows) <= set(after), (len(before), len(rows), len(after))
    iso = lambda t: t.isoformat(timespec="milliseconds").replace("+00:00", "Z")  # noqa: E731
    for bid, r in rows.items():
        got = {k: iso(v) if k.startswith("window_") else str(v) if k == "event_id" else v
               for k, v in r.items() if k != "written_at"}
        assert got == after[bid], (got, after[bid])


def test_every_dashboard_panel_has_data_from_the_running_platform(platform: Platform) -> None:
    # But the ones fed by a cluster's node metrics, which no local process serves.
    queries = [q for q in dashboards.panel_queries() if q.panel not in dashboards.FROM_NODE_METRICS]
    url = platform.prometheus_url

    def empty() -> list[str]:
        return [f"{q.panel}: {q.expr}" for q in queries
                if not prometheus.query(url, dashboards.expand(q.expr))]

    deadline = time.monotonic() + 120
    while (left := empty()) and time.monotonic() < deadline:
        time.sleep(2)
    assert not left, "panels without data:\n" + "\n".join(left)
    for group in JOBS:  # filtered to one Spark job's group, as on-call looks at it
        for q in queries:
            if "$group" in q.expr:
                expr = dashboards.expand(q.expr, {"group": group})
                assert prometheus.query(url, expr), f"{q.panel} empty for {group}"


# Its own bound: the stop, the lag rising, a Spark restart (~50 s to the first batch on a loaded
# machine) and the catch-up do not fit the suite's 600 s, which also counts the platform's start
# when this test runs alone.
@pytest.mark.timeout(1200)
def test_a_stopped_spark_job_shows_rising_lag_that_drains_after_restart(platform: Platform) -> None:
    """On-call's moves, one part at a time: `jobs run` refuses a job the platform runs (one
    checkpoint, one writer), `local stop` stops that job alone, `local start` starts it again."""
    group = "analytics-ingest"
    pid = process.status(group, platform.home)["pid"]
    second = platform.cli("jobs", "run", group, timeout=120)
    assert second.returncode == 1 and f"already runs on this machine (pid {pid})" in second.stderr, (
        second.stdout + second.stderr)
    assert process.status(group, platform.home)["state"] == "running"  # its run untouched
    stopped = platform.cli("local", "stop", group, timeout=300)
    assert stopped.returncode == 0 and f"stopped {group}" in stopped.stderr, stopped.stderr
    assert not process.status(group, platform.home)["running"]
    assert process.status("billing-agg", platform.home)["running"]  # only that part
    # The demo keeps producing ~15 events/s to its topic.
    risen = wait_for(lambda: (v := platform.lag(group)) is not None and v >= 300 and v, 120,
                     f"{group} lag >= 300 in Prometheus while the job is stopped")
    backlog_end = platform.topic_end(group)  # what was there to catch up on at the restart
    assert backlog_end, "Prometheus has no end offsets of the group's topics"
    restart = platform.cli("local", "start", group, timeout=300)
    assert restart.returncode == 0, restart.stdout + restart.stderr

    def drained() -> bool:
        # Drained: the group committed past everything that waited at the restart, as Prometheus
        # shows it, and the lag fell below the peak. Not a fixed bound: with the demo writing on,
        # the lag between two commits is the rate times a batch's duration, which a loaded
        # machine stretches past any small number.
        done, v = platform.committed(group), platform.lag(group)
        assert done is not None and done >= backlog_end and v is not None and v < risen, (
            f"committed {done} of the {backlog_end} at restart, lag {v} (peak {risen:.0f})")
        return True

    wait_for(drained, 600, f"{group} to commit past its backlog")


def test_a_schema_registry_outage_holds_up_no_event_and_pages(platform: Platform) -> None:
    """The registry serves people and tools that register or fetch schemas; producers and the
    jobs validate against the schemas they ship with. Down for over a minute: the demo's events
    keep reaching every job (committed offsets move on), `schemas register` names the registry
    it could not reach, SchemaRegistryDown pages; back up, the schemas are all there and the
    alert clears."""
    home = platform.home / "schema-registry"
    url = schema_registry.url(home)
    assert url
    instance = url.split("/")[2]
    committed = {g: platform.committed(g) for g in ("analytics-ingest", "billing-agg")}
    assert all(committed.values()), committed
    assert schema_registry.stop(home)
    down_at = time.monotonic()
    summary = f"The schema registry {instance} is down"

    def paged() -> list[dict]:
        return [e for e in pager.pages(platform.home / pager.NAME)
                if e.get("event_action") == "trigger" and e["payload"]["summary"] == summary]

    try:
        refused = platform.cli("schemas", "register", "--url", url, timeout=120)
        assert refused.returncode == 1
        assert f"schema registry at {url}" in refused.stderr, refused.stderr
        page = wait_for(paged, 180, "the SchemaRegistryDown page")[0]
        assert page["payload"]["severity"] == "warning"
        assert time.monotonic() - down_at >= 60  # `for: 1m`: a restart is no page
        for group, before in committed.items():  # events went on through the outage
            wait_for(lambda g=group, b=before: (platform.committed(g) or 0) > b, 120,
                     f"{group} to commit past {before:.0f} while the registry is down")
    finally:
        restart = platform.cli("local", "up", "--only", "schema-registry", timeout=300)
        assert restart.returncode == 0, restart.stdout + restart.stderr
    check = platform.cli("schemas", "register", "--dry-run", "--json", "--url", url, timeout=120)
    assert check.returncode == 0, check.stderr
    assert {o["action"] for o in json.loads(check.stdout)} == {"unchanged"}
    wait_for(lambda: not prometheus.query(platform.prometheus_url,
                                          'ALERTS{alertname="SchemaRegistryDown"}'),
             90, "SchemaRegistryDown to clear once the registry is back")


# Files that hold secrets on purpose, each 0600 (docs/security.md says what each holds).
SECRET_HOLDERS = ("credentials.json", "kafka/node-*/server.properties", "tls/*-keystore.pem")


def test_no_secret_in_plain_text_anywhere_the_platform_writes(platform: Platform, tmp_path) -> None:
    """Every generated password and private key, searched in every form (secret_scan.py)
    through everything written: each component's files and logs under the state directory,
    job outputs and reports, plan files (text and JSON), the CLI's output, the Pulumi
    program's rendered manifests and the repository's files. Found only in the 0600 holders."""
    from hanzo_stream.core import state
    from hanzo_stream.local import credentials
    from tests.integration import secret_scan as scan
    from tests.unit.infra_helpers import manifests, render

    home = platform.home
    creds = credentials.of_home(home)
    local = [scan.password("admin password", creds.admin)] + [
        scan.password(f"password of {p}", pw) for p, pw in sorted(creds.principals.items())] + [
        scan.password(name, creds.service(name))
        for name in (state.POSTGRES_ADMIN_PASSWORD, state.POSTGRES_ROLE_PASSWORD)]
    for pem in sorted((home / "tls").glob("*-keystore.pem")):
        local += scan.private_keys_in(f"private key in {pem.name}", pem)
    rendered = {stack: render(stack) for stack in ("dev", "prod")}
    pulumi = [scan.from_value(f"{stack} stack generated secret #{i}", v)
              for stack, r in rendered.items() for i, v in enumerate(r["generated_secrets"])]
    every = local + pulumi
    assert len(local) >= 13 and len(pulumi) >= 26, (len(local), len(pulumi))  # 11 passwords, 2 keys each

    # What the CLI prints and saves: plan as text, as JSON, to a file, with SCRAM rotations
    # pending (--rotate-passwords), the connection check, status.
    env = _local_env(platform)
    plan_file = tmp_path / "plan.json"
    outputs = {"local up": platform.up_output}
    for name, args in (("plan", ["plan", "--rotate-passwords"]),
                       ("plan --json", ["plan", "--json", "--rotate-passwords"]),
                       ("plan --out", ["plan", "--rotate-passwords", "--out", str(plan_file)]),
                       ("check", ["check"]), ("local status", ["local", "status", "--json"])):
        res = platform.cli(*args, extra_env=env, timeout=180)
        assert res.returncode in (0, 2), (name, res.stdout + res.stderr)
        outputs[name] = res.stdout + res.stderr
    assert "rotate password" in outputs["plan"] and plan_file.exists()

    sources: dict[str, bytes] = {f"output of {k}": v.encode() for k, v in outputs.items()}
    for stack, r in rendered.items():  # what would be sent to the cluster, Secrets aside
        shown = [m for m in manifests(r) if m.get("kind") != "Secret"]
        sources[f"{stack} rendered manifests"] = json.dumps(shown).encode()
    files = [*scan.files_under(home), plan_file]
    repo = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                          capture_output=True, check=True).stdout.decode().split("\0")
    files += [ROOT / f for f in repo if f and (ROOT / f).is_file()]
    holders = {f for pattern in SECRET_HOLDERS for f in home.glob(pattern)}
    assert len(holders) >= 4, holders  # credentials, one server.properties, two keystores
    leaks, scanned = [], 0
    for f in files:
        try:
            data = f.read_bytes()
        except OSError:  # a log rotated away while we read
            continue
        scanned += len(data)
        hits = scan.found(data, every)
        if f in holders:
            assert f.stat().st_mode & 0o777 == 0o600, f"{f} holds secrets but is not 0600"
        elif hits:
            leaks.append(f"{f}: {', '.join(hits)}")
    for where, data in sources.items():
        scanned += len(data)
        leaks += [f"{where}: {h}" for h in scan.found(data, every)]
    held = {label for f in holders for label in scan.found(f.read_bytes(), local)}
    print(f"\nsecret scan: {len(every)} secrets ({len(local)} local, {len(pulumi)} from the "
          f"rendered stacks) searched in {len(files)} files and {len(sources)} outputs, "
          f"{scanned / 1e6:.1f} MB; found outside the {len(holders)} 0600 holders: {len(leaks)}")
    assert not leaks, "\n".join(leaks)
    assert held == {s.label for s in local}  # the scan does see them where they are kept


def _local_env(platform: Platform) -> dict[str, str]:
    res = platform.cli("local", "env")
    assert res.returncode == 0, res.stderr
    return exports(res.stdout)


def test_local_env_prints_no_password_but_the_admins(platform: Platform) -> None:
    """`local env` hands the reconciler the 0600 file's path, not the passwords in it."""
    from hanzo_stream.local import credentials

    creds = credentials.of_home(platform.home)
    out = platform.cli("local", "env").stdout
    assert creds.admin in out  # HANZO_STREAM_SASL_PASSWORD: the admin logs in with it
    assert not [p for p, pw in creds.principals.items() if pw in out]
    assert f"HANZO_STREAM_SECRETS_FILE={platform.home / 'credentials.json'}" in out
    as_service = platform.cli("local", "env", "--principal", "llm-gateway").stdout
    assert creds.admin not in as_service and "unset HANZO_STREAM_SECRETS_FILE" in as_service
    assert [p for p, pw in creds.principals.items() if pw in as_service] == ["llm-gateway"]


def test_down_stops_every_process_and_keeps_the_data(platform: Platform) -> None:
    running = platform.status()["components"]
    suite_profile.record_parts("local-platform", running)
    assert running["kafka"]["cpu_seconds"] > 0 and running["analytics-ingest"]["cpu_seconds"] > 0
    pids = [info["pid"] for info in running.values() if info.get("pid")]
    assert len(pids) >= 9  # registry, exporter, prometheus, five jobs, demo (+ the broker's own file)
    res = platform.cli("local", "down", timeout=300)
    assert res.returncode == 0, res.stderr
    for pid in pids:  # gone, or a zombie waiting for init to reap it
        state = Path(f"/proc/{pid}/status")
        assert not state.exists() or b"zombie" in state.read_bytes().lower(), pid
    comps = platform.status()["components"]
    assert not any(info.get("running") for info in comps.values()), comps
    assert all(comps[j]["state"] == "stopped" for j in JOBS), comps  # stopped, not failed
    assert (platform.home / "kafka" / "node-1" / "data" / "meta.properties").exists()
    assert (platform.home / "jobs" / "analytics-ingest" / "chdb").exists()
    assert (platform.home / "credentials.json").exists()
    purge = platform.cli("local", "down", "--purge", timeout=120)
    assert purge.returncode == 0, purge.stderr
    assert not platform.home.exists()
