"""The roll of a 3+ broker stack: its StatefulSet is `OnDelete`, and a Job made for each pod
template restarts the out-of-date brokers one at a time, the active controller last
(hanzo_stream/pods/roller.py says why and how). `pulumi up` waits for the Job: the update ends
when the roll has ended.

The Job's name carries the template's digest, so a new template makes a new Job (Jobs are
immutable) and an unchanged one plans nothing. On a new stack, or after a change that
restarts nothing, the Job finds every pod current and ends at once.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pulumi

from hanzo_stream.registry import platform

from . import security_context
from .reconciler import connection_env
from .settings import StackSettings
from .tls import CA_MOUNT, ca_volume
from .topology import Topology, labels

LABELS = labels("roller", "kafka-roller")


def strategy(gated: bool) -> dict:
    """The StatefulSet's updateStrategy: the roller's (OnDelete) where the roll gate runs;
    one broker has no order to choose."""
    return {"type": "OnDelete" if gated else "RollingUpdate"}


def minutes(top: Topology) -> int:
    """How long a roll may take: each broker may wait for its replicas to catch up."""
    return 10 + 10 * top.brokers


def template_digest(template: Any) -> pulumi.Output:
    return pulumi.Output.from_input(template).apply(
        lambda t: hashlib.sha256(json.dumps(t, sort_keys=True).encode()).hexdigest()[:10])


def rbac(top: Topology) -> list[dict]:
    """The roller reads its StatefulSet and deletes its brokers' pods, by name: nothing else."""
    name = f"{top.statefulset}-roller"
    meta = {"name": name, "namespace": top.namespace, "labels": LABELS}
    pods = [f"{top.statefulset}-{i}" for i in range(top.brokers)]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta,
         "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": ["apps"], "resources": ["statefulsets"],
                    "resourceNames": [top.statefulset], "verbs": ["get"]},
                   {"apiGroups": [""], "resources": ["pods"], "resourceNames": pods,
                    "verbs": ["get", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": top.namespace}]},
    ]


def _template(s: StackSettings, top: Topology, *args: str) -> dict:
    """The roller's pod: the roller's own login (DescribeQuorum only), the CA, the API server."""
    return {"metadata": {"labels": LABELS}, "spec": {
        "restartPolicy": "Never",
        "serviceAccountName": f"{top.statefulset}-roller",
        "automountServiceAccountToken": True,  # it alone talks to the API server
        "securityContext": security_context.pod(10001),
        "containers": [{
            "name": "roll",
            "image": s.reconcilerImage,
            "command": ["python", "-m", "hanzo_stream.pods.roller", "--statefulset", top.statefulset,
                        "--timeout", str(60 * minutes(top)), *args],
            "env": connection_env(top, platform.ROLLER),
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                          "limits": {"cpu": "200m", "memory": "192Mi"}},
            "securityContext": security_context.container(),
            "volumeMounts": [{"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True}],
        }],
        "volumes": [ca_volume()],
    }}


def _job_spec(s: StackSettings, top: Topology, *args: str) -> dict:
    return {"backoffLimit": 3,  # each run starts from what the pods are: a retry is safe
            "activeDeadlineSeconds": 60 * minutes(top),
            "template": _template(s, top, *args)}


def job(s: StackSettings, top: Topology, digest: Any) -> dict:
    """The Job that rolls the pods of the template whose digest is `digest`."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": pulumi.Output.concat(f"{top.statefulset}-roll-", digest),
                         "namespace": top.namespace, "labels": LABELS},
            "spec": _job_spec(s, top)}


def restart_cronjob(s: StackSettings, top: Topology) -> dict:
    """On-call's rolling restart of every broker, the same way as a roll (`--restart-all`):
    a CronJob that never runs by itself, only the template of
    `kubectl create job --from=cronjob/kafka-restart kafka-restart-$(date +%s)`.
    (`kubectl rollout restart` restarts nothing on an OnDelete StatefulSet.)"""
    spec = _job_spec(s, top, "--restart-all")
    spec["ttlSecondsAfterFinished"] = 7 * 24 * 3600  # its Jobs are not Pulumi's to delete
    return {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": f"{top.statefulset}-restart", "namespace": top.namespace,
                         "labels": LABELS},
            "spec": {"schedule": "0 0 1 1 *", "suspend": True, "concurrencyPolicy": "Forbid",
                     "jobTemplate": {"metadata": {"labels": LABELS}, "spec": spec}}}
