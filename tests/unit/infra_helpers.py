"""Helpers for the infra tests: render a stack in a subprocess (once per variant) and
pick resources out of the result. The Pulumi runtime keeps global state, so each
rendering gets its own interpreter (python -m infra.render)."""

from __future__ import annotations

import json
import os
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
           secrets: tuple[tuple[str, str], ...] = (),
           existing: tuple[tuple[str, str], ...] = (), root: Path = ROOT) -> dict:
    """`existing`: (resource name, JSON of its outputs) the state holds from an earlier up;
    `root`: a checkout other than this one (e.g. with an edited topics.yaml)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rendered.json"
        cmd = [sys.executable, "-m", "infra.render", stack, "--out", str(out)]
        cmd += [a for k, v in sets for a in ("--set", f"{k}={v}")]
        cmd += [a for k, v in secrets for a in ("--secret", f"{k}={v}")]
        cmd += [a for k, v in existing for a in ("--existing", f"{k}={v}")]
        cmd += ["--root", str(root)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RenderFailed(proc.stderr[-4000:])
        return json.loads(out.read_text())


def registered(rendered: dict) -> list[dict]:
    """The Kubernetes resources the program registers (not the objects it only reads)."""
    return [r for r in rendered["resources"] if r["type"].startswith(K8S) and not r.get("read")]


def manifests(rendered: dict) -> list[dict]:
    """The Kubernetes objects exactly as they would be sent to the API server."""
    return [r["inputs"] for r in registered(rendered)]


def resource(rendered: dict, kind: str, name: str) -> dict:
    for r in registered(rendered):
        i = r["inputs"]
        if i.get("kind") == kind and i["metadata"]["name"] == name and "Patch" not in r["type"]:
            return r
    raise KeyError(f"{kind}/{name} not rendered")


def reads(rendered: dict) -> list[tuple[str, str]]:
    """What the program read, as (type, id)."""
    return [(r["type"], r["id"]) for r in rendered["resources"] if r.get("read")]


def obj(rendered: dict, kind: str, name: str) -> dict:
    return resource(rendered, kind, name)["inputs"]


def of_kind(rendered: dict, kind: str) -> list[dict]:
    return [m for m in manifests(rendered) if m.get("kind") == kind]


def by_type(rendered: dict, typ: str) -> list[dict]:
    return [r for r in rendered["resources"] if r["type"] == typ]


def broker_statefulset(rendered: dict) -> dict:
    """The one StatefulSet of the brokers, whatever the stack names it (statefulSetName)."""
    (sts,) = [m for m in of_kind(rendered, "StatefulSet")
              if m["metadata"]["labels"].get("app.kubernetes.io/component") == "broker"]
    return sts


def kafka_container(rendered: dict) -> dict:
    return broker_statefulset(rendered)["spec"]["template"]["spec"]["containers"][0]


def join_container(rendered: dict) -> dict | None:
    containers = broker_statefulset(rendered)["spec"]["template"]["spec"]["containers"]
    return next((c for c in containers if c["name"] == "join-quorum"), None)


def env_map(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


def secret_data(rendered: dict, name: str) -> dict[str, str]:
    return obj(rendered, "Secret", name)["stringData"]


def stack_brokers(stack: str) -> int:
    import yaml

    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    return int(doc["config"]["hanzo-stream:brokers"])


# The broker container's entrypoint, run with sh and a stand-in Kafka that records what it got.
FAKE_KAFKA = {
    "kafka-storage.sh": 'echo "$@" > "$OUT/storage-args"; env > "$OUT/storage-env"\n',
    "kafka-server-start.sh": 'cp "$1" "$OUT/server.properties"; env > "$OUT/env"\n',
}


def parse_properties(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip():
            k, v = line.split("=", 1)
            out[k] = v
    return out


def _flavor(rendered: dict):
    from infra import broker

    env = {e["name"] for e in kafka_container(rendered)["env"]}
    return broker.FLAVORS["bitnami" if "KAFKA_KRAFT_CLUSTER_ID" in env else "apache"]


def run_pod(rendered: dict, ordinal: int, tmp: Path,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the container command as pod `ordinal` would, paths moved under `tmp`, with the
    container's environment plus `extra_env`."""
    c = kafka_container(rendered)
    from infra import broker

    flavor = _flavor(rendered)
    p = broker.Paths()
    moved = {p.tls_dir: tmp / "tls", p.run_dir: tmp / "run", p.data_dir: tmp / "data",
             flavor.kafka_home: tmp / "kafka"}
    script = c["command"][2]
    for old, new in moved.items():
        new.mkdir(parents=True, exist_ok=True)
        script = script.replace(old, str(new))
    (tmp / "kafka" / "bin").mkdir(exist_ok=True)
    for name, body in FAKE_KAFKA.items():
        f = tmp / "kafka" / "bin" / name
        f.write_text("#!/bin/sh\n" + body)
        f.chmod(0o755)
    tls = secret_data(rendered, "kafka-tls")
    for k, v in tls.items():
        (tmp / "tls" / k).write_text(v)
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    env[flavor.cluster_id_var] = secret_data(rendered, "kafka-cluster-id")["cluster-id"]
    env["HANZO_KAFKA_JAAS"] = secret_data(rendered, "kafka-broker-jaas")["jaas.properties"]
    env |= {"HOSTNAME": f"kafka-{ordinal}", "OUT": str(tmp),
            "PATH": os.pathsep.join(["/usr/bin", "/bin"]), **(extra_env or {})}
    assert c["command"][:2] == ["/bin/sh", "-c"]
    return subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=60)


def run_join(rendered: dict, ordinal: int, tmp: Path, tools: dict[str, str],
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the join-quorum sidecar's command as pod `ordinal` would: the pod's directories
    under `tmp` (run_pod's layout, so run_pod's server.properties is the one it reads),
    `tools` written to the image's Kafka bin directory, and `tmp/bin` (put fakes of
    commands such as `sleep` there) first on PATH."""
    from infra import broker

    c = join_container(rendered)
    assert c is not None and c["command"][:2] == ["/bin/sh", "-c"]
    flavor, p = _flavor(rendered), broker.Paths()
    script = c["command"][2].replace(f"work={p.join_dir}\n", f"work={tmp / 'join'}\n")
    moved = {p.run_dir: tmp / "run", p.data_dir: tmp / "data", flavor.kafka_home: tmp / "kafka"}
    for old, new in moved.items():
        script = script.replace(old, str(new))
    for d in ("join", "kafka/bin", "bin", "run", "data"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    for name, body in tools.items():
        f = tmp / "kafka" / "bin" / name
        f.write_text("#!/bin/sh\n" + body)
        f.chmod(0o755)
    values = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    values[broker.ADMIN_JAAS_ENV] = secret_data(rendered, "kafka-admin")["sasl.jaas.config"]
    values |= {"HOSTNAME": f"kafka-{ordinal}", "OUT": str(tmp),
               "PATH": os.pathsep.join([str(tmp / "bin"), "/usr/bin", "/bin"]), **(env or {})}
    return subprocess.run(["/bin/sh", "-c", script], env=values, capture_output=True, text=True,
                          timeout=60)
