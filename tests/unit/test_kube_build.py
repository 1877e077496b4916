"""The local Kubernetes build: pins in one place, a cache key that follows its inputs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from hanzo_stream.artifacts import versions
from hanzo_stream.kube import build

ROOT = Path(__file__).resolve().parents[2]


def _requires(mod: str) -> dict[str, str]:
    text = (ROOT / "kube" / mod / "go.mod").read_text()
    return dict(re.findall(r"^(?:require )?\s*([\w./-]+) (v[\w.+-]+)(?: // indirect)?$", text, re.M))


def test_go_modules_require_the_releases_versions_py_pins():
    k8s = _requires("k8s")
    assert k8s["k8s.io/kubernetes"] == versions.KUBERNETES_VERSION
    assert k8s["github.com/coredns/coredns"] == versions.COREDNS_VERSION
    staging = re.findall(r"^\s*(k8s\.io/[\w-]+) => \1 (v[\d.]+)$",
                         (ROOT / "kube/k8s/go.mod").read_text(), re.M)
    assert len(staging) >= 30
    assert {v for _, v in staging} == {"v0." + versions.KUBERNETES_VERSION.split(".", 1)[1]}
    pulumi = _requires("pulumi")
    assert pulumi["github.com/pulumi/pulumi/pkg/v3"] == "v" + versions.PULUMI_VERSION
    assert pulumi["github.com/pulumi/pulumi/sdk/v3"] == "v" + versions.PULUMI_VERSION
    provider = _requires("provider")
    assert provider["github.com/pulumi/pulumi-kubernetes/provider/v4"] == \
        versions.PULUMI_KUBERNETES_PROVIDER_MODULE
    assert f"sdk/v4 v{versions.PULUMI_KUBERNETES_VERSION}" in (ROOT / "kube/provider/go.mod").read_text()


def test_the_pypi_kubernetes_sdk_is_the_providers_release():
    text = (ROOT / "pyproject.toml").read_text()
    assert f'"pulumi-kubernetes=={versions.PULUMI_KUBERNETES_VERSION}"' in text


def test_the_cache_key_changes_with_the_modules_sources_and_flags(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "_go_version", lambda: "go1.26.8")
    shutil.copytree(ROOT / "kube" / "k8s", tmp_path / "k8s")
    monkeypatch.setattr(build, "MODULES", tmp_path)
    before = build.key(build.K8S)
    assert build.key(build.K8S) == before  # stable
    (tmp_path / "k8s" / "cmd" / "coredns" / "schema-embed.json").write_text("{}")
    assert build.key(build.K8S) == before  # generated files do not count
    gomod = tmp_path / "k8s" / "go.mod"
    gomod.write_text(gomod.read_text() + "\n// changed\n")
    changed = build.key(build.K8S)
    assert changed != before
    monkeypatch.setattr(build, "_go_version", lambda: "go1.27.0")
    assert build.key(build.K8S) != changed
    other = build.Module("k8s", build.K8S.binaries, build.K8S.ldflags + ("-X a.b=c",), build.K8S.packages)
    assert build.key(other) != build.key(build.K8S)


def test_kubernetes_binaries_report_the_pinned_version():
    flags = " ".join(build.K8S.ldflags)
    assert f"k8s.io/component-base/version.gitVersion={versions.KUBERNETES_VERSION}" in flags
    assert "k8s.io/component-base/version.gitMinor=" + versions.KUBERNETES_VERSION.split(".")[1] in flags
