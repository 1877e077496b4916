"""`hanzo-stream dead-letters replay` against a real broker with the registry's ACLs: a
service's own refused event goes back to its topic, written as that service; a letter a
service forged to plant a record in billing_events goes nowhere."""

from __future__ import annotations

import json
import os
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from typer.testing import CliRunner

from hanzo_stream.cli import app
from hanzo_stream.client import envelope
from hanzo_stream.core import dead_letter as dl
from hanzo_stream.reconcile.secrets import env_name

from .conftest import Cluster, exports


def _ends(cluster: Cluster, topic: str) -> dict[int, int]:
    c = Consumer(cluster.admin.confluent() | {"group.id": "replay-check"})
    md = c.list_topics(topic, timeout=10).topics[topic].partitions
    out = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md}
    c.close()
    return out


def _new_records(cluster: Cluster, topic: str, before: dict[int, int]) -> list:
    c = Consumer(cluster.admin.confluent() | {"group.id": "replay-check"})
    after = _ends(cluster, topic)
    out = []
    for p, end in after.items():
        if end > before[p]:
            c.assign([TopicPartition(topic, p, before[p])])
            while len([m for m in out if m.partition() == p]) < end - before[p]:
                m = c.poll(15)
                assert m is not None and not m.error()
                out.append(m)
    c.close()
    return out


def _park(cluster: Cluster, principal: str, letters: list[tuple[str, str, bytes]]) -> list[int]:
    """Write dead letters as `principal` (every principal may write dead_letter)."""
    p = Producer(cluster.as_(principal).confluent())
    offsets: list[int] = []
    for source, stage, value in letters:
        p.produce(dl.TOPIC, key=source.encode(), value=value, headers=[
            (dl.H_SOURCE_TOPIC, source.encode()), (dl.H_STAGE, stage.encode()),
            (dl.H_ERROR_CLASS, b"schema.required"), (dl.H_SOURCE_PARTITION, b"-1"),
            (dl.H_SOURCE_OFFSET, b"-1")], on_delivery=lambda e, m: offsets.append(m.offset()))
    assert p.flush(30) == 0
    return sorted(offsets)


def _replay(cluster: Cluster, *args: str, passwords: dict[str, str]) -> tuple[int, str]:
    env = {k: v for k, v in exports(cluster.admin.env_exports()).items()}  # logged in as the admin
    env |= {"HANZO_STREAM_SECRETS_FILE": "", **{env_name(p): pw for p, pw in passwords.items()}}
    for var in [k for k in os.environ if k.startswith("HANZO_STREAM_PASSWORD_")]:
        env.setdefault(var, "")
    r = CliRunner().invoke(app, ["dead-letters", "replay", *args], env=env)
    return r.exit_code, r.output


def test_replay_writes_a_producers_own_event_as_it_and_refuses_a_forged_billing_record(hip_cluster):
    run = uuid.uuid4().hex[:8]
    usage = envelope.build("llm.usage.completed", "llm-gateway", {
        "request_id": f"r-{run}", "model": "zen-72b", "provider": "together", "prompt_tokens": 10,
        "completion_tokens": 5, "total_tokens": 15, "cost_usd": 0.000042},
        team_id="team_1", org_id="org_1")
    forged = envelope.build("billing.usage.hourly", "billing-aggregator", {
        "billing_id": "0" * 64, "team_id": "team_1", "org_id": "org_1", "window_start": usage["timestamp"],
        "window_end": usage["timestamp"], "requests": 1, "prompt_tokens": 1, "completion_tokens": 1,
        "total_tokens": 2, "cost_micros": 1}, team_id="team_1", org_id="org_1")
    first, second = _park(hip_cluster, "llm-gateway", [
        ("llm_usage", "producer:llm-gateway", json.dumps(usage).encode()),
        ("billing_events", "producer:billing-aggregator", json.dumps(forged).encode())])
    before = {t: _ends(hip_cluster, t) for t in ("llm_usage", "billing_events")}
    window = ["--from-offset", str(first), "--to-offset", str(second + 1)]
    password = hip_cluster.creds.password("llm-gateway")

    code, out = _replay(hip_cluster, *window, passwords={"llm-gateway": password})
    assert code == 1 and f"would replay dead_letter@{first} -> llm_usage as llm-gateway" in out, out
    assert f"refused dead_letter@{second}" in out and "would replay 1, refused 1" in out, out

    # Without any producer's password it writes nothing, even though it logs in as the admin.
    code, out = _replay(hip_cluster, *window, "--execute", passwords={})
    assert code == 1 and "never writes as the admin" in out and "replayed 0, refused 2" in out, out
    assert {t: _ends(hip_cluster, t) for t in before} == before

    code, out = _replay(hip_cluster, *window, "--execute", passwords={"llm-gateway": password})
    assert code == 1 and "replayed 1, refused 1" in out, out
    (m,) = _new_records(hip_cluster, "llm_usage", before["llm_usage"])
    assert m.value() == json.dumps(usage).encode() and m.key() == b"team_1"
    assert dict(m.headers())["hs.replayed.from"] == f"dead_letter@{first}".encode()
    assert _ends(hip_cluster, "billing_events") == before["billing_events"]  # nothing planted
