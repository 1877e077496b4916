"""Run the broker container's rendered entrypoint with sh and a stand-in Kafka: the
server.properties it writes must be exactly broker_config() of that pod plus the JAAS
half, for each pod of each stack and both image conventions."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hanzo_stream.broker_config import broker_config, jaas_config
from infra import broker
from infra.render import stack_config
from infra.settings import parse
from infra.topology import Topology

from .infra_helpers import kafka_container, render, secret_data

FAKE_KAFKA = {
    "kafka-storage.sh": 'echo "$@" > "$OUT/storage-args"\n',
    "kafka-server-start.sh": 'cp "$1" "$OUT/server.properties"; env > "$OUT/env"\n',
}


def parse_properties(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip():
            k, v = line.split("=", 1)
            out[k] = v
    return out


def run_pod(rendered: dict, ordinal: int, tmp: Path, formatted: bool = True,
            path_dirs: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    """Run the container command as pod `ordinal` would, paths moved under `tmp`."""
    c = kafka_container(rendered)
    flavor = broker.FLAVORS["bitnami" if "KAFKA_KRAFT_CLUSTER_ID" in {e["name"] for e in c["env"]}
                            else "apache"]
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
    if formatted:
        (tmp / "data" / "data").mkdir(exist_ok=True)
        (tmp / "data" / "data" / "meta.properties").write_text("cluster.id=x\n")
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    env[flavor.cluster_id_var] = secret_data(rendered, "kafka-cluster-id")["cluster-id"]
    env["HANZO_KAFKA_JAAS"] = secret_data(rendered, "kafka-broker-jaas")["jaas.properties"]
    env |= {"HOSTNAME": f"kafka-{ordinal}", "OUT": str(tmp),
            "PATH": os.pathsep.join([*map(str, path_dirs), "/usr/bin", "/bin"])}
    assert c["command"][:2] == ["/bin/sh", "-c"]
    return subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=60)


CASES = [("dev", ()), ("prod", ()), ("prod", (("imageFlavor", "apache"),))]


@pytest.mark.parametrize(("stack", "sets"), CASES, ids=["dev", "prod", "prod-apache"])
def test_each_pod_runs_exactly_broker_config(stack, sets, tmp_path):
    rendered = render(stack, sets)
    s = parse({**stack_config(stack)[0], **dict(sets)})
    top = Topology.of(s)
    outs = rendered["outputs"]
    secret_half = jaas_config(outs["adminPassword"]["value"], outs["principalPasswords"]["value"])
    for i in range(top.brokers):
        d = tmp_path / f"pod{i}"
        proc = run_pod(rendered, i, d)
        assert proc.returncode == 0, proc.stderr
        got = parse_properties((d / "server.properties").read_text())
        want = broker_config(broker.broker_settings(top, i, s.brokerConfigOverrides))
        assert got == {**want, **secret_half}
        assert (d / "run" / "keystore.pem").read_text() == (
            (d / "tls" / "tls.key").read_text() + (d / "tls" / "tls.crt").read_text())
        args = (d / "storage-args").read_text().split()
        cid = secret_data(rendered, "kafka-cluster-id")["cluster-id"]
        assert args[:4] == ["format", "--ignore-formatted", "--cluster-id", cid]
        # The JAAS text does not outlive the script: the broker's environment lacks it.
        assert "HANZO_KAFKA_JAAS" not in (d / "env").read_text()
        mode = (d / "run" / "server.properties").stat().st_mode & 0o777
        assert mode == 0o600


def test_pod_outside_the_stack_refuses_to_start(tmp_path):
    proc = run_pod(render("dev"), 1, tmp_path)
    assert proc.returncode == 64
    assert "not one of the 1 brokers" in proc.stderr


def test_new_broker_waits_for_kafka_0_before_formatting(tmp_path):
    fake = tmp_path / "fakebin"
    fake.mkdir()
    probe = fake / "timeout"  # the script probes with `timeout 2 bash -c ...</dev/tcp/HOST/PORT`
    probe.write_text('#!/bin/sh\necho "$@" >> "$OUT/nc-calls"\n'
                     '[ "$(wc -l < "$OUT/nc-calls")" -ge 2 ]\n')  # reachable on the 2nd try
    probe.chmod(0o755)
    pod = tmp_path / "pod"
    proc = run_pod(render("prod"), 2, pod, formatted=False, path_dirs=(fake,))
    assert proc.returncode == 0, proc.stderr
    calls = (pod / "nc-calls").read_text().splitlines()
    assert len(calls) == 2
    assert calls[0].endswith("/dev/tcp/kafka-0.kafka-headless.hanzo.svc.cluster.local/9095")
    assert (pod / "storage-args").exists()


def test_kafka_0_and_formatted_brokers_do_not_wait(tmp_path):
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "timeout").write_text('#!/bin/sh\necho called >> "$OUT/nc-calls"; exit 1\n')
    (fake / "timeout").chmod(0o755)
    for ordinal, formatted in ((0, False), (1, True)):
        pod = tmp_path / f"pod{ordinal}"
        proc = run_pod(render("prod"), ordinal, pod, formatted=formatted, path_dirs=(fake,))
        assert proc.returncode == 0, proc.stderr
        assert not (pod / "nc-calls").exists()
