"""Schema patterns that cannot backtrack for long (hanzo_stream/schemas/patterns.py): the shapes
that do are refused by `validate`, the rule is tied to Python's real engine, and a crafted
256 KiB value is refused by the client in milliseconds."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from hanzo_stream.schemas.compat import compare_files
from hanzo_stream.schemas.patterns import PATTERN_INPUT_MAX, backtracking_risk
from hanzo_stream.schemas.store import load
from hanzo_stream.schemas.validate import validate_schemas
from hanzo_stream.schemas.validator import Validator

ROOT = Path(__file__).resolve().parents[2]
OLD_EMAIL = r"^[^@ \t\r\n]+@[^@ \t\r\n]+\.[^@ \t\r\n]+$"  # shipped until 2026-11-27


@pytest.mark.parametrize("pattern", [
    r"^(a+)+$", r"^(\w+\s?)*$", r"^(a|aa)*$", r"^(.*)*$", r"^\d+\d+$", r"^a+\.?a+$",
    OLD_EMAIL, r"a+b", r"^(x+x+)+y$",
])
def test_shapes_that_backtrack_are_refused(pattern):
    assert backtracking_risk(pattern)


@pytest.mark.parametrize("pattern", [
    r"^(a|ab)*$", r"^(a|b)*$", r"^[a-z]+(-[a-z]+)*$", r"^[0-9a-f]{64}$", r"^(producer|job):.+$",
    r"^[^@ \t\r\n]+@[^@ \t\r\n.]+(\.[^@ \t\r\n.]+)+$", r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$",
])
def test_unambiguous_patterns_pass(pattern):
    assert backtracking_risk(pattern) is None


def _seconds(pattern: str, value: str) -> float:
    compiled = re.compile(pattern)
    t = time.perf_counter()
    compiled.search(value)
    return time.perf_counter() - t


def test_the_rule_matches_the_engine_on_the_old_email_pattern():
    """The same crafted 8 KB address, side by side: the refused pattern backtracks
    quadratically, its rewrite does not (measured ratio here: thousands)."""
    crafted = "a@" + "." * 8000 + "@"
    slow = _seconds(OLD_EMAIL, crafted)
    fast = min(_seconds(r"^[^@ \t\r\n]+@[^@ \t\r\n.]+(\.[^@ \t\r\n.]+)+$", crafted) for _ in range(3))
    assert slow > 50 * fast, (slow, fast)


def test_the_client_refuses_a_crafted_256_kib_email_at_once():
    example = ROOT / "schemas/examples/iam.auth.login_failure/valid"
    event = json.loads(sorted(example.glob("*.json"))[0].read_text())
    event["data"]["email"] = "a@" + "." * (256 * 1024 - 1000)
    v = Validator(load(ROOT / "schemas"))
    t = time.perf_counter()
    bad = v.check(event)
    assert time.perf_counter() - t < 2.0  # the old pattern: minutes of CPU
    assert bad is not None and bad.field == "data.email"


def test_validate_refuses_a_pattern_that_backtracks_with_file_and_field(tmp_path):
    d = tmp_path / "schemas"
    shutil.copytree(ROOT / "schemas", d)
    f = d / "defs" / "iam.audit.v1.json"
    s = json.loads(f.read_text())
    s["properties"]["reason"]["pattern"] = r"^(\w+\s?)*$"
    f.write_text(json.dumps(s))
    problems = [p for p in validate_schemas(d, None) if "backtrack" in p.message]
    assert [(p.file, p.field) for p in problems] == [("defs/iam.audit.v1.json", "reason")]


def test_the_gate_lets_a_backtracking_pattern_be_made_safe_and_nothing_else():
    schemas = load(ROOT / "schemas")
    new = schemas.files
    old = json.loads(json.dumps(new))
    old["defs/iam.audit.v1.json"]["properties"]["email"]["pattern"] = OLD_EMAIL
    assert compare_files(old, new) == []  # the shipped rewrite of the old pattern
    other = json.loads(json.dumps(new))
    other["defs/iam.audit.v1.json"]["properties"]["email"]["pattern"] = r"^[a-z]+@[a-z]+(\.[a-z]+)+$"
    assert [v.rule for v in compare_files(new, other)] == ["constraint.tightened"]


def test_a_patterned_value_past_the_input_limit_is_refused_before_its_pattern_runs():
    example = ROOT / "schemas/examples/iam.auth.login_failure/valid"
    event = json.loads(sorted(example.glob("*.json"))[0].read_text())
    v = Validator(load(ROOT / "schemas"))
    long_type = {**event, "type": "a" + ".a" * (PATTERN_INPUT_MAX // 2)}  # matches the pattern
    bad = v.check(long_type)
    assert (bad.error_class, bad.field) == ("schema.value", "type")
    assert bad.rule == f"`type` must have at most {PATTERN_INPUT_MAX} character(s)"
    ok = {**event, "data": {**event["data"], "email": "a@" + "b" * 900 + ".ai"}}
    assert v.check(ok) is None  # under the limit, the pattern decides
