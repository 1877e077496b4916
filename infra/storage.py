"""The brokers' volumes after the first `pulumi up`: resized in place, never shrunk.

A StatefulSet's volumeClaimTemplates are immutable: changing them made Pulumi replace the
StatefulSet (every broker down at once) and left the claims at their old size anyway. So
the StatefulSet ignores later changes to its templates (IGNORE_ON_STATEFULSET), and each
broker's claim `data-kafka-<ordinal>`, which the StatefulSet controller creates from the
template, gets its size from a server-side apply patch of our own field manager (forced:
the controller manager owns the field until then). A larger `storageSize` expands the
volumes in place; the patches run after the StatefulSet is ready, so a pod added in the
same `pulumi up` has its claim by then (created at the template's first size, then grown).

Two requests are refused before anything changes (`guard`; every resource waits for it):
a size below the current one (a volume cannot shrink), and a larger size when the claims'
StorageClass does not allow volume expansion.

Where the current size comes from: the `storageSize` output of this stack's last
successful `pulumi up`, read through a StackReference to the stack itself. That is the
simplest robust source: it exists in preview and in up alike, it is empty for a stack
never deployed (nothing to compare, nothing to read), and it needs no object to exist.
Reading the claims instead (`PersistentVolumeClaim.get`) fails the whole update when a
claim does not exist yet (a new stack, or its first preview), and the program cannot see
the patches' own state. A claim is read only to learn its StorageClass (the one the
`storageClass` setting or the cluster default gave it when it was created), and only when
a larger size is asked for, i.e. when the last deployment says the claims exist.
"""

from __future__ import annotations

from typing import Any

import pulumi

from . import k8s
from .settings import PROJECT, SettingsError, StackSettings, quantity_bytes
from .topology import Topology

FIELD_MANAGER = "hanzo-stream-storage"
OUTPUT = "storageSize"  # the stack output the next `pulumi up` compares with
IGNORE_ON_STATEFULSET = ["spec.volumeClaimTemplates"]


class StorageRefused(SettingsError):
    """storageSize asks for something the volumes cannot do; nothing was changed."""


def patches(s: StackSettings, top: Topology) -> list[dict[str, Any]]:
    """One server-side apply patch per broker claim, setting only its requested size."""
    return [{
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": top.claim(i), "namespace": top.namespace, "annotations": {
            "pulumi.com/patchFieldManager": FIELD_MANAGER, "pulumi.com/patchForce": "true"}},
        "spec": {"resources": {"requests": {"storage": s.storageSize}}},
    } for i in range(top.brokers)]


def last_deployment() -> pulumi.StackReference:
    """This stack's outputs as its last successful `pulumi up` left them (none: never
    deployed). One per program run: the guards that compare with the last deployment
    (storageSize here, brokers in broker.py) share it."""
    me = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    return pulumi.StackReference("last-deployment", stack_name=me)


def guard(s: StackSettings, top: Topology, last: pulumi.StackReference) -> pulumi.Output:
    """Resolves once storageSize is safe to apply; raises StorageRefused otherwise."""
    return last.get_output(OUTPUT).apply(lambda current: check(s, top, current))


def _refuse(message: str) -> None:
    pulumi.log.error(message)  # the reason first, as a plain diagnostic, then the traceback
    raise StorageRefused(message)


def check(s: StackSettings, top: Topology, current: str | None) -> Any:
    if current is None or quantity_bytes(s.storageSize) == quantity_bytes(current):
        return None
    if quantity_bytes(s.storageSize) < quantity_bytes(current):
        _refuse(
            f"{PROJECT}:storageSize is {s.storageSize} but the brokers' volumes are {current}: a "
            f"volume cannot shrink. Nothing was changed; set it back with `pulumi config set "
            f"storageSize {current}` (or larger).")
    claim = k8s.get("v1", "PersistentVolumeClaim", top.claim(0), top.namespace)
    return claim.spec.apply(lambda spec: expandable(s, top, current, spec.storage_class_name))


def expandable(s: StackSettings, top: Topology, current: str, class_name: str | None) -> Any:
    """Refuse the increase unless the claims' StorageClass allows volume expansion."""
    fix = f"Nothing was changed; set it back with `pulumi config set storageSize {current}`"
    grow = f"{PROJECT}:storageSize grows from {current} to {s.storageSize}"
    if not class_name:
        _refuse(f"{grow}, but claim {top.claim(0)} has no StorageClass, so its volume cannot be "
                f"expanded. {fix}.")
    sc = k8s.get("storage.k8s.io/v1", "StorageClass", class_name)

    def allowed(allow: bool | None) -> None:
        if not allow:
            _refuse(
                f"{grow}, but StorageClass {class_name} (of claim {top.claim(0)}) does not allow "
                f"volume expansion (allowVolumeExpansion is not true). {fix}, or have "
                f"allowVolumeExpansion set to true on {class_name} (if its provisioner can "
                "expand volumes) and run `pulumi up` again.")

    return sc.allow_volume_expansion.apply(allowed)
