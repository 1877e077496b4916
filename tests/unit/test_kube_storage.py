"""The local volume provisioner and resizer, against an in-memory API server."""

from __future__ import annotations

import copy

import pytest

from hanzo_stream.kube import storage


class FakeApi:
    """Lists claims and volumes; records POST/PATCH/DELETE as the API server would apply them."""

    def __init__(self, claims: list[dict]):
        self.claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
        self.volumes: dict[str, dict] = {}

    def call(self, method, path, body=None, content_type="application/json"):
        if method == "GET" and path == "/api/v1/persistentvolumeclaims":
            return {"items": copy.deepcopy(list(self.claims.values()))}
        if method == "GET" and path == "/api/v1/persistentvolumes":
            return {"items": copy.deepcopy(list(self.volumes.values()))}
        if method == "POST" and path == "/api/v1/persistentvolumes":
            self.volumes[body["metadata"]["name"]] = body
            return body
        if method == "DELETE":
            del self.volumes[path.rsplit("/", 1)[1]]
            return {}
        raise AssertionError((method, path))

    def merge_patch(self, path, body):
        if path.startswith("/api/v1/persistentvolumes/"):
            v = self.volumes[path.rsplit("/", 1)[1]]
            v["spec"]["capacity"] |= body["spec"]["capacity"]
            return v
        ns, name = path.split("/namespaces/")[1].split("/persistentvolumeclaims/")
        c = self.claims[(ns, name.removesuffix("/status"))]
        c["status"] |= {k: v for k, v in body["status"].items() if v is not None}
        return c


def claim(name: str, size: str, klass: str = "hanzo-local", phase: str = "Pending",
          volume: str | None = None, capacity: str | None = None) -> dict:
    c = {"metadata": {"namespace": "hanzo", "name": name, "uid": f"uid-{name}-0000"},
         "spec": {"storageClassName": klass, "accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": size}}},
         "status": {"phase": phase}}
    if volume:
        c["spec"]["volumeName"] = volume
    if capacity:
        c["status"]["capacity"] = {"storage": capacity}
    return c


@pytest.mark.parametrize(("q", "b"), [("50Gi", 50 * 1024**3), ("1G", 1e9), ("512Mi", 512 * 1024**2),
                                      ("100", 100), ("1.5Gi", 1.5 * 1024**3)])
def test_quantity(q, b):
    assert storage.quantity(q) == b


def test_quantity_refuses_nonsense():
    with pytest.raises(ValueError):
        storage.quantity("10 bytes")


def test_a_pending_claim_of_the_class_gets_a_local_volume_on_the_node(tmp_path):
    api = FakeApi([claim("data-kafka-0", "2Gi"), claim("other", "1Gi", klass="fast")])
    storage.reconcile(api, tmp_path, "hanzo-node", "hanzo-local")
    assert list(api.volumes) == ["pvc-uid-data-kafka-0-0000"]
    pv = api.volumes["pvc-uid-data-kafka-0-0000"]
    assert pv["spec"]["capacity"] == {"storage": "2Gi"}
    assert pv["spec"]["claimRef"]["uid"] == "uid-data-kafka-0-0000"
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0][
        "values"] == ["hanzo-node"]
    path = tmp_path / "hanzo-data-kafka-0-uid-data"
    assert pv["spec"]["local"]["path"] == str(path) and path.is_dir()
    storage.reconcile(api, tmp_path, "hanzo-node", "hanzo-local")  # idempotent
    assert len(api.volumes) == 1


def test_a_grown_claim_is_resized_in_place_and_a_same_size_one_is_left_alone(tmp_path):
    api = FakeApi([claim("data-kafka-0", "4Gi", phase="Bound", volume="pv0", capacity="2Gi"),
                   claim("data-kafka-1", "2Gi", phase="Bound", volume="pv1", capacity="2Gi")])
    api.volumes = {n: {"metadata": {"name": n}, "spec": {"capacity": {"storage": "2Gi"}}}
                   for n in ("pv0", "pv1")}
    storage.reconcile(api, tmp_path, "hanzo-node", "hanzo-local")
    assert api.volumes["pv0"]["spec"]["capacity"] == {"storage": "4Gi"}
    assert api.claims[("hanzo", "data-kafka-0")]["status"]["capacity"] == {"storage": "4Gi"}
    assert api.volumes["pv1"]["spec"]["capacity"] == {"storage": "2Gi"}


def test_a_released_volume_is_deleted_with_its_directory_and_a_foreign_one_is_kept(tmp_path):
    api = FakeApi([])
    d = tmp_path / "gone"
    d.mkdir()
    (d / "segment").write_text("x")
    ours = {"metadata": {"name": "pvc-1", "annotations": {
        "pv.kubernetes.io/provisioned-by": storage.PROVISIONER}},
        "spec": {"persistentVolumeReclaimPolicy": "Delete", "local": {"path": str(d)}},
        "status": {"phase": "Released"}}
    foreign = copy.deepcopy(ours) | {"metadata": {"name": "pv-by-hand", "annotations": {}}}
    api.volumes = {"pvc-1": ours, "pv-by-hand": foreign}
    storage.reconcile(api, tmp_path, "hanzo-node", "hanzo-local")
    assert list(api.volumes) == ["pv-by-hand"]
    assert not d.exists()


def test_the_class_allows_expansion_and_is_the_default():
    sc = storage.storage_class("hanzo-local")
    assert sc["allowVolumeExpansion"] is True
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
