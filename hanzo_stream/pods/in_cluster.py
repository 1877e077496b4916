"""The Kubernetes API as a pod sees it: its service account token, CA and namespace.

The roll gate (reads its StatefulSet) and the roller (reads the StatefulSet and its pods,
deletes pods) need a handful of calls each; the standard library does them, so neither pulls
in a Kubernetes client library.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")  # the projected token's mount


@dataclass(frozen=True)
class Api:
    base: str  # https://host:port
    namespace: str
    sa_dir: Path
    tls: ssl.SSLContext

    def request(self, method: str, path: str, body: Any = None) -> dict | None:
        """One call; None on 404 (gone is an answer, not an error). The token is re-read on
        each call: the kubelet rotates it."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.base}{path}", data=data, method=method, headers={
            "Authorization": f"Bearer {(self.sa_dir / 'token').read_text().strip()}",
            "Accept": "application/json", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.tls) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def get(self, kind_path: str, name: str) -> dict | None:
        """`kind_path`: e.g. "apis/apps/v1/statefulsets" or "api/v1/pods" (namespaced)."""
        return self.request("GET", self._path(kind_path, name))

    def delete(self, kind_path: str, name: str, uid: str | None = None) -> dict | None:
        """Delete `name`; with `uid`, only that very object (not a successor of the same name)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            body["preconditions"] = {"uid": uid}
        return self.request("DELETE", self._path(kind_path, name), body)

    def _path(self, kind_path: str, name: str) -> str:
        group, _, plural = kind_path.rpartition("/")
        return f"/{group}/namespaces/{self.namespace}/{plural}/{name}"


def api(sa_dir: Path = SA_DIR, environ: Mapping[str, str] = os.environ) -> Api | None:
    """The API as this pod's service account, or None when the pod has no token."""
    if not (sa_dir / "token").exists():
        return None
    host, port = environ["KUBERNETES_SERVICE_HOST"], environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    return Api(f"https://{host}:{port}", (sa_dir / "namespace").read_text().strip(), sa_dir,
               ssl.create_default_context(cafile=str(sa_dir / "ca.crt")))
