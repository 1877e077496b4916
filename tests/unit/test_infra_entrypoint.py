"""Run the broker container's rendered entrypoint with sh and a stand-in Kafka: the
server.properties it writes must be exactly broker_config() of that pod plus the JAAS
half, for each pod of each stack and both image conventions."""

from __future__ import annotations

import base64

import pytest

from hanzo_stream.core.broker_config import broker_config, jaas_config
from infra import broker
from infra.render import stack_config
from infra.settings import parse
from infra.topology import Topology

from .infra_helpers import env_map, kafka_container, parse_properties, render, run_pod, secret_data

BITNAMI = (("imageFlavor", "bitnami"), ("image", "registry.example.com/bitnami/kafka:4.4.0"))
CASES = [("dev", ()), ("prod", ()), ("prod", BITNAMI)]


@pytest.mark.parametrize(("stack", "sets"), CASES, ids=["dev", "prod", "prod-bitnami"])
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
        assert args[:6] == ["format", "--ignore-formatted", "--cluster-id", cid, "--config",
                            str(d / "run" / "server.properties")]
        # The pod's place in the dynamic quorum: the one voter of dev, or the same three
        # initial controllers on each prod pod, directory ids included.
        if top.brokers == 1:
            assert args[6:] == ["--standalone"]
        else:
            voters = ",".join(f"{n}@{top.pod_host(n)}:9095:{broker.directory_id(top, n)}"
                              for n in range(top.brokers))
            assert args[6:] == ["--initial-controllers", voters]
        # The JAAS text does not outlive the script: the broker's environment lacks it.
        assert "HANZO_KAFKA_JAAS" not in (d / "env").read_text()
        mode = (d / "run" / "server.properties").stat().st_mode & 0o777
        assert mode == 0o600


def env_file(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.mark.parametrize(("stack", "sets"), CASES, ids=["dev", "prod", "prod-bitnami"])
def test_the_jmx_agent_reaches_the_broker_jvm_only(stack, sets, tmp_path):
    """In the container's KAFKA_OPTS the agent would start in every Kafka tool run there
    (`kubectl exec kafka-0 -- kafka-topics.sh ...`) and die binding the broker's port 9404."""
    rendered = render(stack, sets)
    env = env_map(kafka_container(rendered))
    agent = env[broker.JMX_AGENT_ENV]["value"]
    assert agent.startswith("-javaagent:") and "=9404:" in agent
    assert "KAFKA_OPTS" not in env  # what a kubectl exec inherits: no agent
    proc = run_pod(rendered, 0, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert env_file(tmp_path / "env")["KAFKA_OPTS"] == agent  # kafka-server-start.sh
    assert "KAFKA_OPTS" not in env_file(tmp_path / "storage-env")  # kafka-storage.sh: no agent
    # An operator's own KAFKA_OPTS (e.g. added to the pod) still reaches the broker, after it.
    proc = run_pod(rendered, 0, tmp_path, {"KAFKA_OPTS": "-Dhanzo.test=1"})
    assert proc.returncode == 0, proc.stderr
    assert env_file(tmp_path / "env")["KAFKA_OPTS"] == f"{agent} -Dhanzo.test=1"
    assert env_file(tmp_path / "storage-env")["KAFKA_OPTS"] == "-Dhanzo.test=1"


@pytest.mark.parametrize(("stack", "sets"), [("dev", (("brokers", "3"),)), ("prod", ())],
                         ids=["grown-dev", "prod"])
def test_a_blank_volume_of_a_formed_quorum_never_founds_one(stack, sets, tmp_path):
    """After the stack's first `pulumi up` (kafka-quorum says formed) a blank volume is a
    lost one: kafka-0 of a grown dev stack must not format --standalone (a rival quorum of
    one), nor a prod founder take its old seat with an empty log; both join as observers
    with a new directory id (the join sidecar then replaces the old seat)."""
    rendered = render(stack, sets, (), (("kafka-initial-controllers", '{"result": 1}'),)
                      if stack == "dev" else ())
    formed = {e["name"]: e for e in kafka_container(rendered)["env"]}[broker.FORMED_ENV]
    assert formed["valueFrom"]["configMapKeyRef"] == {
        "name": broker.QUORUM_CONFIG_MAP, "key": broker.FORMED_KEY, "optional": True}
    for value, founding in (("true", False), ("false", True), ("", True)):
        d = tmp_path / f"formed-{value or 'unset'}"
        assert run_pod(rendered, 0, d, {broker.FORMED_ENV: value}).returncode == 0
        args = (d / "storage-args").read_text().split()[6:]
        assert (args != ["--no-initial-controllers"]) is founding, (value, args)


def test_a_single_broker_with_a_blank_volume_founds_a_new_quorum(tmp_path):
    """One broker: the lost volume held the whole quorum, there is nothing to join (an
    observer would wait for a leader forever), so it formats --standalone again: an empty
    cluster under the same id, as the disaster-recovery runbook says."""
    assert run_pod(render("dev"), 0, tmp_path, {broker.FORMED_ENV: "true"}).returncode == 0
    assert (tmp_path / "storage-args").read_text().split()[6:] == ["--standalone"]


def test_directory_ids_are_distinct_kafka_uuids():
    top = Topology("hanzo", "cluster.local", 3)
    ids = broker.initial_voters(top)
    assert len(set(ids.values())) == 3
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids.values())
    assert broker.initial_voters(top) == ids  # the same on every rendering


def test_each_broker_takes_its_nodes_zone_as_its_rack(tmp_path):
    """The pod's copy of its node's zone label (downward API) becomes broker.rack; a pod
    without the label (the downward API then gives "") starts rackless and says why."""
    rendered = render("prod")
    env = env_map(kafka_container(rendered))
    assert env[broker.RACK_ENV]["valueFrom"] == {"fieldRef": {
        "fieldPath": "metadata.labels['topology.kubernetes.io/zone']"}}
    proc = run_pod(rendered, 1, tmp_path / "zoned", {broker.RACK_ENV: "eu-west-1b"})
    assert proc.returncode == 0, proc.stderr
    props = parse_properties((tmp_path / "zoned" / "server.properties").read_text())
    assert props["broker.rack"] == "eu-west-1b"
    proc = run_pod(rendered, 1, tmp_path / "bare", {broker.RACK_ENV: ""})
    assert proc.returncode == 0, proc.stderr
    assert "broker.rack" not in parse_properties((tmp_path / "bare" / "server.properties").read_text())
    assert "no topology.kubernetes.io/zone label" in proc.stderr
    # rackLabel "": no variable, and a value put in the pod by hand is not read either.
    rendered = render("prod", (("rackLabel", ""),))
    assert broker.RACK_ENV not in env_map(kafka_container(rendered))
    proc = run_pod(rendered, 1, tmp_path / "off", {broker.RACK_ENV: "eu-west-1b"})
    assert proc.returncode == 0, proc.stderr
    assert "broker.rack" not in parse_properties((tmp_path / "off" / "server.properties").read_text())


def test_pod_outside_the_stack_refuses_to_start(tmp_path):
    proc = run_pod(render("dev"), 1, tmp_path)
    assert proc.returncode == 64
    assert "not one of the 1 brokers" in proc.stderr


# A stand-in broker: says it is up, records SIGTERM, then exits with 7 or, like a broker whose
# controlled shutdown waits for a quorum that is gone, keeps running.
STAND_IN = """
import pathlib, signal, sys, time
d = pathlib.Path(sys.argv[1])
def term(*_):
    (d / "term").write_text("")
    if sys.argv[2] == "exits":
        sys.exit(7)
signal.signal(signal.SIGTERM, term)
(d / "up").write_text("")
for _ in range(600):
    time.sleep(0.1)
"""


def _supervise(tmp_path, behaviour: str, deleting: bool):
    import subprocess
    import sys
    import time

    marker = tmp_path / "everyone-goes"
    if deleting:
        marker.write_text("the StatefulSet is being deleted\n")
    (tmp_path / "broker.py").write_text(STAND_IN)
    command = f"{sys.executable} {tmp_path}/broker.py {tmp_path} {behaviour}"
    script = "\n".join(["set -eu", *broker.supervised(command, str(marker), after=1)])
    shell = subprocess.Popen(["sh", "-c", script], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not (tmp_path / "up").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    shell.terminate()  # what the kubelet sends the container's PID 1
    t0 = time.monotonic()
    try:
        rc = shell.wait(timeout=4)
    except subprocess.TimeoutExpired:
        rc = None
    took = time.monotonic() - t0
    if rc is None:  # cleanup: the stand-in ends by itself within a minute; the shell with it
        subprocess.run(["pkill", "-KILL", "-f", f"{tmp_path}/broker.py"], check=False)
        shell.wait(timeout=10)
    return rc, took, (tmp_path / "term").exists(), shell.stderr.read()


def test_the_broker_shell_passes_sigterm_on_and_returns_the_brokers_status(tmp_path):
    rc, took, termed, _ = _supervise(tmp_path, "exits", deleting=False)
    assert termed and rc == 7 and took < 2


def test_a_broker_stopping_in_a_roll_gets_the_whole_grace_period(tmp_path):
    rc, _, termed, err = _supervise(tmp_path, "hangs", deleting=False)
    assert termed and rc is None, err  # still running 4 s after SIGTERM: only the kubelet ends it


def test_a_broker_of_a_deleted_statefulset_is_killed_when_its_shutdown_outlives_the_quorum(tmp_path):
    rc, took, termed, err = _supervise(tmp_path, "hangs", deleting=True)
    assert termed and rc == 128 + 9 and 0.9 < took < 3.5, (rc, took, err)
    assert "the StatefulSet is being deleted" in err and "killing it" in err
