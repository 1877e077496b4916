"""The reconciler as a Job: `hanzo-stream apply` against the cluster once brokers are ready.

It is the one writer of SCRAM passwords: it runs with --rotate-passwords, setting every
principal's password to the one Pulumi holds, and a change of any password (a rotation
with `--replace`, or a new stack state after `pulumi destroy` kept the volumes and their
old credentials) changes its pod template, which makes Pulumi replace the Job, so it runs.

topics.yaml travels in an immutable ConfigMap whose name carries the file's content hash,
and so does the Job's: a changed registry (or reconciler image/arguments, or number of
brokers) is a new Job, which Pulumi creates after the StatefulSet is ready and awaits to
completion; an unchanged one is left alone, so `pulumi up` does not re-run it. The broker
count is in the hash because `replication.profile: cluster` means a different replication
factor on a grown cluster: growing from 1 to 3 brokers re-runs apply, which raises it.
"""

from __future__ import annotations

import hashlib

from . import security_context
from .credentials import ADMIN, RECONCILER_KEY, RECONCILER_SECRET, mechanism, password_env
from .settings import StackSettings
from .tls import CA_FILE, CA_MOUNT, ca_volume
from .topology import Topology, labels

REGISTRY_MOUNT = "/etc/hanzo-stream/registry"
CREDENTIALS_MOUNT = "/etc/hanzo-stream/credentials"
LABELS = labels("reconciler", "hanzo-stream-apply")


def content_hash(registry_text: str, s: StackSettings) -> str:
    h = hashlib.sha256()
    for part in (registry_text, s.reconcilerImage, "\0".join(s.reconcilerArgs), str(s.brokers)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:10]


def connection_env(top: Topology, principal: str, bootstrap: str | None = None) -> list[dict]:
    """HANZO_STREAM_* variables every hanzo-stream command and job reads."""
    return [
        {"name": "HANZO_STREAM_BOOTSTRAP", "value": bootstrap or top.bootstrap},
        {"name": "HANZO_STREAM_SECURITY_PROTOCOL", "value": "SASL_SSL"},
        {"name": "HANZO_STREAM_SASL_MECHANISM", "value": mechanism(principal)},
        password_env("HANZO_STREAM_SASL_USERNAME", principal, "username"),
        password_env("HANZO_STREAM_SASL_PASSWORD", principal),
        {"name": "HANZO_STREAM_CA_FILE", "value": CA_FILE},
    ]


def manifests(s: StackSettings, top: Topology, registry_text: str,
              credentials_digest: object = None) -> list[dict]:
    digest = content_hash(registry_text, s)
    cm_name = f"hanzo-stream-registry-{digest}"
    config_map = {
        "apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
        "metadata": {"name": cm_name, "namespace": top.namespace,
                     "labels": {**LABELS, "hanzo.ai/registry-sha": digest}},
        "data": {"topics.yaml": registry_text},
    }
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"hanzo-stream-apply-{digest}", "namespace": top.namespace,
                     "labels": {**LABELS, "hanzo.ai/registry-sha": digest}},
        "spec": {
            "backoffLimit": 6,  # brokers may still be electing a leader on the first run
            "activeDeadlineSeconds": 1800,
            "template": {"metadata": {
                "labels": LABELS,
                "annotations": {"hanzo.ai/credentials-sha": credentials_digest or ""}}, "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "securityContext": security_context.pod(10001),
                "containers": [{
                    "name": "apply",
                    "image": s.reconcilerImage,
                    "command": ["hanzo-stream"],
                    "args": [*s.reconcilerArgs,
                             "--registry", f"{REGISTRY_MOUNT}/topics.yaml",
                             "--secrets-file", f"{CREDENTIALS_MOUNT}/{RECONCILER_KEY}",
                             "--rotate-passwords"],
                    "env": connection_env(top, ADMIN),
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                  "limits": {"cpu": "500m", "memory": "512Mi"}},
                    "securityContext": security_context.container(),
                    "volumeMounts": [
                        {"name": "registry", "mountPath": REGISTRY_MOUNT, "readOnly": True},
                        {"name": "credentials", "mountPath": CREDENTIALS_MOUNT, "readOnly": True},
                        {"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True},
                    ],
                }],
                "volumes": [
                    {"name": "registry", "configMap": {"name": cm_name}},
                    {"name": "credentials", "secret": {"secretName": RECONCILER_SECRET,
                                                       "defaultMode": 0o440}},
                    ca_volume(),
                ],
            }},
        },
    }
    return [config_map, job]
