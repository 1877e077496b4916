"""What the target cluster must have before anything is created, checked at `pulumi preview`.

A first `pulumi up` on a cluster that cannot run the stack used to fail slowly: on EKS 1.30+
(no default StorageClass) the brokers' claims stayed Pending and `up` waited out the
StatefulSet's rollout timeout (40 minutes for three brokers); on a Kubernetes before 1.29 a
native sidecar is an init container that never ends, so the pods never start. Both are
questions the API server answers in milliseconds, so the program asks them first.

What is needed is read from the rendered manifests, never from a second list of rules: every
claim's storageClassName (none: the cluster's default), and every init container with
`restartPolicy: Always` (a native sidecar). The cluster is read with the official Kubernetes
client from the same kubeconfig and context the Kubernetes provider uses (Pulumi config
`kubernetes:kubeconfig` / `kubernetes:context`, else KUBECONFIG or ~/.kube/config, else the
pod's service account), exec credential plugins such as `aws eks get-token` included.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from .settings import PROJECT, SettingsError

NATIVE_SIDECARS = (1, 29)  # SidecarContainers on by default (beta in 1.29, GA in 1.33)
REQUEST_TIMEOUT_S = 10  # each read; a cluster that does not answer fails like the provider would


class PreflightRefused(SettingsError):
    """The cluster cannot run what the stack renders; nothing was created."""


@dataclass(frozen=True)
class ClusterFacts:
    version: tuple[int, int]  # the API server's (major, minor)
    storage_classes: dict[str, bool] | None  # name -> is the default; None: not allowed to list
    where: str = "the cluster"  # how the refusal names it (kubeconfig context)


def _pods(m: dict[str, Any]) -> Iterable[dict[str, Any]]:
    spec = m.get("spec") or {}
    for path in (("template", "spec"), ("jobTemplate", "spec", "template", "spec")):
        node: Any = spec
        for key in path:
            node = (node or {}).get(key)
        if node:
            yield node


def claims(manifests: Iterable[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(which claim, its storageClassName or None) for every claim the stack creates."""
    out = []
    for m in manifests:
        name = f"{m['kind']} {m['metadata']['name']}"
        if m["kind"] == "PersistentVolumeClaim":
            out.append((name, (m.get("spec") or {}).get("storageClassName")))
        for t in (m.get("spec") or {}).get("volumeClaimTemplates") or []:
            out.append((f"{name} claim {t['metadata']['name']}",
                        (t.get("spec") or {}).get("storageClassName")))
    return out


def needs(manifests: Iterable[dict[str, Any]]) -> list[tuple[tuple[int, int], str]]:
    """The Kubernetes versions the pods need, each with what needs it."""
    out = []
    for m in manifests:
        for pod in _pods(m):
            for c in pod.get("initContainers") or []:
                if c.get("restartPolicy") == "Always":
                    out.append((NATIVE_SIDECARS, f"{m['kind']} {m['metadata']['name']}'s container "
                                                 f"{c['name']} is a native sidecar"))
    return out


def refusals(facts: ClusterFacts, manifests: list[dict[str, Any]]) -> list[str]:
    """Every reason this cluster cannot run these manifests, each with its fix (pure)."""
    out = []
    have = facts.version
    for want, why in needs(manifests):
        if have < want:
            out.append(f"{facts.where} runs Kubernetes {have[0]}.{have[1]}, but {why}, which needs "
                       f"{want[0]}.{want[1]} or newer (older versions never start the pod). Upgrade "
                       f"the cluster to {want[0]}.{want[1]}+ first.")
            break
    classes = facts.storage_classes
    if classes is None:
        return out
    listed = ", ".join(f"{n} (default)" if d else n for n, d in sorted(classes.items())) or "none"
    defaults = [n for n, d in classes.items() if d]
    for claim, sc in claims(manifests):
        if sc and sc not in classes:
            out.append(f"{PROJECT}:storageClass is {sc!r}, which {facts.where} does not have "
                       f"(needed by {claim}); its StorageClasses: {listed}. Set an existing one: "
                       f"`pulumi config set storageClass NAME`.")
            break
        if not sc and not defaults:
            out.append(f"{PROJECT}:storageClass is unset and {facts.where} has no default StorageClass "
                       f"(EKS 1.30+ ships none), so {claim} would stay Pending and `pulumi up` would "
                       f"wait for its timeout. Its StorageClasses: {listed}. Set one: `pulumi config "
                       f"set storageClass NAME`, or mark one the default (annotation "
                       f"storageclass.kubernetes.io/is-default-class=true).")
            break
    return out


def check(facts: ClusterFacts | None, manifests: list[dict[str, Any]]) -> None:
    """Raise PreflightRefused (after logging each reason) if the cluster cannot run these."""
    if facts is None:
        return
    problems = refusals(facts, manifests)
    for p in problems:
        pulumi.log.error(p)
    if problems:
        raise PreflightRefused("; ".join(problems))


def _under_mocks() -> bool:
    from pulumi.runtime.mocks import MockMonitor
    from pulumi.runtime.settings import get_monitor

    return isinstance(get_monitor(), MockMonitor)


def _api_client() -> tuple[Any, str]:
    """A client for the cluster the provider deploys to, and how to name it."""
    import yaml
    from kubernetes import client, config
    from pulumi.runtime.config import get_config

    text, context = get_config("kubernetes:kubeconfig"), get_config("kubernetes:context")
    if text:  # the provider takes a path or the file's contents
        path = os.path.expanduser(text)
        doc = yaml.safe_load(Path(path).read_text() if os.path.isfile(path) else text)
        api = config.new_client_from_config_dict(doc, context=context)
        return api, f"the cluster of kubeconfig context {context or doc.get('current-context')!r}"
    files = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    if os.environ.get("KUBECONFIG") or os.path.exists(files):
        api = config.new_client_from_config(config_file=files, context=context)
        _, active = config.list_kube_config_contexts(config_file=files)
        return api, f"the cluster of kubeconfig context {context or active['name']!r}"
    config.load_incluster_config()
    return client.ApiClient(), "this pod's cluster"


def read_cluster() -> ClusterFacts | None:
    """The facts of the cluster the provider will deploy to; None under Pulumi's mocks
    (rendering offline) or when no cluster is configured (the provider then says so)."""
    if _under_mocks():
        return None
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    try:
        api, where = _api_client()
    except (ConfigException, OSError) as e:
        pulumi.log.warn(f"preflight skipped: no cluster configuration to read ({e})")
        return None
    with api:
        try:
            code = client.VersionApi(api).get_code(_request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as e:
            raise PreflightRefused(f"{where} refused to say its version ({e.status} {e.reason}): "
                                   "check the kubeconfig's credentials") from e
        except HTTPError as e:
            raise PreflightRefused(f"{where} could not be reached ({e}): "
                                   "check that the kubeconfig's server is reachable") from e
        version = (int(re.sub(r"\D", "", code.major)), int(re.sub(r"\D", "", code.minor)))
        try:
            items = client.StorageV1Api(api).list_storage_class(
                _request_timeout=REQUEST_TIMEOUT_S).items
        except ApiException as e:
            if e.status not in (401, 403):
                raise
            pulumi.log.warn(f"preflight: not allowed to list StorageClasses on {where} "
                            f"({e.status}); the volumes' storage class is not checked")
            return ClusterFacts(version, None, where)
    default = "storageclass.kubernetes.io/is-default-class"
    classes = {sc.metadata.name: (sc.metadata.annotations or {}).get(default) == "true"
               for sc in items}
    return ClusterFacts(version, classes, where)
