"""`pulumi up` of the platform's stacks to the local node, with the real Pulumi engine.

The Pulumi CLI and the Kubernetes provider are the ones build.py compiled; Pulumi's
Python language host cannot be built here, so the program runs through the Automation
API's inline program (the Python SDK serves the language runtime itself): the same
`infra.program.main` that `pulumi up` runs from Pulumi.yaml. State lives in a local
directory backend, secrets are encrypted with a passphrase generated once (0600 file),
dynamic providers (infra/generated.py) are launched by the CLI with this Python.

A local stack is a committed stack's settings (Pulumi.dev.yaml, Pulumi.prod.yaml) plus
what differs on this machine (`LOCAL`): the images built here, no operators that are
not installed, resources that fit two cores. Nothing else is bent.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..local.paths import state_dir
from .node import Node

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "hanzo-stream"

# Per environment: what a local stack sets on top of Pulumi.<env>.yaml.
LOCAL: dict[str, dict[str, Any]] = {
    "dev": {"protect": False, "prometheusOperator": False, "grafanaDashboards": False,
            "alertmanager": False, "schemaRegistry": False,
            "cpuRequest": "100m", "memoryRequest": "768Mi", "cpuLimit": "2000m",
            "memoryLimit": "1536Mi", "heapOpts": "-Xms512m -Xmx512m", "storageSize": "2Gi"},
    "prod": {"protect": False, "prometheusOperator": False, "grafanaDashboards": False,
             "alertmanager": False, "schemaRegistry": False,
             "cpuRequest": "100m", "memoryRequest": "768Mi", "cpuLimit": "2000m",
             "memoryLimit": "1536Mi", "heapOpts": "-Xms512m -Xmx512m", "storageSize": "2Gi"},
}


def image_settings() -> dict[str, str]:
    """The stack settings that point at the images built here (images.py)."""
    from . import images

    refs = images.refs()
    return {"image": refs["kafka"], "reconcilerImage": refs["hanzo-stream"],
            "sparkImage": refs["hanzo-stream"]}


def base_config(env: str, root: Path = ROOT) -> dict[str, Any]:
    """Pulumi.<env>.yaml's hanzo-stream settings, as values."""
    import yaml

    doc = yaml.safe_load((root / f"Pulumi.{env}.yaml").read_text()) or {}
    out = {}
    for k, v in (doc.get("config") or {}).items():
        if isinstance(v, dict) and set(v) == {"secure"}:
            continue  # a committed stack's encrypted secret is not ours to decrypt
        out[k.split(":", 1)[1] if ":" in k else k] = v
    return out


def _as_config(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


@dataclass
class Deployer:
    """Runs the platform's Pulumi program against the local node."""

    node: Node = field(default_factory=Node)
    home: Path = field(default_factory=lambda: state_dir() / "pulumi")
    root: Path = ROOT  # the checkout whose topics.yaml, consumers/ and monitoring/ are deployed

    def _passphrase(self) -> str:
        f = self.home / "passphrase"
        if not f.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(32))
        return f.read_text().strip()

    def env(self) -> dict[str, str]:
        bin_dir = str(Path(self.node.binary("pulumi")).parent)
        backend = self.home / "backend"
        backend.mkdir(parents=True, exist_ok=True)
        pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        return {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PULUMI_HOME": str(self.home / "home"),
            "PULUMI_BACKEND_URL": backend.as_uri(),
            "PULUMI_CONFIG_PASSPHRASE": self._passphrase(),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_PYTHON_CMD": sys.executable,  # runs the dynamic providers
            "PYTHONPATH": pythonpath,
            "KUBECONFIG": str(self.node.kubeconfig),
        }

    def stack(self, name: str, env: str, settings: Mapping[str, Any] = ()):
        """Create or select local stack `name` with env's settings, LOCAL[env], the images
        built here, then `settings`; every key is (re)written, so the stack says exactly that."""
        from pulumi import automation as auto

        e = self.env()
        os.environ["PATH"] = e["PATH"]  # the Automation API finds `pulumi` on PATH
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        work = self.home / "work"
        work.mkdir(parents=True, exist_ok=True)
        root = self.root

        def program() -> None:
            from infra.program import main

            main(root)

        opts = auto.LocalWorkspaceOptions(
            work_dir=str(work), pulumi_home=e["PULUMI_HOME"], env_vars=e,
            secrets_provider="passphrase",
            project_settings=auto.ProjectSettings(name=PROJECT, runtime="python"))
        st = auto.create_or_select_stack(name, project_name=PROJECT, program=program, opts=opts)
        values = {**base_config(env, self.root), **LOCAL[env], **image_settings(), **dict(settings)}
        st.set_all_config({f"{PROJECT}:{k}": auto.ConfigValue(_as_config(v)) for k, v in values.items()})
        return st

    def up(self, name: str, env: str, settings: Mapping[str, Any] = (),
           on_output: Callable[[str], None] | None = None):
        st = self.stack(name, env, settings)
        return st.up(on_output=on_output, color="never")

    def preview(self, name: str, env: str, settings: Mapping[str, Any] = (),
                on_output: Callable[[str], None] | None = None) -> Plan:
        """What `pulumi preview` plans, resource by resource (operation and changed keys)."""
        st = self.stack(name, env, settings)
        steps: list[dict] = []

        def on_event(ev) -> None:
            pre = getattr(ev, "resource_pre_event", None)
            if pre is not None and pre.metadata.op.value not in ("same", "read"):
                m = pre.metadata
                steps.append({"op": m.op.value, "type": m.type, "urn": m.urn,
                              "name": m.urn.rsplit("::", 1)[-1],
                              "keys": list(m.diffs or m.keys or [])})

        result = st.preview(on_event=on_event, on_output=on_output, color="never", diff=True)
        return Plan(steps, dict(result.change_summary))

    def destroy(self, name: str, env: str, on_output: Callable[[str], None] | None = None):
        return self.stack(name, env).destroy(on_output=on_output, color="never")


@dataclass
class Plan:
    steps: list[dict]
    summary: dict[str, int]

    def ops(self, kind: str | None = None) -> dict[str, str]:
        """name -> operation, optionally of one Kubernetes kind (`StatefulSet`)."""
        return {s["name"]: s["op"] for s in self.steps
                if kind is None or s["type"].endswith(f":{kind}")}

    @property
    def changes(self) -> int:
        """Resources the update would touch (reads, such as the stack reference, touch none)."""
        return sum(n for op, n in self.summary.items() if op not in ("same", "read"))
