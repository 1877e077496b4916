"""The preflight (infra/preflight.py): what a cluster must have for the rendered stack, read
from the manifests themselves, and a refusal that names the fix for each thing it lacks. The
same check against the real API server and engine: tests/integration/test_kube_1_dev.py."""

from __future__ import annotations

import pytest

from infra import preflight
from infra.preflight import ClusterFacts, PreflightRefused, claims, needs, refusals

from .infra_helpers import manifests, registered, render

EKS = {"gp2": False}  # EKS 1.30+: a class, none of them the default
KIND = {"standard": True}


def _objects(rendered: dict) -> list[dict]:
    """What the program checks: the objects it creates (a claim's size patch is not one)."""
    return [r["inputs"] for r in registered(rendered) if "Patch" not in r["type"]]


def _prod() -> list[dict]:
    return _objects(render("prod"))


def _dev(**sets: str) -> list[dict]:
    return _objects(render("dev", tuple(sets.items())))


def test_every_claim_of_the_stack_is_found_with_its_class():
    found = dict(claims(_dev(spark="true", storageClass="fast")))
    assert found["StatefulSet kafka claim data"] == "fast"
    assert any(k.startswith("PersistentVolumeClaim ") for k in found), found  # the Spark drivers'
    assert set(found.values()) == {"fast"}
    assert set(dict(claims(_dev(spark="true"))).values()) == {None}


def test_a_cluster_older_than_the_native_sidecars_is_refused_naming_them():
    prod = _prod()
    assert {v for v, _ in needs(prod)} == {preflight.NATIVE_SIDECARS}
    old = refusals(ClusterFacts((1, 28), KIND, "the cluster of context 'eks'"), prod)
    assert len(old) == 1
    assert "runs Kubernetes 1.28" in old[0] and "roll-gate is a native sidecar" in old[0]
    assert "Upgrade the cluster to 1.29+" in old[0]
    assert refusals(ClusterFacts((1, 29), KIND), prod) == []
    assert needs(_dev()) == []  # one broker: no roll gate, no version floor of its own
    assert refusals(ClusterFacts((1, 27), KIND), _dev()) == []


def test_no_default_storage_class_is_refused_with_the_classes_there_are():
    (msg,) = refusals(ClusterFacts((1, 33), EKS, "the cluster of context 'eks'"), _dev())
    assert "storageClass is unset and the cluster of context 'eks' has no default" in msg
    assert "StatefulSet kafka claim data would stay Pending" in msg
    assert "Its StorageClasses: gp2." in msg and "pulumi config set storageClass NAME" in msg
    assert refusals(ClusterFacts((1, 33), EKS), _dev(storageClass="gp2")) == []  # named: fine
    assert refusals(ClusterFacts((1, 33), KIND), _dev()) == []  # a default: fine


def test_a_storage_class_the_cluster_lacks_is_refused():
    (msg,) = refusals(ClusterFacts((1, 33), {"gp2": False, "gp3": True}), _dev(storageClass="io2"))
    assert "storageClass is 'io2', which the cluster does not have" in msg
    assert "its StorageClasses: gp2, gp3 (default)." in msg


def test_not_allowed_to_list_classes_checks_the_version_alone():
    assert refusals(ClusterFacts((1, 33), None), _dev(storageClass="io2")) == []
    assert refusals(ClusterFacts((1, 28), None), _prod()) != []


def test_check_raises_with_every_reason_and_nothing_without_facts():
    with pytest.raises(PreflightRefused, match="1.28.*; .*no default StorageClass"):
        preflight.check(ClusterFacts((1, 28), EKS), _prod())
    preflight.check(None, _prod())  # rendering offline (mocks): nothing to ask


def test_rendering_under_mocks_asks_no_cluster(monkeypatch, tmp_path):
    """The program's default reader returns None under Pulumi's mocks, so `infra.render` (the
    pull-request job, with no credential) never looks for a cluster: here a kubeconfig whose
    server refuses every connection would fail the render if it were read."""
    bad = tmp_path / "kubeconfig"
    bad.write_text("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    monkeypatch.setenv("KUBECONFIG", str(bad))
    render.cache_clear()
    try:
        assert manifests(render("dev"))
    finally:
        render.cache_clear()
