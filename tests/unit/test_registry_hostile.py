"""topics.yaml as an attacker inside the company would write it: every hostile file is refused
with its file and line, in bounded time and memory, before anything else runs; and each policy
rule that keeps one team out of another's data refuses with the rule and the fix."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hanzo_stream.registry import RegistryInvalid, load_registry
from hanzo_stream.registry.loader import MAX_BYTES, MAX_DEPTH
from hanzo_stream.registry.model import Acl

ROOT = Path(__file__).resolve().parents[2]
HIP = (ROOT / "topics.yaml").read_text()

BOMB = """a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""

HOSTILE = {
    # name: (text, line of the first problem, words its message must hold)
    "alias bomb": (BOMB, 1, "anchor &a"),
    "recursive alias": ("topics: &t\n  - *t\n", 1, "anchor &t"),
    "alias into the registry": (HIP.replace("    producers: [llm-gateway]",
                                            "    producers: &p [llm-gateway]", 1)
                                + "extra: *p\n", None, "anchor &p"),
    "deep nesting": ("x: " + "[" * 5000 + "]" * 5000 + "\n", 1, f"more than {MAX_DEPTH} levels"),
    "deep block nesting": ("".join(f"{'  ' * i}k{i}:\n" for i in range(40)) + "  " * 40 + "v\n",
                           MAX_DEPTH + 1, "levels deep"),
    "list as a key": ("? [a, b]\n: 1\n", 1, "plain name"),
    "mapping as a key": ("? {a: 1}\n: 1\n", 1, "plain name"),
    "python tag": ("x: !!python/object/apply:os.system ['id']\n", 1, "explicit tag"),
    "local tag": ("x: !secret value\n", 1, "explicit tag"),
    "binary": ("x: !!binary aGVsbG8=\n", 1, "explicit tag"),
    "two documents": ("a: 1\n---\nb: 2\n", 2, "single document"),
    "not utf-8": (b"topics: [\xff\xfe]\n", 1, "not UTF-8"),
    "bad syntax": ("topics: [\n  - name: x\n", 2, "not valid YAML"),
}


def write(tmp_path: Path, text: str | bytes) -> Path:
    f = tmp_path / "topics.yaml"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    return f


def refused(f: Path) -> list:
    with pytest.raises(RegistryInvalid) as e:
        load_registry(f)
    return e.value.problems


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_yaml_is_refused_with_file_and_line(tmp_path, name):
    text, line, words = HOSTILE[name]
    f = write(tmp_path, text)
    problems = refused(f)
    first = problems[0]
    assert first.file == str(f)
    assert words in first.message, "\n".join(map(str, problems))
    if line is not None:
        assert first.line == line, "\n".join(map(str, problems))
    assert first.fix


def test_an_alias_anywhere_in_the_registry_names_its_line(tmp_path):
    text, _, _ = HOSTILE["alias into the registry"]
    problems = refused(write(tmp_path, text))
    lines = text.splitlines()
    assert [lines[p.line - 1].strip()[:9] for p in problems] == ["producers", "extra: *p"]


def test_duplicate_keys_are_refused_not_silently_overwritten(tmp_path):
    text = HIP.replace("    producers: [llm-gateway]\n",
                       "    producers: [llm-gateway]\n    producers: [insights-capture]\n", 1)
    [p] = refused(write(tmp_path, text))
    first = text.splitlines().index("    producers: [llm-gateway]") + 1
    assert (p.line, p.field) == (first + 1, "topics.1.producers")
    assert f"first on line {first}" in p.message and "keep one" in p.fix


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x7f", "\u202e", "\u2066", "\u200b", "\ufeff"])
def test_invisible_and_control_characters_are_refused(tmp_path, char):
    text = HIP.replace("description: ", f"description: x{char}", 1)
    [p] = refused(write(tmp_path, text))
    assert f"U+{ord(char):04X}" in p.message
    assert p.line == HIP.splitlines().index(next(x for x in HIP.splitlines() if "description: " in x)) + 1


def test_a_control_character_written_as_an_escape_is_refused_too(tmp_path):
    line = next(x for x in HIP.splitlines() if "description: " in x)
    escaped = line.split("description: ")[0] + 'description: "clear the screen \\e[2J"'
    [p] = refused(write(tmp_path, HIP.replace(line, escaped, 1)))
    assert "U+001B" in p.message and p.field.endswith("description")


def test_an_oversized_file_is_refused_without_reading_it_whole(tmp_path):
    f = tmp_path / "topics.yaml"
    with f.open("wb") as out:
        out.truncate(MAX_BYTES * 4)
    [p] = refused(f)
    assert p.field == "(file)" and f"{MAX_BYTES:,} bytes" in p.message


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_validate_refuses_the_bomb_within_a_gigabyte_and_without_a_traceback(tmp_path):
    """389 bytes that used to take 2.4 GB: the CLI now answers with file:line and exit 1."""
    f = write(tmp_path, BOMB)
    proc = subprocess.run([sys.executable, "-m", "hanzo_stream", "validate", "--registry", str(f)],
                          capture_output=True, text=True, timeout=60, preexec_fn=_limited,
                          env={**os.environ, "NO_COLOR": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert f"{f}:1" in out and "Traceback" not in out


def hip() -> dict:
    return yaml.safe_load(HIP)


def problems_of(tmp_path: Path, data: dict) -> list:
    return refused(write(tmp_path, yaml.safe_dump(json.loads(json.dumps(data)), sort_keys=False)))


def topic(d: dict, name: str) -> dict:
    return next(t for t in d["topics"] if t["name"] == name)


def grant(principal: str, ops: list[str], **resource_: str) -> dict:
    return {"principal": principal, "operations": ops, **resource_}


def acl(principal: str, ops: list[str], **resource_: str):
    return lambda d: d.setdefault("acls", []).append(grant(principal, ops, **resource_))


def config(**values):
    return lambda d: topic(d, "llm_usage").update(config={k.replace("_", "."): v for k, v in values.items()})


REFUSED = {
    "prefix over another team's topic":
        (lambda d: d.setdefault("acls", []).append(grant("analytics-ingest", ["READ"], topic_prefix="llm")),
         "acls[0].topic_prefix", "reaches llm_usage"),
    "prefix over Kafka's internal topics":
        (lambda d: d.setdefault("acls", []).append(grant("llm-gateway", ["READ"], topic_prefix="__c")),
         "acls[0].topic_prefix", "internal"),
    "prefix over another team's group":
        (lambda d: d.setdefault("acls", []).append(grant("llm-gateway", ["READ"], group_prefix="billing")),
         "acls[0].group_prefix", "billing-agg"),
    "DELETE on audit_log":
        (acl("audit-archiver", ["READ", "DELETE"], topic="audit_log"),
         "acls[0].operations", "DELETE on audit_log"),
    "ALTER_CONFIGS on billing_events":
        (lambda d: d.setdefault("acls", []).append(
            grant("billing-aggregator", ["ALTER_CONFIGS"], topic="billing_events")),
         "acls[0].operations", "ALTER_CONFIGS on billing_events"),
    "a principal named admin":
        (lambda d: d["principals"].append({"name": "admin", "description": "totally a service"}),
         "principals[admin].name", "super user"),
    "a principal named anonymous":
        (lambda d: d["principals"].append({"name": "anonymous", "description": "x"}),
         "principals[anonymous].name", "unauthenticated"),
    "a service named like the lag exporter, to inherit its grants":
        (lambda d: d["principals"].append({"name": "lag-exporter", "description": "x"}),
         "principals[lag-exporter].name", "platform's own"),
    "the read-only planner made a producer":
        (lambda d: topic(d, "llm_usage").update(producers=["llm-gateway", "registry-planner"]),
         "topics[llm_usage].producers[1]", "not a declared principal"),
    "an extra grant to the schema registry":
        (acl("schema-registry", ["READ"], topic="audit_log"),
         "acls[0].principal", "not declared"),
    "retention 0ms": (lambda d: topic(d, "llm_usage").update(retention="0ms"),
                      "topics[llm_usage].retention", "outside 1h to 3650d"),
    "retention that overflows a long": (lambda d: topic(d, "llm_usage").update(retention="9" * 17 + "d"),
                                        "topics[llm_usage].retention", "outside"),
    "retention.bytes 1": (lambda d: topic(d, "llm_usage").update(config={"retention.bytes": 1}),
                          "config.retention.bytes", "outside"),
    "segment.ms 1": (lambda d: topic(d, "llm_usage").update(config={"segment.ms": 1}),
                     "config.segment.ms", "outside"),
    "max.message.bytes 100 MB": (config(max_message_bytes=100_000_000),
                                 "config.max.message.bytes", "outside"),
    "a config nobody allowed": (config(message_downconversion_enable=True),
                                "config.message.downconversion.enable", "not one the registry manages"),
    "an unknown compression": (lambda d: topic(d, "llm_usage").update(config={"compression.type": "brotli"}),
                               "config.compression.type", "not one Kafka knows"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_policy_refuses(tmp_path, name):
    edit, field, words = REFUSED[name]
    data = hip()
    edit(data)
    found = problems_of(tmp_path, data)
    assert any(p.field.endswith(field) and words in p.message for p in found), "\n".join(map(str, found))
    assert all(p.fix for p in found)


def allowed(principal: str, op: str, kind: str, name: str, pattern: str = "LITERAL") -> set[Acl]:
    return {Acl(f"User:{principal}", kind, name, pattern, op)}


def extra_grants(r) -> list[tuple[str, tuple[str, ...], str, str, str]]:
    return [(g.principal, g.operations, g.resource_type, g.resource_name, g.pattern_type)
            for g in r.extra_grants]


ALLOWED_CONFIGS = {"retention.bytes": -1, "segment.ms": 3_600_000, "compression.type": "zstd",
                   "max.message.bytes": 1_048_576, "message.timestamp.type": "LogAppendTime"}
ACCEPTED = {  # edit, what it changes in the loaded registry, and to what
    "prefix over the principal's own topics": (
        lambda d: d.setdefault("acls", []).append(grant("llm-gateway", ["DESCRIBE"], topic_prefix="llm_u")),
        extra_grants, [("llm-gateway", ("DESCRIBE",), "TOPIC", "llm_u", "PREFIXED")]),
    "prefix over the principal's own group": (
        acl("billing-aggregator", ["DESCRIBE"], group_prefix="billing"),
        extra_grants, [("billing-aggregator", ("DESCRIBE",), "GROUP", "billing", "PREFIXED")]),
    "a documented destructive grant": (
        lambda d: d.setdefault("acls", []).append(grant("audit-archiver", ["DELETE"], topic="audit_log"))
        or topic(d, "audit_log").setdefault("exceptions", {}).update(
            destructive_acls="the archiver trims records it has archived (RISK-42)"),
        lambda r: (extra_grants(r), r.topic("audit_log").exceptions.get("destructive_acls")),
        ([("audit-archiver", ("DELETE",), "TOPIC", "audit_log", "LITERAL")],
         "the archiver trims records it has archived (RISK-42)")),
    "retention bounds": (
        lambda d: topic(d, "llm_usage").update(retention="1h")
        or topic(d, "audit_log").update(retention="3650d"),
        lambda r: (r.topic("llm_usage").retention_ms, r.topic("audit_log").retention_ms),
        (3_600_000, 3650 * 86_400_000)),
    "allowed configs": (
        lambda d: topic(d, "llm_usage").update(config=dict(ALLOWED_CONFIGS)),
        lambda r: r.topic("llm_usage").config, {k: str(v) for k, v in ALLOWED_CONFIGS.items()}),
    "a multi-line description": (
        lambda d: topic(d, "llm_usage").update(description="line one\n\tline two"),
        lambda r: r.topic("llm_usage").description, "line one\n\tline two"),
}
#: The ACLs each accepted edit adds to what the reconciler applies (none takes one away).
GRANTED = {
    "prefix over the principal's own topics":
        allowed("llm-gateway", "DESCRIBE", "TOPIC", "llm_u", "PREFIXED"),
    "prefix over the principal's own group":
        allowed("billing-aggregator", "DESCRIBE", "GROUP", "billing", "PREFIXED"),
    "a documented destructive grant": allowed("audit-archiver", "DELETE", "TOPIC", "audit_log"),
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_policy_accepts(tmp_path, registry, name):
    """Accepted, and kept as written: the loaded registry holds the edited value where the
    shipped one did not, and its ACLs grow by exactly the grants the edit asks for."""
    edit, observe, expected = ACCEPTED[name]
    data = hip()
    edit(data)
    edited = load_registry(write(tmp_path, yaml.safe_dump(json.loads(json.dumps(data)), sort_keys=False)))
    assert observe(edited) == expected != observe(registry)
    added, removed = edited.acls() - registry.acls(), registry.acls() - edited.acls()
    assert (added, removed) == (GRANTED.get(name, set()), set())


def test_the_shipped_registry_passes(registry):
    assert registry.topics
