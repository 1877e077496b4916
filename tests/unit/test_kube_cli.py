"""`hanzo-stream local kube deploy|preview|destroy`: the stack each deploys, the settings it
passes, what it prints and its exit codes, over a Deployer that records its calls (the real
one is proven by the Kubernetes modules: tests/integration/test_kube_*.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from pulumi.automation import errors
from typer.testing import CliRunner

from hanzo_stream.cli import app
from hanzo_stream.kube import deploy
from hanzo_stream.kube.deploy import Plan


@dataclass
class Recorder:
    calls: list = field(default_factory=list)
    changes: int = 0
    fail: bool = False

    def __call__(self):  # stands in for the class: Deployer()
        return self

    def up(self, name, env, settings, on_output):
        self.calls.append(("up", name, env, settings))
        on_output("Updating (local-dev):\n")
        if self.fail:
            raise errors.CommandError(SimpleNamespace(stdout="", stderr="error: kube-apiserver refused\n",
                                                      exit_code=255, command="pulumi up"))
        outputs = {"bootstrap": SimpleNamespace(value="kafka.hanzo:9093", secret=False),
                   "adminPassword": SimpleNamespace(value="s3cr3t-value", secret=True)}
        return SimpleNamespace(summary=SimpleNamespace(resource_changes={"create": 40}),
                               outputs=outputs), Plan([], {"create": 40})

    def preview(self, name, env, settings, on_output):
        self.calls.append(("preview", name, env, settings))
        return Plan([], {"same": 40, "update": self.changes} if self.changes else {"same": 40})

    def destroy(self, name, env, on_output):
        self.calls.append(("destroy", name, env))


@pytest.fixture
def deployer(monkeypatch) -> Recorder:
    r = Recorder()
    monkeypatch.setattr(deploy, "Deployer", r)
    return r


def kube(*args: str):
    return CliRunner().invoke(app, ["local", "kube", *args])


def test_deploy_names_the_stack_passes_settings_as_yaml_and_prints_plain_outputs(deployer):
    res = kube("deploy", "dev", "--set", "spark=false", "--set", "brokers=3", "--set", "x=a=b")
    assert res.exit_code == 0, res.output
    assert deployer.calls == [("up", "local-dev", "dev", {"spark": False, "brokers": 3, "x": "a=b"})]
    assert "Updating (local-dev):" in res.output  # Pulumi's own progress, as it goes
    start = res.stdout.index("{")
    assert json.loads(res.stdout[start:]) == {"bootstrap": "kafka.hanzo:9093"}
    assert "s3cr3t-value" not in res.output  # a secret output is never printed


def test_preview_exits_2_when_deploy_would_change_something(deployer):
    assert kube("preview", "prod", "--stack", "mine").exit_code == 0
    deployer.changes = 3
    res = kube("preview", "prod", "--stack", "mine")
    assert res.exit_code == 2 and "3 change(s)" in res.output
    assert deployer.calls[-1] == ("preview", "mine", "prod", {})


def test_destroy_and_the_refusals(deployer):
    assert kube("destroy", "dev").exit_code == 0 and deployer.calls == [("destroy", "local-dev", "dev")]
    for args, words in ((("deploy", "staging"), "dev or prod"), (("deploy", "dev", "--set", "spark"),
                                                                  "KEY=VALUE")):
        res = kube(*args)
        assert res.exit_code != 0 and words in res.output, res.output
    deployer.fail = True
    res = kube("deploy", "dev")
    assert res.exit_code == 1 and "pulumi up local-dev failed" in res.output
    assert "kube-apiserver refused" in res.output and "Traceback" not in res.output
