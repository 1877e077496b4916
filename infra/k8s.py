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
    ("apps/v1", "StatefulSet"): k8s.apps.v1.StatefulSet,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
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


def apply(obj: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> pulumi.Resource:
    key = (obj["apiVersion"], obj["kind"])
    body = {_snake(k): v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    if key in _TYPED:
        return _TYPED[key](resource_name(obj), opts=opts, **body)
    if key in CUSTOM:
        return k8s.apiextensions.CustomResource(
            resource_name(obj), api_version=obj["apiVersion"], kind=obj["kind"], opts=opts,
            **body)
    raise ValueError(f"no resource class for {key}; add it to infra/k8s.py")
