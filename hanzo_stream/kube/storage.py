"""The local node's volumes: a provisioner and resizer for the `hanzo-local` StorageClass.

What a cloud's CSI driver does for a real cluster, for directories on this machine:
a claim of the class gets a `local` PersistentVolume (a directory under --root, pinned to
the node; kubelet applies the pod's fsGroup to it), a released volume is deleted with its
directory, and a claim whose request grows is resized in place (the volume's capacity,
then the claim's status), which is what `allowVolumeExpansion: true` promises. A
directory has no size of its own, so "resized" is bookkeeping, exactly as the API shows it.

    python -m hanzo_stream.kube.storage --kubeconfig K --root DIR --node NAME --class NAME
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

PROVISIONER = "hanzo.ai/local-path"
_UNITS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4, "Ki": 1024, "Mi": 1024**2,
          "Gi": 1024**3, "Ti": 1024**4, "m": 0.001}


def quantity(q: str) -> float:
    """A Kubernetes quantity ("50Gi", "1G", "512Mi") in bytes."""
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", q.strip())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"not a quantity: {q!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


@dataclass
class Api:
    """Just enough of the API server's REST interface, with the kubeconfig's client cert."""

    server: str
    ctx: ssl.SSLContext

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Api:
        doc = yaml.safe_load(path.read_text())
        cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
        ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        return cls(cluster["server"], ctx)

    def call(self, method: str, path: str, body: dict | None = None,
             content_type: str = "application/json") -> dict:
        req = urllib.request.Request(self.server + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": content_type})
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
            return json.loads(r.read() or b"{}")

    def merge_patch(self, path: str, body: dict) -> dict:
        return self.call("PATCH", path, body, "application/merge-patch+json")


def storage_class(name: str) -> dict:
    return {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name, "annotations": {
            "storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": PROVISIONER, "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate", "allowVolumeExpansion": True,
    }


def volume_for(claim: dict, root: Path, node: str) -> dict:
    meta, spec = claim["metadata"], claim["spec"]
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{meta['uid']}",
                     "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec.get("accessModes", ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec.get("storageClassName"),
            "volumeMode": spec.get("volumeMode", "Filesystem"),
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
            "local": {"path": str(root / f"{meta['namespace']}-{meta['name']}-{meta['uid'][:8]}")},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
        },
    }


def reconcile(api: Api, root: Path, node: str, klass: str) -> None:
    """One pass: provision pending claims, grow resized ones, delete released volumes."""
    claims = api.call("GET", "/api/v1/persistentvolumeclaims")["items"]
    volumes = {v["metadata"]["name"]: v for v in api.call("GET", "/api/v1/persistentvolumes")["items"]}
    for c in claims:
        spec, status, meta = c["spec"], c.get("status", {}), c["metadata"]
        if spec.get("storageClassName") != klass:
            continue
        want = spec["resources"]["requests"]["storage"]
        if status.get("phase") == "Pending" and not spec.get("volumeName"):
            pv = volume_for(c, root, node)
            if pv["metadata"]["name"] not in volumes:
                Path(pv["spec"]["local"]["path"]).mkdir(parents=True, exist_ok=True)
                api.call("POST", "/api/v1/persistentvolumes", pv)
                print(f"provisioned {pv['metadata']['name']} for {meta['namespace']}/{meta['name']} "
                      f"({want})", flush=True)
        elif status.get("phase") == "Bound":
            have = (status.get("capacity") or {}).get("storage", want)
            if quantity(want) > quantity(have):
                api.merge_patch(f"/api/v1/persistentvolumes/{spec['volumeName']}",
                                {"spec": {"capacity": {"storage": want}}})
                api.merge_patch(
                    f"/api/v1/namespaces/{meta['namespace']}/persistentvolumeclaims/{meta['name']}/status",
                    {"status": {"capacity": {"storage": want}, "allocatedResources": {"storage": want},
                                "allocatedResourceStatuses": None, "conditions": None}})
                print(f"resized {meta['namespace']}/{meta['name']}: {have} -> {want}", flush=True)
    for name, v in volumes.items():
        ours = v["metadata"].get("annotations", {}).get("pv.kubernetes.io/provisioned-by") == PROVISIONER
        if ours and v.get("status", {}).get("phase") == "Released" \
                and v["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
            shutil.rmtree(v["spec"]["local"]["path"], ignore_errors=True)
            api.call("DELETE", f"/api/v1/persistentvolumes/{name}")
            print(f"deleted {name} and its directory", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", type=Path, required=True)
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--class", dest="klass", required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args(argv)
    api = Api.from_kubeconfig(a.kubeconfig)
    while True:
        try:
            try:
                api.call("GET", f"/apis/storage.k8s.io/v1/storageclasses/{a.klass}")
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    raise
                api.call("POST", "/apis/storage.k8s.io/v1/storageclasses", storage_class(a.klass))
            reconcile(api, a.root, a.node, a.klass)
        except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
            print(f"storage: {e}", file=sys.stderr, flush=True)
        time.sleep(a.interval)


if __name__ == "__main__":
    sys.exit(main())
