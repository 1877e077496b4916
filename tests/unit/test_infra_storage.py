"""The brokers' volumes (infra/storage.py): the StatefulSet never changes its claim templates,
each claim gets its size through a server-side apply patch, and a storageSize the volumes
cannot take is refused before any Kubernetes object changes. "The last deployment" and the
cluster's claim and StorageClass are what the mocks are told the state and cluster hold."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from infra.settings import SettingsError, parse, quantity_bytes

from .infra_helpers import RenderFailed, reads, registered, render, resource

STACK_REF = ("pulumi:pulumi:StackReference", "organization/hanzo-stream/dev")
CLAIM_READ = ("kubernetes:core/v1:PersistentVolumeClaim", "hanzo/data-kafka-0")


def last(size: str) -> tuple[str, str]:
    """The stack's last successful `pulumi up` left storageSize at `size`."""
    return ("last-deployment", json.dumps({"outputs": {"storageSize": size}}))


def claim(storage_class: str | None = "standard") -> tuple[str, str]:
    return ("read-persistentvolumeclaim-data-kafka-0",
            json.dumps({"spec": {"storageClassName": storage_class}}))


def storage_class(allow: bool | None) -> tuple[str, str]:
    return ("read-storageclass-standard",
            json.dumps({} if allow is None else {"allowVolumeExpansion": allow}))


def patches(rendered: dict) -> list[dict]:
    return [r for r in registered(rendered) if r["type"] == "kubernetes:core/v1:PersistentVolumeClaimPatch"]


@pytest.mark.parametrize(("stack", "brokers", "size"), [("dev", 1, "10Gi"), ("prod", 3, "50Gi")])
def test_each_broker_claim_gets_its_size_from_a_patch_after_the_statefulset(stack, brokers, size):
    out = render(stack)
    sts = resource(out, "StatefulSet", "kafka")
    assert sts["ignore_changes"] == ["spec.volumeClaimTemplates"]  # immutable: never replaced
    (template,) = sts["inputs"]["spec"]["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "data"
    ps = patches(out)
    assert [p["inputs"]["metadata"]["name"] for p in ps] == [f"data-kafka-{i}" for i in range(brokers)]
    for p in ps:
        assert p["inputs"] == {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": p["inputs"]["metadata"]["name"], "namespace": "hanzo",
                         "annotations": {"pulumi.com/patchFieldManager": "hanzo-stream-storage",
                                         "pulumi.com/patchForce": "true"}},
            "spec": {"resources": {"requests": {"storage": size}}}}
        assert "statefulset-kafka" in p["dependencies"]  # the controller made the claim by then
    assert out["outputs"]["storageSize"] == {"value": size, "secret": False}  # for the next up


def test_a_grown_stack_patches_the_new_brokers_claims_too():
    out = render("dev", (("brokers", "3"),), (), (("kafka-initial-controllers", '{"result": 1}'),))
    assert [p["inputs"]["metadata"]["name"] for p in patches(out)] == [
        "data-kafka-0", "data-kafka-1", "data-kafka-2"]


def test_every_kubernetes_object_waits_for_the_storage_guard():
    """A refusal stops the update before any Kubernetes object changes: each one depends on
    the read of the last deployment the guard decides on."""
    out = render("prod")
    assert all("last-deployment" in r["dependencies"] for r in registered(out))
    assert len(registered(out)) >= 40


def test_a_new_stack_and_an_unchanged_size_read_nothing_from_the_cluster():
    assert reads(render("dev")) == [STACK_REF]  # never deployed: nothing to compare
    assert reads(render("dev", (), (), (last("10Gi"),))) == [STACK_REF]
    assert reads(render("dev", (), (), (last("10240Mi"),))) == [STACK_REF]  # the same size


def test_a_smaller_size_is_refused_volumes_cannot_shrink():
    with pytest.raises(RenderFailed, match=r"hanzo-stream:storageSize is 10Gi but the brokers' volumes "
                                           r"are 20Gi: a volume cannot shrink\. Nothing was changed; set "
                                           r"it back with `pulumi config set storageSize 20Gi`"):
        render("dev", (), (), (last("20Gi"),))


@pytest.mark.parametrize("allow", [False, None], ids=["false", "unset"])
def test_a_larger_size_is_refused_when_the_storage_class_cannot_expand(allow):
    with pytest.raises(RenderFailed, match=r"storageSize grows from 5Gi to 10Gi, but StorageClass "
                                           r"standard \(of claim data-kafka-0\) does not allow volume "
                                           r"expansion .*pulumi config set storageSize 5Gi"):
        render("dev", (), (), (last("5Gi"), claim(), storage_class(allow)))


def test_a_larger_size_is_refused_for_a_claim_without_storage_class():
    with pytest.raises(RenderFailed, match=r"claim data-kafka-0 has no StorageClass, so its volume "
                                           r"cannot be expanded"):
        render("dev", (), (), (last("5Gi"), claim(None)))


def test_a_larger_size_expands_the_volumes_in_place():
    out = render("dev", (), (), (last("5Gi"), claim(), storage_class(True)))
    assert reads(out) == [STACK_REF, CLAIM_READ, ("kubernetes:storage.k8s.io/v1:StorageClass", "standard")]
    assert [p["inputs"]["spec"]["resources"]["requests"]["storage"] for p in patches(out)] == ["10Gi"]
    # The engine keeps the StatefulSet's claim template as it was: no replacement, no restart.
    assert resource(out, "StatefulSet", "kafka")["ignore_changes"] == ["spec.volumeClaimTemplates"]


@pytest.mark.parametrize(("quantity", "size"), [
    ("50Gi", 50 * 2**30), ("100G", 10**11), ("1.5Ti", 3 * 2**39), ("5e9", 5 * 10**9),
    ("53687091200", 50 * 2**30), ("512Mi", 2**29), ("1k", 1000),
])
def test_storage_quantities_compare_as_bytes(quantity, size):
    assert quantity_bytes(quantity) == Decimal(size)


@pytest.mark.parametrize("bad", ["50GB", "", "Gi", "-1Gi", "fifty"])
def test_a_storage_size_that_is_no_quantity_is_refused(bad):
    with pytest.raises(SettingsError, match="storage quantity|larger than 0"):
        parse({"storageSize": bad})
