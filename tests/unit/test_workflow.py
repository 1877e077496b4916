"""The repository's own workflows: the test suite on every change, `pulumi preview` per stack,
and the registry flow service teams rely on (validate and plan on PRs, the plan as one updated
comment, apply on merge of exactly the reviewed plan). actionlint (with shellcheck) reads every
workflow, and every `hanzo-stream` command a workflow runs exists with the flags it passes."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hanzo_stream.cli import app
from hanzo_stream.registry import platform

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
WORKFLOW = yaml.safe_load((WORKFLOWS / "registry.yml").read_text())


def _load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def _on(workflow: dict) -> dict:
    return workflow.get("on") or workflow[True]  # PyYAML reads a bare `on:` key as True


def _runs(job: str, workflow: dict = WORKFLOW) -> str:
    return "\n".join(s.get("run", "") for s in workflow["jobs"][job]["steps"])


def _actionlint() -> str:
    gopath = subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout.strip() \
        if shutil.which("go") else os.path.expanduser("~/go")
    found = shutil.which("actionlint") or str(Path(gopath) / "bin" / "actionlint")
    assert Path(found).exists(), "actionlint is missing: .ci/install-lint.sh installs it"
    return found


def test_actionlint_and_shellcheck_find_nothing_in_any_workflow():
    assert shutil.which("shellcheck"), "shellcheck is missing: .ci/install-lint.sh installs it"
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert len(files) >= 3
    res = subprocess.run([_actionlint(), "-shellcheck", shutil.which("shellcheck"), *files],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_change_runs_the_readme_test_command():
    ci = _load("ci.yml")
    on = _on(ci)
    assert "pull_request" in on and on["push"]["branches"] == ["main"]
    assert "paths" not in (on["pull_request"] or {})  # every pull request, whatever it touches
    assert "bash .ci/run" in _runs("test", ci)
    assert "./dev test" in (ROOT / ".ci" / "run").read_text()
    assert ci["jobs"]["test"]["timeout-minutes"] <= 90


def test_infra_changes_render_and_preview_every_stack_and_only_preview():
    infra = _load("infra.yml")
    on = _on(infra)
    assert "infra/**" in on["pull_request"]["paths"] and "Pulumi*.yaml" in on["pull_request"]["paths"]
    stacks = sorted(p.name.split(".")[1] for p in ROOT.glob("Pulumi.*.yaml"))
    render, preview = infra["jobs"]["render"], infra["jobs"]["preview"]
    assert sorted(render["strategy"]["matrix"]["stack"]) == stacks
    assert sorted(preview["strategy"]["matrix"]["stack"]) == stacks
    assert 'python -m infra.render "${{ matrix.stack }}"' in _runs("render", infra)
    pulumi = [s for s in preview["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert len(pulumi) == 1 and pulumi[0]["with"]["command"] == "preview"
    assert pulumi[0]["with"]["stack-name"] == "${{ matrix.stack }}"
    assert "up" not in {s.get("with", {}).get("command") for s in preview["steps"]}
    # the pull request's files reach the preview only through infra/proposed.py, which takes
    # exactly the paths that start it (tests/unit/test_infra_proposed.py: what it refuses)
    from infra import proposed

    runs = _runs("preview", infra)
    assert runs.index("python -m infra.proposed pr") < runs.index("KUBECONFIG")
    taken = {*proposed.DATA_FILES, *(f"{d}/**" for d in proposed.DATA_DIRS), "Pulumi.*.yaml"}
    assert set(on["pull_request_target"]["paths"]) == taken
    assert preview["environment"] == "preview"  # environment secrets: read-scoped, reviewed


def _events(workflow: dict, job: dict) -> set[str]:
    """The events that start a job: its workflow's, narrowed by an `if` on the event's name."""
    events = set(_on(workflow))
    m = re.fullmatch(r"github\.event_name == '(\w+)'", str(job.get("if", "")).strip())
    return events & {m.group(1)} if m else events


def _all_jobs():
    for path in sorted(WORKFLOWS.glob("*.yml")):
        wf = yaml.safe_load(path.read_text())
        for name, job in wf["jobs"].items():
            yield path.name, wf, name, job


def test_no_job_that_runs_a_pull_requests_code_can_see_a_secret():
    """On `pull_request` the workflow file and the checkout are the pull request's: such a job
    holds no secret and no environment (whose secrets it would get). A job that holds secrets
    for a pull request runs on pull_request_target, the base branch's workflow and code, and
    takes the pull request's head only as data: into a directory of its own, sparse, without
    the token, never run (no local action, no working directory or command inside it), and
    through a step that refuses links first."""
    seen = set()
    for file, wf, name, job in _all_jobs():
        events, text = _events(wf, job), yaml.safe_dump(job)
        where = f"{file}: jobs.{name}"
        if "pull_request" in events:
            seen.add(where)
            assert "secrets." not in text and "secrets." not in yaml.safe_dump(wf.get("env", {})), where
            assert "environment" not in job, where
        if not events & {"pull_request_target", "workflow_run"}:
            continue
        heads = [s for s in job["steps"] if "pull_request.head" in str(s.get("with", {}).get("ref"))]
        for step in heads:
            w = step["with"]
            assert w.get("path") not in (None, "", ".") and w["persist-credentials"] is False, where
            assert w.get("sparse-checkout") and w.get("sparse-checkout-cone-mode") is False, where
            data = w["path"]
            for s in job["steps"]:
                assert not str(s.get("uses", "")).startswith("./"), where
                assert not str(s.get("working-directory", "")).startswith(data), where
                runs_it = re.compile(rf"(^|[\s;&|(])(\./)?{data}/\S*\.(py|sh)\b|"
                                     rf"(bash|sh|python|source|\.|cd|pip install) \.?/?{data}\b")
                for line in s.get("run", "").splitlines():
                    assert not runs_it.search(line), (where, line)
            guarded = "\n".join(s.get("run", "") for s in job["steps"])
            assert f"find {data} -type l" in guarded or f"infra.proposed {data}" in guarded, where
    assert {"ci.yml: jobs.test", "infra.yml: jobs.render", "registry.yml: jobs.check"} <= seen


def test_every_action_is_pinned_by_commit_and_go_is_the_pinned_release():
    """A tag can be moved to other code (pulumi/actions holds the stack's secrets); Renovate
    (renovate.json, helpers:pinGitHubActionDigests) keeps the SHAs and their comments current."""
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if m := re.search(r"uses:\s*(\S+)", line):
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", m.group(1)), f"{path.name}:{n}"
                assert re.search(r"#\s*v\d+\.\d+\.\d+\s*$", line), f"{path.name}:{n}: its release?"
    steps = _load("ci.yml")["jobs"]["test"]["steps"]
    go = next(s for s in steps if str(s.get("uses", "")).startswith("actions/setup-go@"))
    pins = next(s for s in steps if s.get("id") == "pins")
    assert go["with"]["go-version"] == "${{ steps.pins.outputs.go }}" and "GO_VERSION" in pins["run"]
    out = subprocess.run(["bash", "-c", pins["run"].replace('>> "$GITHUB_OUTPUT"', "")], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    from hanzo_stream.artifacts.versions import GO_VERSION

    assert out.strip() == f"go={GO_VERSION}"


def test_the_plan_is_one_pull_request_comment_updated_in_place():
    steps = WORKFLOW["jobs"]["plan"]["steps"]
    post = next(s for s in steps if "comment" in s.get("name", ""))
    run = post["run"]
    marker = re.search(r"marker='(<!--[^']+-->)'", run).group(1)
    assert "select(.body | startswith" in run  # finds its own earlier comment by the marker
    assert run.index("-X PATCH") < run.index("-X POST")  # updates it; creates one only if none
    assert "plan.txt" in run and marker
    assert WORKFLOW["jobs"]["plan"]["permissions"]["pull-requests"] == "write"


def test_merge_applies_exactly_the_reviewed_plan_artifact():
    plan_steps = WORKFLOW["jobs"]["plan"]["steps"]
    upload = next(s for s in plan_steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["with"]["name"] == "plan-${{ github.event.pull_request.head.sha }}"
    apply_runs = _runs("apply")
    assert '--name "plan-$head"' in apply_runs  # the artifact of the merged PR's head commit
    assert "exit 1" in apply_runs  # no reviewed plan: nothing applied
    assert re.search(r"hanzo-stream apply --plan reviewed/plan\.json", apply_runs)


def test_pull_requests_validate_gate_and_plan_but_never_apply():
    check, plan = _runs("check"), _runs("plan")
    assert "hanzo-stream validate" in check and "hanzo-stream validate" in plan
    assert "hanzo-stream schemas check --against" in check
    assert "hanzo-stream plan --registry pr/topics.yaml --no-scram-users --out" in plan
    assert "apply" not in (check + plan).replace("applied", "")
    assert WORKFLOW["jobs"]["check"]["if"] == "github.event_name == 'pull_request'"
    assert WORKFLOW["jobs"]["plan"]["if"] == "github.event_name == 'pull_request_target'"
    # exit 2 (changes pending) must not fail the PR, exit 1 must
    assert re.search(r'\[ "\$code" = 0 \] \|\| \[ "\$code" = 2 \]', plan)


def _secrets(job: dict) -> set[str]:
    """The repository secrets a job reads, without their common prefix (GitHub's names, not
    variables the code reads: hanzo_stream/core/environment.py does not list them)."""
    return set(re.findall(r"secrets\.HANZO_STREAM_([A-Z_]+)", yaml.safe_dump(job)))


def test_pull_request_code_never_meets_a_cluster_credential():
    """A PR can change any file it carries, workflows and hanzo_stream/ included. The job that
    runs its code holds no secret; the job that holds one (the read-only planner's) runs the
    base branch's workflow and code (pull_request_target) and reads the PR only as data."""
    assert "secrets." not in yaml.safe_dump(WORKFLOW["env"])  # nothing workflow-wide
    check, plan, apply_ = (WORKFLOW["jobs"][j] for j in ("check", "plan", "apply"))
    assert _secrets(check) == set()
    assert _secrets(plan) == {"PLANNER_PASSWORD", "CA_PEM"}
    assert plan["env"]["HANZO_STREAM_SASL_USERNAME"] == platform.REGISTRY_PLANNER
    base, pr = (s for s in plan["steps"] if str(s.get("uses", "")).startswith("actions/checkout"))
    assert "ref" not in base.get("with", {})  # pull_request_target: the base branch
    assert pr["with"]["path"] == "pr" and "head.sha" in pr["with"]["ref"]
    assert set(pr["with"]["sparse-checkout"].split()) == {"topics.yaml", "schemas", "consumers"}
    runs = _runs("plan")
    assert "pip install ." in runs and "pr/" not in runs.split("pip install .")[1].split("\n")[0]
    assert not re.search(r"(^|\s)(\./)?pr/[^ ]*\.(py|sh)\b|bash pr/|python pr/", runs)
    # the admin password exists in one job: apply, on main, behind the environment's reviewers
    assert [j for j, job in WORKFLOW["jobs"].items()
            if "ADMIN_PASSWORD" in _secrets(job)] == ["apply"]
    assert apply_["env"]["HANZO_STREAM_SASL_USERNAME"] == "admin"


def test_the_planner_may_only_read():
    """What the PR job's login can do is what registry/platform.py grants: describe, never
    create, alter, write or delete (the matrix test proves the broker agrees)."""
    planner = next(p for p in platform.PRINCIPALS if p.name == platform.REGISTRY_PLANNER)
    assert {op for _, _, op in planner.grants} <= {"DESCRIBE", "DESCRIBE_CONFIGS"}


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


def test_scram_passwords_have_one_writer_the_reconciler_job():
    """The workflow plans and applies without SCRAM users, so the in-cluster Job (Pulumi's
    passwords) is the only writer; and it logs the admin in the way the admin can log in."""
    from infra.credentials import ADMIN, mechanism

    assert "--no-scram-users" in _runs("plan") and "--no-scram-users" in _runs("apply")
    assert "--secrets-file" not in yaml.safe_dump(WORKFLOW) and "SCRAM_PASSWORDS" not in _secrets(
        WORKFLOW["jobs"]["apply"])
    apply_env = {**WORKFLOW["env"], **WORKFLOW["jobs"]["apply"]["env"]}
    assert apply_env["HANZO_STREAM_SASL_MECHANISM"] == mechanism(ADMIN)
    # Only the jobs that talk to the brokers run where a self-hosted runner can reach them.
    runs_on = {j: job["runs-on"] for j, job in WORKFLOW["jobs"].items()}
    assert runs_on["plan"] == runs_on["apply"] != runs_on["check"] == "ubuntu-latest"
    assert re.fullmatch(r"\$\{\{ vars\.[A-Z_]+ \|\| 'ubuntu-latest' \}\}", runs_on["plan"])
    planner_env = {**WORKFLOW["env"], **WORKFLOW["jobs"]["plan"]["env"]}
    assert planner_env["HANZO_STREAM_SASL_MECHANISM"] == mechanism(platform.REGISTRY_PLANNER)


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
