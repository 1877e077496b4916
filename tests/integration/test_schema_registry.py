"""`schemas register` against a real Confluent-compatible registry: Apicurio Registry 3.0 from
Maven Central, run as a local process (hanzo_stream.local.schema_registry), spoken to with
confluent-kafka's SchemaRegistryClient over its ccompat API."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hanzo_stream.local import schema_registry
from hanzo_stream.registry import load_registry
from hanzo_stream.schemas.cli import app
from hanzo_stream.schemas.register import client, plan_subjects, registry_text, sync
from hanzo_stream.schemas.store import load

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
LLM = "llm_usage-llm.usage.completed"


@pytest.fixture(scope="module")
def registry_home(tmp_path_factory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("schema-registry")
    try:
        yield home
    finally:
        schema_registry.stop(home)


@pytest.fixture(scope="module")
def url(registry_home) -> str:
    return schema_registry.start(registry_home)


@pytest.fixture
def schemas_dir(tmp_path) -> Path:
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    return tmp_path / "schemas"


def _edit(path: Path, fn) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc, indent=2))


def _versions(sr) -> dict[str, list[int]]:
    return {s: sr.get_versions(s) for s in sr.get_subjects()}


def test_register_is_idempotent_and_sets_backward(url, registry):
    sr = client(url)
    schemas = load(ROOT / "schemas")
    first = sync(sr, schemas, registry)
    subjects = [s for s, _ in plan_subjects(schemas, registry)]
    assert {o.subject for o in first} == set(subjects)
    # One subject per (topic, event type) the registry routes: none lacks a schema.
    assert len(subjects) == sum(len(t.event_types) for t in registry.topics)
    assert "audit_log-iam.auth.login_success" in subjects
    assert all(o.action in ("created", "unchanged") for o in first)
    before = _versions(sr)
    again = sync(sr, schemas, registry)
    assert {o.action for o in again} == {"unchanged"}
    assert _versions(sr) == before  # no new version when nothing changed
    for s in subjects:
        assert sr.get_compatibility(s) == "BACKWARD"
        latest = sr.get_latest_version(s)
        assert json.loads(latest.schema.schema_str) == json.loads(
            registry_text(schemas, s.split("-", 1)[1]))
        assert latest.schema.schema_type == "JSON"


def test_compatible_change_adds_one_version_and_dry_run_writes_nothing(url, registry, schemas_dir):
    sr = client(url)
    sync(sr, load(ROOT / "schemas"), registry)
    _edit(schemas_dir / "events/llm.usage.completed.json",
          lambda s: s["properties"]["data"]["properties"].update(region={"type": "string"}))
    before = _versions(sr)
    dry = {o.subject: o.action for o in sync(sr, load(schemas_dir), registry, dry_run=True)}
    assert dry[LLM] == "would-add-version"
    assert {a for s, a in dry.items() if s != LLM} == {"unchanged"}
    assert _versions(sr) == before
    real = {o.subject: o for o in sync(sr, load(schemas_dir), registry)}
    assert real[LLM].action == "new-version" and real[LLM].version == before[LLM][-1] + 1
    after = _versions(sr)
    assert {s: v for s, v in after.items() if s != LLM} == {s: v for s, v in before.items() if s != LLM}


def test_the_registry_itself_refuses_an_incompatible_version(url, registry, schemas_dir):
    sr = client(url)
    sync(sr, load(ROOT / "schemas"), registry)
    _edit(schemas_dir / "events/agent.rpc.metered.json", lambda s: (
        s["properties"]["data"]["properties"].update(region={"type": "string"}),
        s["properties"]["data"]["required"].append("region")))
    before = _versions(sr)
    subject = "agent_rpc_metering-agent.rpc.metered"
    dry = {o.subject: o for o in sync(sr, load(schemas_dir), registry, dry_run=True)}
    assert dry[subject].action == "refused"
    out = {o.subject: o for o in sync(sr, load(schemas_dir), registry)}
    assert out[subject].action == "refused"
    assert "Incompatible" in out[subject].detail or "409" in out[subject].detail
    assert _versions(sr) == before


def test_cli_register(url, registry_home):
    r = CliRunner().invoke(app, ["register", "--url", url, "--schemas", str(ROOT / "schemas"),
                                 "--registry", str(ROOT / "topics.yaml")])
    assert r.exit_code == 0, r.output
    routed = sum(len(t.event_types) for t in load_registry(ROOT / "topics.yaml").topics)
    assert f"{routed} subject(s)," in r.output
    r = CliRunner().invoke(app, ["register", "--dry-run", "--json", "--url", url,
                                 "--schemas", str(ROOT / "schemas"), "--registry", str(ROOT / "topics.yaml")])
    assert r.exit_code == 0, r.output
    assert {o["action"] for o in json.loads(r.output)} == {"unchanged"}


def test_cli_register_without_a_registry_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("HANZO_STREAM_SCHEMA_REGISTRY_URL", raising=False)
    r = CliRunner().invoke(app, ["register", "--schemas", str(ROOT / "schemas"),
                                 "--registry", str(ROOT / "topics.yaml")])
    assert r.exit_code == 1 and "HANZO_STREAM_SCHEMA_REGISTRY_URL" in r.output


def test_schemas_survive_a_restart(url, registry_home, registry):
    sr = client(url)
    sync(sr, load(ROOT / "schemas"), registry)
    before = _versions(sr)
    assert schema_registry.stop(registry_home)
    assert schema_registry.url(registry_home) is None
    again = schema_registry.start(registry_home)
    assert again == url  # same port, same data directory
    assert _versions(client(again)) == before
