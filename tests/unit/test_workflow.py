"""The pull-request workflow service teams rely on: validate and plan on PRs, apply on merge,
and every `hanzo-stream` command it runs exists with the flags it passes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hanzo_stream.cli import app

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = yaml.safe_load((ROOT / ".github" / "workflows" / "registry.yml").read_text())


def _runs(job: str) -> str:
    return "\n".join(s.get("run", "") for s in WORKFLOW["jobs"][job]["steps"])


def test_pull_requests_validate_gate_and_plan_but_never_apply():
    pr = _runs("plan")
    assert "hanzo-stream validate" in pr
    assert "hanzo-stream schemas check --against" in pr
    assert "hanzo-stream plan --out" in pr
    assert "apply" not in pr.replace("applied", "")
    assert WORKFLOW["jobs"]["plan"]["if"] == "github.event_name == 'pull_request'"
    # exit 2 (changes pending) must not fail the PR, exit 1 must
    assert re.search(r'\[ "\$code" = 0 \] \|\| \[ "\$code" = 2 \]', pr)


def test_merge_applies_and_registers_in_a_protected_environment():
    job = WORKFLOW["jobs"]["apply"]
    assert job["if"] == "github.event_name == 'push'"
    assert job["environment"] == "production"
    runs = _runs("apply")
    assert runs.index("hanzo-stream validate") < runs.index("hanzo-stream apply")
    assert "hanzo-stream schemas register" in runs
    assert WORKFLOW["concurrency"]["cancel-in-progress"] is False  # never cancel an apply
    assert not any("PASSWORD" in line and "secrets." not in line and "vars." not in line
                   for line in yaml.safe_dump(WORKFLOW["env"]).splitlines())


def _commands() -> list[list[str]]:
    out = []
    for job in WORKFLOW["jobs"]:
        for line in _runs(job).splitlines():
            line = line.split("|")[0].strip()
            if line.startswith("hanzo-stream "):
                out.append([a for a in shlex.split(line)[1:] if "$" not in a])
    return out


@pytest.mark.parametrize("argv", _commands(), ids=lambda a: " ".join(a))
def test_every_command_the_workflow_runs_exists_with_its_flags(argv):
    words = [a for a in argv if not a.startswith("-")]
    res = CliRunner().invoke(app, [*words[:2], "--help"] if words[0] in ("schemas", "jobs", "local")
                             else [words[0], "--help"])
    assert res.exit_code == 0, res.output
    for flag in (a.split("=")[0] for a in argv if a.startswith("--")):
        assert flag in res.output, f"{' '.join(argv)}: {flag} is not an option"
