"""infra/proposed.py: what `pulumi preview` on a pull request takes from it, as data, into the
base branch's checkout, and what it refuses before writing anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from infra import proposed


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


BASE_STACK = ("secretsprovider: passphrase\nencryptionsalt: v1:base\n"
              "config:\n  hanzo-stream:brokers: 1\n  kubernetes:context: dev\n")


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return _tree(tmp_path / "base", {
        "Pulumi.dev.yaml": BASE_STACK, "topics.yaml": "topics: base\n",
        "monitoring/rules/a.yaml": "groups: []\n", "monitoring/rules/gone.yaml": "groups: []\n",
        "consumers/billing-agg.yaml": "group: billing-agg\n"})


def test_the_settings_and_data_are_taken_and_the_rest_of_the_stack_file_kept(tmp_path, base):
    pr = _tree(tmp_path / "pr", {
        # a pull request can also try to move the secrets provider or open an ESC environment
        "Pulumi.dev.yaml": "secretsprovider: awskms://theirs\nenvironment: [prod-creds]\n"
                           "config:\n  hanzo-stream:brokers: 3\n",
        "topics.yaml": "topics: pr\n", "monitoring/rules/a.yaml": "groups: [pr]\n",
        "consumers/billing-agg.yaml": "group: billing-agg\nreplicas: 2\n"})
    wrote = proposed.take(pr, base)
    assert wrote == ["Pulumi.dev.yaml", "topics.yaml", "consumers/", "monitoring/"]
    stack = yaml.safe_load((base / "Pulumi.dev.yaml").read_text())
    assert stack == {"secretsprovider": "passphrase", "encryptionsalt": "v1:base",
                     "config": {"hanzo-stream:brokers": 3}}
    assert (base / "topics.yaml").read_text() == "topics: pr\n"
    assert (base / "monitoring/rules/a.yaml").read_text() == "groups: [pr]\n"
    assert not (base / "monitoring/rules/gone.yaml").exists()  # deleted in the pull request
    assert "replicas: 2" in (base / "consumers/billing-agg.yaml").read_text()


@pytest.mark.parametrize("case, files, link, words", [
    ("a foreign key", {"Pulumi.dev.yaml": "config:\n  kubernetes:kubeconfig: x\n"}, None,
     ["Pulumi.dev.yaml", "kubernetes:kubeconfig", "hanzo-stream:*"]),
    ("code among the data", {"monitoring/rules/run.py": "import os\n"}, None,
     ["monitoring/rules/run.py", ".yaml"]),
    ("a stack main lacks", {"Pulumi.staging.yaml": "config: {}\n"}, None,
     ["Pulumi.staging.yaml", "no such stack"]),
    ("not a stack file", {"Pulumi.dev.yaml": "- a list\n"}, None, ["Pulumi.dev.yaml", "mapping"]),
    ("a link in a data directory", {}, ("monitoring/rules/env.yaml", "/proc/self/environ"),
     ["monitoring/rules/env.yaml", "link"]),
    ("the registry as a link", {}, ("topics.yaml", "/etc/hostname"), ["topics.yaml", "link"]),
])
def test_a_refusal_names_the_file_and_the_fix_and_writes_nothing(tmp_path, base, case, files, link,
                                                                  words):
    pr = _tree(tmp_path / "pr", {"Pulumi.dev.yaml": "config:\n  hanzo-stream:brokers: 3\n",
                                 "monitoring/rules/a.yaml": "groups: [pr]\n", **files})
    if link:
        (pr / link[0]).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link[1], pr / link[0])
    before = {p: p.read_bytes() for p in base.rglob("*") if p.is_file()}
    with pytest.raises(proposed.Refused) as e:
        proposed.take(pr, base)
    assert all(w in str(e.value) for w in words), (case, str(e.value))
    assert {p: p.read_bytes() for p in base.rglob("*") if p.is_file()} == before, case


def test_the_command_says_what_it_refused_and_exits_1(tmp_path, base, capsys):
    pr = _tree(tmp_path / "pr", {"Pulumi.dev.yaml": "config:\n  pulumi:tags: x\n"})
    assert proposed.main([str(pr), "--into", str(base)]) == 1
    assert "pulumi:tags" in capsys.readouterr().err
    pr.joinpath("Pulumi.dev.yaml").write_text("config:\n  hanzo-stream:brokers: 3\n")
    assert proposed.main([str(pr), "--into", str(base)]) == 0
    assert "Pulumi.dev.yaml" in capsys.readouterr().out
