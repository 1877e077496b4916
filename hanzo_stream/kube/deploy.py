"""`pulumi up` of the platform's stacks to the local node, with the real Pulumi engine.

The Pulumi CLI and the Kubernetes provider are the ones build.py compiled; Pulumi's
Python language host cannot be built here, so the program runs through the Automation
API's inline program (the Python SDK serves the language runtime itself): the same
`infra.program.main` that `pulumi up` runs from Pulumi.yaml. State lives in a local
directory backend, secrets are encrypted with a passphrase generated once (0600 file),
dynamic providers (infra/generated.py) are launched by the CLI with this Python.

A local stack is a committed stack's settings (Pulumi.dev.yaml, Pulumi.prod.yaml) plus
what differs on this machine (`LOCAL`): the images built here, no operators that are
not installed, resources that fit two cores, and the node's object store for the jobs'
s3a:// paths (`store_settings`: its endpoint, and its key pair as Pulumi secrets). Nothing
else is bent.

Secret settings (an `auto.ConfigValue(..., secret=True)`) are set with `pulumi config set
--secret` reading the value on its standard input: the Automation API's set_config puts
the value on the CLI's command line, which `ps` shows to every user.
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

from ..artifacts.jvm import jit_flags
from ..core.paths import state_dir
from ..jobs.s3 import S3Access
from .node import Node

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "hanzo-stream"

# Spark on the node's two cores: one executor per job and small JVMs, with CPU requests
# that let a broker and every job's driver and executor be scheduled side by side (they
# share the cores; a request is only what the scheduler counts). Measured: docs/deploy.md.
SPARK_LOCAL: dict[str, Any] = {
    "sparkMaxExecutors": 1, "sparkDriverMemory": "1g", "sparkDriverCpuRequest": "100m",
    "sparkExecutorMemory": "768m", "sparkExecutorCpuRequest": "100m"}
# The jobs' S3 paths, in buckets of the node's object store (made before every up: buckets()).
STORE_LOCAL: dict[str, Any] = {
    "checkpointBase": "s3a://hanzo-stream/checkpoints",
    "auditArchivePath": "s3a://hanzo-audit/audit_log"}

# Per environment: what a local stack sets on top of Pulumi.<env>.yaml.
LOCAL: dict[str, dict[str, Any]] = {
    "dev": {"protect": False, "prometheusOperator": False, "grafanaDashboards": False,
            "alertmanager": False, "schemaRegistry": False,
            "cpuRequest": "100m", "memoryRequest": "768Mi", "cpuLimit": "2000m",
            "memoryLimit": "1536Mi", "heapOpts": "-Xms512m -Xmx512m", "storageSize": "2Gi",
            "brokerAntiAffinity": "preferred",  # grown to three brokers on the one node
            **SPARK_LOCAL, **STORE_LOCAL},
    "prod": {"protect": False, "prometheusOperator": False, "grafanaDashboards": False,
             "brokerAntiAffinity": "preferred",  # three brokers on the one node
             "alertmanager": False, "schemaRegistry": False,
             "cpuRequest": "100m", "memoryRequest": "768Mi", "cpuLimit": "2000m",
             "memoryLimit": "1536Mi", "heapOpts": "-Xms512m -Xmx512m", "storageSize": "2Gi",
             **SPARK_LOCAL, **STORE_LOCAL},
}


def local_jvm() -> dict[str, Any]:
    """The node's JVMs start as the local platform's do (hanzo_stream/artifacts/jvm.py): brokers and
    Spark pods on two shared cores spend most of their CPU compiling themselves."""
    return {"javaOptions": " ".join(jit_flags())}


def store_settings(store: S3Access) -> dict[str, Any]:
    """The node's object store as stack settings: the endpoint plain, the keys secret."""
    from pulumi import automation as auto

    return {"s3Endpoint": store.endpoint,
            "s3AccessKey": auto.ConfigValue(store.access_key or "", secret=True),
            "s3SecretKey": auto.ConfigValue(store.secret_key or "", secret=True)}


def buckets(values: Mapping[str, Any], root: Path = ROOT) -> set[str]:
    """Every bucket a stack with these settings writes to: its s3a:// settings and the
    jobs' s3a:// checkpoints and sinks (infra/spark.py reads them the same way)."""
    from hanzo_stream.jobs.s3 import is_s3, split
    from hanzo_stream.registry import load_registry

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from infra import spark
    from infra.settings import parse

    plain = {k: v for k, v in values.items() if not is_secret(v)}
    s = parse({k: v if isinstance(v, str) else json.dumps(v) for k, v in plain.items()})
    paths = [s.checkpointBase, s.auditArchivePath]
    for job in spark.discover(root, load_registry(root / "topics.yaml")):
        paths += [spark.checkpoint_of(s, job), *job.s3_paths]
    return {split(p)[0] for p in paths if p and is_s3(p)}


def is_secret(v: Any) -> bool:
    return getattr(v, "secret", False) is True


def image_settings(node: Node) -> dict[str, str]:
    """The stack settings that point at this checkout's images (images.py), built and in the
    node's containerd first: with no registry, a checkout changed since `kube up` would
    otherwise name an image no node has (ImagePullBackOff, seen on the real node)."""
    from . import images

    images.import_images(node.ctr()[:3])
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


def provider_config(root: Path = ROOT) -> dict[str, str]:
    """Pulumi.yaml's settings of the providers (`kubernetes:...`), which `pulumi up` in a
    checkout applies to every stack; the inline program here has no Pulumi.yaml, so the
    local stacks get them set."""
    import yaml

    doc = yaml.safe_load((root / "Pulumi.yaml").read_text()) or {}
    return {k: _as_config(v) for k, v in (doc.get("config") or {}).items()
            if not k.startswith(f"{PROJECT}:")}


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
            # No `.attrs` sidecar per state file: fileblob rewrites it in place (truncate, then
            # write), and the program's StackReference to its own stack, read while the engine
            # saved a checkpoint, once failed the first `up` with "failed to load checkpoint:
            # EOF". The state files themselves are replaced atomically (temp file + rename).
            "PULUMI_BACKEND_URL": backend.as_uri() + "?metadata=skip",
            "PULUMI_CONFIG_PASSPHRASE": self._passphrase(),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_PYTHON_CMD": sys.executable,  # runs the dynamic providers
            "PYTHONPATH": pythonpath,
            "KUBECONFIG": str(self.node.kubeconfig),
        }

    def stack(self, name: str, env: str, settings: Mapping[str, Any] = ()):
        """Create or select local stack `name` with env's settings, LOCAL[env], the images
        built here, the node's object store, then `settings`; every key is (re)written, so the
        stack says exactly that. The buckets its s3a:// paths name are made first."""
        from pulumi import automation as auto

        e = self.env()
        os.environ["PATH"] = e["PATH"]  # the Automation API finds `pulumi` on PATH
        # The inline program runs in this process: it reads the cluster (infra/preflight.py)
        # from KUBECONFIG, as the program of a `pulumi up` in a shell would.
        os.environ["KUBECONFIG"] = e["KUBECONFIG"]
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
        values = {**base_config(env, self.root), **LOCAL[env], **local_jvm(),
                  **image_settings(self.node),
                  **store_settings(self.node.object_store()), **dict(settings)}
        self.node.ensure_buckets(buckets(values, self.root))
        st.set_all_config({**{k: auto.ConfigValue(v) for k, v in provider_config(root).items()},
                           **{f"{PROJECT}:{k}": auto.ConfigValue(_as_config(v))
                              for k, v in values.items() if not is_secret(v)}})
        for k, v in values.items():
            if is_secret(v):
                self._set_secret(st.name, work, f"{PROJECT}:{k}", v.value)
        return st

    def _set_secret(self, stack: str, work: Path, key: str, value: str) -> None:
        """`pulumi config set --secret` with the value on standard input, never argv."""
        import subprocess

        out = subprocess.run([self.node.binary("pulumi"), "config", "set", "--secret",
                              "--stack", stack, key], input=value, cwd=work, env=self.env(),
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:  # its output names the key, never the value
            raise RuntimeError(f"pulumi config set --secret {key} failed: {out.stderr[-2000:]}")

    def up(self, name: str, env: str, settings: Mapping[str, Any] = (),
           on_output: Callable[[str], None] | None = None,
           replace: list[str] | None = None) -> tuple[Any, Plan]:
        """`pulumi up`, and what the engine did resource by resource (the same steps a
        preview plans, so no preview is needed to know them); replace: resources (logical
        names) to replace, as `--replace` does."""
        st = self.stack(name, env, settings)
        urns = [self.urn(name, n) for n in replace or ()]
        steps, on_event = _step_recorder()
        result = st.up(on_event=on_event, on_output=on_output, color="never",
                       replace=urns or None)
        return result, Plan(steps, dict(result.summary.resource_changes or {}))

    def urn(self, stack: str, resource: str) -> str:
        """The URN of one of the stack's resources, by logical name (from the state)."""
        from pulumi import automation as auto

        st = auto.select_stack(stack, PROJECT, program=lambda: None,
                               opts=auto.LocalWorkspaceOptions(
                                   work_dir=str(self.home / "work"),
                                   pulumi_home=self.env()["PULUMI_HOME"], env_vars=self.env()))
        found = [r["urn"] for r in st.export_stack().deployment["resources"]
                 if r["urn"].rsplit("::", 1)[-1] == resource]
        if len(found) != 1:
            raise KeyError(f"{stack}: {len(found)} resources named {resource!r}")
        return found[0]

    def preview(self, name: str, env: str, settings: Mapping[str, Any] = (),
                on_output: Callable[[str], None] | None = None,
                replace: list[str] | None = None) -> Plan:
        """What `pulumi preview` plans, resource by resource (operation and changed keys);
        replace: as for up()."""
        st = self.stack(name, env, settings)
        urns = [self.urn(name, n) for n in replace or ()]
        steps, on_event = _step_recorder()
        result = st.preview(on_event=on_event, on_output=on_output, color="never", diff=True,
                            replace=urns or None)
        return Plan(steps, dict(result.change_summary))

    def destroy(self, name: str, env: str, on_output: Callable[[str], None] | None = None):
        return self.stack(name, env).destroy(on_output=on_output, color="never")


REPLACE_STEPS = {"replace", "create-replacement", "delete-replaced"}


def _step_recorder() -> tuple[list[dict], Callable[[Any], None]]:
    """A list the engine's events fill with every resource step that changes something."""
    steps: list[dict] = []

    def on_event(ev) -> None:
        pre = getattr(ev, "resource_pre_event", None)
        if pre is not None and pre.metadata.op.value not in ("same", "read"):
            m = pre.metadata
            steps.append({"op": m.op.value, "type": m.type, "urn": m.urn,
                          "name": m.urn.rsplit("::", 1)[-1],
                          "keys": list(m.diffs or m.keys or [])})
    return steps, on_event


@dataclass
class Plan:
    steps: list[dict]
    summary: dict[str, int]

    def ops(self, kind: str | None = None) -> dict[str, str]:
        """name -> operation, optionally of one Kubernetes kind (`StatefulSet`). A replacement
        is several steps (create-replacement, replace, delete-replaced): it reads `replace`."""
        out: dict[str, str] = {}
        for s in self.steps:
            if kind is None or s["type"].endswith(f":{kind}"):
                op = "replace" if s["op"] in REPLACE_STEPS else s["op"]
                out[s["name"]] = "replace" if out.get(s["name"]) == "replace" else op
        return out

    @property
    def changes(self) -> int:
        """Resources the update would touch (reads, such as the stack reference, touch none)."""
        return sum(n for op, n in self.summary.items() if op not in ("same", "read"))
