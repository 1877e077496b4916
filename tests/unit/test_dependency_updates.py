"""Every pin has an updater and a reviewer: renovate.json covers pip, the Go modules, the
workflows' actions and hanzo_stream/artifacts/versions.py, where each pin says on the line
above it where Renovate looks it up, or what it follows; .github/CODEOWNERS names who approves
what reaches the cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hanzo_stream.artifacts import versions

ROOT = Path(__file__).resolve().parents[2]
RENOVATE = json.loads((ROOT / "renovate.json").read_text())
VERSIONS = (ROOT / "hanzo_stream" / "artifacts" / "versions.py").read_text()
DATASOURCES = {"maven", "docker", "go", "golang-version", "pypi"}


def _pins() -> dict[str, str]:
    """Each pin's name and the `# renovate:` line above it ('' if there is none)."""
    lines = VERSIONS.splitlines()
    return {m.group(1): (lines[i - 1] if i and lines[i - 1].startswith("# renovate:") else "")
            for i, line in enumerate(lines) if (m := re.match(r"([A-Z][A-Z0-9_]*) = ", line))}


def _python(regex: str) -> re.Pattern[str]:
    return re.compile(regex.replace("(?<", "(?P<"))  # Renovate's named groups, in Python's


def test_every_pin_says_how_it_is_updated():
    pins = _pins()
    assert len(pins) >= 40
    for name, note in pins.items():
        assert note, f"hanzo_stream/artifacts/versions.py: {name} has no `# renovate:` line above it: " \
                     "add `datasource=D depName=N`, or `follows X (why)` / `held (why)`"
        how = note.removeprefix("# renovate: ")
        if how.startswith("datasource="):
            assert re.fullmatch(r"datasource=(\S+) depName=\S+", how), (name, how)
            assert how.split()[0].split("=")[1] in DATASOURCES, (name, how)
        else:
            assert re.match(r"(follows|held) ", how), (name, how)
            followed = re.match(r"follows ([A-Z][A-Z0-9_]+)\b", how)
            assert not followed or followed.group(1) in pins, (name, how)


def test_renovates_regex_finds_exactly_the_looked_up_pins_at_their_values():
    [manager] = RENOVATE["customManagers"]
    assert any(re.search(p.strip("/"), "hanzo_stream/artifacts/versions.py")
               for p in manager["managerFilePatterns"])
    found = {}
    for regex in manager["matchStrings"]:
        for m in _python(regex).finditer(VERSIONS):
            found[m.group("depName")] = (m.group("datasource"), m.group("currentValue"))
    looked_up = {name: note for name, note in _pins().items() if "datasource=" in note}
    assert len(found) == len(looked_up) >= 15
    for name, note in looked_up.items():
        datasource, dep = (kv.split("=", 1)[1] for kv in note.split()[2:4])
        value = getattr(versions, name)
        if datasource == "docker":
            image, _, tag = value.rpartition(":")
            assert image == dep and found[dep] == ("docker", tag), name
        else:
            assert found[dep] == (datasource, value), name


def test_every_kind_of_pin_has_its_manager_and_actions_are_pinned_by_digest():
    assert set(RENOVATE["enabledManagers"]) == {"pep621", "gomod", "github-actions", "custom.regex"}
    assert "helpers:pinGitHubActionDigests" in RENOVATE["extends"]
    assert list(ROOT.glob("kube/*/go.mod")) and (ROOT / "pyproject.toml").is_file()
    # a pin held back for a reason the platform gives: the registry's Java
    held = {r["matchPackageNames"][0]: r["allowedVersions"]
            for r in RENOVATE["packageRules"] if "allowedVersions" in r}
    assert held == {"io.apicurio:apicurio-registry-app": "<3.1"}
    assert versions.APICURIO_VERSION.startswith("3.0.")


def test_codeowners_names_an_owner_for_what_reaches_the_cluster():
    rules = {}
    for line in (ROOT / ".github" / "CODEOWNERS").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            path, *owners = line.split()
            assert owners and all(re.fullmatch(r"@[\w-]+/[\w-]+", o) for o in owners), line
            rules[path] = owners
    for path in ("/topics.yaml", "/schemas/", "/infra/", "/.github/", "/hanzo_stream/artifacts/versions.py"):
        assert path in rules, path
    for path in rules:  # each rule names something that exists
        assert list(ROOT.glob(path.strip("/"))), path
