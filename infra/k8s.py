"""Turn a manifest dict into the matching typed pulumi_kubernetes resource.

Every module builds plain manifests (camelCase, as `kubectl` would read them, with
pulumi Outputs where values are secret or computed); this one function registers them.
Keeping manifests as data lets the policy checks and the schema validation see exactly
what is deployed.
"""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

_TYPED = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("apps/v1", "StatefulSet"): k8s.apps.v1.StatefulSet,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("batch/v1", "CronJob"): k8s.batch.v1.CronJob,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("scheduling.k8s.io/v1", "PriorityClass"): k8s.scheduling.v1.PriorityClass,
}

# Server-side apply patches of objects the program does not create (k8s.patch): they set
# only the fields they name, under the field manager their annotations give.
_PATCHES = {
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaimPatch,
}

# Objects the program reads from the cluster but does not manage (k8s.get).
_READS = {
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("storage.k8s.io/v1", "StorageClass"): k8s.storage.v1.StorageClass,
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("discovery.k8s.io/v1", "EndpointSlice"): k8s.discovery.v1.EndpointSlice,
}

# Custom resources: registered untyped; their CRDs come from the operators' charts.
CUSTOM = {
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"),
    ("cert-manager.io/v1", "Certificate"),
}


def resource_name(obj: dict[str, Any]) -> str:
    """Pulumi's logical name: kind and name, unique within the stack."""
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}"


def _snake(key: str) -> str:
    """Top-level fields are keyword arguments (stringData -> string_data); nested stay camel."""
    return re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), key)


def _body(obj: dict[str, Any]) -> dict[str, Any]:
    return {_snake(k): v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def apply(obj: dict[str, Any], opts: pulumi.ResourceOptions | None = None,
          name: str | None = None) -> pulumi.Resource:
    """`name`: the logical name, for an object whose own name is computed (a change of it
    then replaces the object)."""
    key = (obj["apiVersion"], obj["kind"])
    body, name = _body(obj), name or resource_name(obj)
    if key in _TYPED:
        return _TYPED[key](name, opts=opts, **body)
    if key in CUSTOM:
        return k8s.apiextensions.CustomResource(
            name, api_version=obj["apiVersion"], kind=obj["kind"], opts=opts, **body)
    raise ValueError(f"no resource class for {key}; add it to infra/k8s.py")


def patch(obj: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> pulumi.Resource:
    """A server-side apply patch of an existing object (it must exist when the patch runs)."""
    key = (obj["apiVersion"], obj["kind"])
    if key not in _PATCHES:
        raise ValueError(f"no patch class for {key}; add it to infra/k8s.py")
    return _PATCHES[key](f"{obj['kind'].lower()}patch-{obj['metadata']['name']}", opts=opts,
                         **_body(obj))


def get(api_version: str, kind: str, name: str, namespace: str | None = None) -> pulumi.Resource:
    """Read an object the program does not manage. The whole update fails if it is missing:
    read only what is known to exist."""
    if (api_version, kind) not in _READS:
        raise ValueError(f"no resource class to read {(api_version, kind)}; add it to infra/k8s.py")
    object_id = f"{namespace}/{name}" if namespace else name
    return _READS[(api_version, kind)].get(f"read-{kind.lower()}-{name}", object_id)
