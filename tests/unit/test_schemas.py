"""schemas/: sound files, one per registry event type, examples that behave as declared,
and `hanzo-stream schemas check` refusing incompatible changes against a git ref."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hanzo_stream.core import dead_letter
from hanzo_stream.schemas.cli import app
from hanzo_stream.schemas.store import DEAD_LETTER_TYPE, load
from hanzo_stream.schemas.validate import check_registry, validate_all, validate_schemas
from hanzo_stream.schemas.validator import Validator

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
EXAMPLES = sorted((SCHEMAS / "examples").glob("*/*/*.json"))


def test_the_repository_schemas_pass_every_check(registry):
    assert [str(p) for p in validate_all(registry)] == []


def test_every_registry_event_type_has_a_schema_and_no_schema_is_orphaned(registry):
    mapped = {t for topic in registry.topics for t in topic.event_types}
    assert set(load(SCHEMAS).events) == mapped


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(SCHEMAS / "examples")) for p in EXAMPLES])
def test_example(path: Path):
    event_type, kind = path.parts[-3], path.parts[-2]
    doc = json.loads(path.read_text())
    if event_type == DEAD_LETTER_TYPE:
        from jsonschema import Draft202012Validator

        v = Draft202012Validator(load(SCHEMAS).events[DEAD_LETTER_TYPE])
        event = doc["event"] if kind == "invalid" else doc
        assert v.is_valid(event) == (kind == "valid")
        return
    validator = Validator(load(SCHEMAS))
    if kind == "valid":
        assert validator.check(doc) is None
        assert doc["type"] == event_type
    else:
        got = validator.check(doc["event"])
        assert got is not None, doc["why"]
        assert (got.error_class, got.field) == (doc["expect"]["error_class"], doc["expect"]["field"])
        assert got.field in got.message or got.field == "(event)"


def test_examples_cover_every_event_type_both_ways():
    types = set(load(SCHEMAS).events)
    for kind in ("valid", "invalid"):
        assert {p.parts[-3] for p in EXAMPLES if p.parts[-2] == kind} == types


def test_dead_letter_schema_lists_exactly_the_contract_headers():
    props = set(load(SCHEMAS).events[DEAD_LETTER_TYPE]["properties"])
    extra = {dead_letter.H_TRUNCATED, dead_letter.H_ORIGINAL_SIZE, dead_letter.H_ORIGINAL_SHA256,
             dead_letter.H_KEY_TRUNCATED, dead_letter.H_ORIGINAL_KEY_SIZE, dead_letter.H_ORIGINAL_KEY_SHA256}
    assert props == set(dead_letter.ALL_HEADERS) | extra


def test_bundles_are_self_contained():
    s = load(SCHEMAS)
    for t in s.events:
        assert '"$ref"' not in json.dumps(s.bundle(t)), t


COUNTS = {"llm.usage.completed": ["prompt_tokens", "completion_tokens", "total_tokens", "latency_ms"],
          "billing.usage.hourly": ["prompt_tokens", "completion_tokens", "total_tokens", "cost_micros",
                                   "request_count"],
          "agent.rpc.metered": ["duration_ms", "units"]}


def test_money_is_cost_usd_a_number_and_counts_are_integers():
    s = load(SCHEMAS)
    for t, counts in COUNTS.items():
        data = s.events[t]["properties"]["data"]
        props = data["properties"]
        # money as the standard writes it: a required, non-negative JSON number of US dollars
        assert props["cost_usd"]["type"] == "number" and props["cost_usd"]["minimum"] == 0, t
        assert "cost_usd" in data["required"], t
        for c in counts:
            assert props[c]["type"] == "integer" and props[c]["minimum"] == 0, (t, c)
    # micro-dollars survive only on the aggregate, as the invoiced rounding of its exact total
    assert "cost_micros" not in s.events["llm.usage.completed"]["properties"]["data"]["properties"]
    assert "cost_micros" not in s.events["agent.rpc.metered"]["properties"]["data"]["properties"]
    assert "cost_micros" in s.events["billing.usage.hourly"]["properties"]["data"]["required"]


def test_the_standards_examples_are_kept_verbatim():
    """Each standard.json is the Event Streaming Standard's example; the fields it shows stay."""
    want = {
        "llm.usage.completed": ("team_abc123", {"request_id", "model", "provider", "prompt_tokens",
                                                "completion_tokens", "total_tokens", "latency_ms",
                                                "cost_usd", "user_id", "api_key_hash", "cache_hit",
                                                "stream"}),
        "insights.event.captured": ("team_abc123", {"event", "distinct_id", "properties", "ip",
                                                    "session_id", "sent_at"}),
        "iam.auth.login_success": (None, {"user_id", "email", "method", "provider", "ip", "user_agent",
                                          "application"}),
    }
    for t, (team, fields) in want.items():
        doc = json.loads((SCHEMAS / "examples" / t / "valid/standard.json").read_text())
        assert doc["schema"] == "hanzo.stream.v1" and doc["type"] == t
        assert doc.get("team_id") == team and set(doc["data"]) == fields, t
        data = load(SCHEMAS).bundle(t)["properties"]["data"]
        declared = set(data.get("properties", {})).union(
            *(sub.get("properties", {}) for sub in data.get("allOf", [])))
        assert declared >= fields, t
    llm = json.loads((SCHEMAS / "examples/llm.usage.completed/valid/standard.json").read_text())
    assert llm["id"] == "evt_01HQ3X7K8M2N4P5R6S7T8U9V0W" and llm["data"]["cost_usd"] == 0.0038


def _copy_tree(tmp_path: Path) -> Path:
    shutil.copytree(SCHEMAS, tmp_path / "schemas")
    shutil.copy(ROOT / "topics.yaml", tmp_path / "topics.yaml")
    return tmp_path / "schemas"


def _edit(path: Path, fn) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc, indent=2))


def test_problems_are_named(tmp_path, registry):
    d = _copy_tree(tmp_path)
    _edit(d / "events/llm.usage.completed.json", lambda s: s.update({"$id": "https://x/y.json"}))
    _edit(d / "events/agent.rpc.metered.json",
          lambda s: s["properties"]["data"]["properties"]["units"].update(oneOf=[{"minimum": 0}]))
    shutil.rmtree(d / "examples/iam.auth.logout/valid")
    found = {(p.file, p.field) for p in validate_schemas(d, registry)}
    assert ("events/llm.usage.completed.json", "$id") in found
    assert ("events/agent.rpc.metered.json", "data.units") in found
    problems = validate_schemas(d, registry)
    assert any("oneOf" in p.message for p in problems)


def test_registry_consistency(tmp_path, registry):
    d = _copy_tree(tmp_path)
    (d / "events/agent.rpc.metered.json").unlink()
    _edit(d / "events/llm.usage.completed.json", lambda s: s.update(required=["org_id"]))
    shutil.copy(d / "events/iam.auth.logout.json", d / "events/iam.auth.sudo.json")
    msgs = [str(p) for p in check_registry(load(d), registry)]
    assert any("agent.rpc.metered" in m and "has no schema" in m for m in msgs)
    assert any("`team_id` keys topic llm_usage" in m for m in msgs)
    assert any("iam.auth.sudo" in m and "no topic" in m for m in msgs)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path) -> Path:
    d = _copy_tree(tmp_path)
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "base")
    return d


def _check(d: Path, *args: str):
    return CliRunner().invoke(app, ["check", "--schemas", str(d), "--registry",
                                    str(d.parent / "topics.yaml"), *args])


def test_check_passes_on_an_unchanged_tree(repo):
    r = _check(repo, "--against", "main")
    assert r.exit_code == 0, r.output
    assert "BACKWARD compatible with main" in r.output


def test_check_refuses_incompatible_changes_with_one_message_each(repo):
    def breaking(s):
        data = s["properties"]["data"]
        data["properties"].pop("latency_ms")
        data["properties"]["provider"]["enum"] = ["openai"]
        data["properties"]["region"] = {"type": "string"}
        data["required"].append("region")

    _edit(repo / "events/llm.usage.completed.json", breaking)
    r = _check(repo, "--against", "main")
    assert r.exit_code == 1
    out = " ".join(r.output.split())
    # one field gone and one added in the same object reads as a rename
    assert "`data.latency_ms` was renamed to `region`" in out
    assert "[field.renamed]" in out and "[required.added]" in out and "[enum.narrowed]" in out
    assert "3 BACKWARD violation(s) against main" in out


def test_check_allows_compatible_changes(repo):
    def compatible(s):
        s["properties"]["data"]["properties"]["region"] = {"type": "string"}
        s["properties"]["data"]["properties"]["latency_ms"].pop("maximum")

    _edit(repo / "events/llm.usage.completed.json", compatible)
    r = _check(repo, "--against", "main")
    assert r.exit_code == 0, r.output


def test_check_reads_the_previous_version_from_the_ref_not_the_worktree(repo):
    _edit(repo / "defs/iam.audit.v1.json", lambda s: s["properties"]["reason"].update(maxLength=64))
    _git(repo.parent, "commit", "-q", "-am", "narrow")
    assert _check(repo, "--against", "HEAD").exit_code == 0  # no change since HEAD
    r = _check(repo, "--against", "HEAD~1")
    assert r.exit_code == 1 and "defs/iam.audit.v1.json" in r.output


def test_check_refuses_a_removed_schema_file(repo):
    (repo / "events/agent.rpc.metered.json").unlink()
    r = _check(repo, "--against", "main")
    assert r.exit_code == 1
    assert "[schema.removed]" in r.output


def test_check_unknown_ref_is_a_clear_error(repo):
    r = _check(repo, "--against", "no-such-branch")
    assert r.exit_code == 1
    assert "unknown git ref 'no-such-branch'" in r.output
