"""Helpers for the infra tests: render a stack in a subprocess (once per variant) and
pick resources out of the result. The Pulumi runtime keeps global state, so each
rendering gets its own interpreter (python -m infra.render)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
K8S = "kubernetes:"


class RenderFailed(RuntimeError):
    pass


@cache
def render(stack: str, sets: tuple[tuple[str, str], ...] = (),
           secrets: tuple[tuple[str, str], ...] = ()) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rendered.json"
        cmd = [sys.executable, "-m", "infra.render", stack, "--out", str(out)]
        cmd += [a for k, v in sets for a in ("--set", f"{k}={v}")]
        cmd += [a for k, v in secrets for a in ("--secret", f"{k}={v}")]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RenderFailed(proc.stderr[-4000:])
        return json.loads(out.read_text())


def manifests(rendered: dict) -> list[dict]:
    """The Kubernetes objects exactly as they would be sent to the API server."""
    return [r["inputs"] for r in rendered["resources"] if r["type"].startswith(K8S)]


def resource(rendered: dict, kind: str, name: str) -> dict:
    for r in rendered["resources"]:
        i = r["inputs"]
        if r["type"].startswith(K8S) and i.get("kind") == kind and i["metadata"]["name"] == name:
            return r
    raise KeyError(f"{kind}/{name} not rendered")


def obj(rendered: dict, kind: str, name: str) -> dict:
    return resource(rendered, kind, name)["inputs"]


def of_kind(rendered: dict, kind: str) -> list[dict]:
    return [m for m in manifests(rendered) if m.get("kind") == kind]


def by_type(rendered: dict, typ: str) -> list[dict]:
    return [r for r in rendered["resources"] if r["type"] == typ]


def kafka_container(rendered: dict) -> dict:
    return obj(rendered, "StatefulSet", "kafka")["spec"]["template"]["spec"]["containers"][0]


def env_map(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


def secret_data(rendered: dict, name: str) -> dict[str, str]:
    return obj(rendered, "Secret", name)["stringData"]


def stack_brokers(stack: str) -> int:
    import yaml

    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    return int(doc["config"]["hanzo-stream:brokers"])
