"""The local Kubernetes' images, built (cached) and run for real by the session node's
containerd, which imported them when it started (node.py): the images every pod of the
stacks runs are the ones checked here, and they are imported once per session.

Containers run beside the node's pods but outside the CRI (kubelet neither sees nor collects
them), in the node's network namespace (`--net-host`), with `--cgroup ""` (runc's cgroup beside
the shim's, removed with the container); each is deleted when its test ends.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hanzo_stream.artifacts import jars, versions
from hanzo_stream.jobs import spark as spark_jobs
from hanzo_stream.kube import images
from infra import settings as infra_settings
from infra import spark as infra_spark

pytestmark = pytest.mark.integration

TOOLS = ("mmdebstrap", "umoci", "containerd", "containerd-shim-runc-v2", "runc", "ctr", "unshare", "gcc")
_ids = itertools.count()

if os.geteuid() != 0 or any(shutil.which(t) is None for t in TOOLS):
    pytest.skip(f"needs root and {', '.join(TOOLS)}", allow_module_level=True)


@pytest.fixture(scope="module")
def built() -> dict[str, images.Built]:
    """The images of this checkout. refs() (what a deployment names) is read right after the
    build: other work in the tree may change the sources later in the session."""
    out = images.build()
    refs = images.refs()
    assert set(refs) == {*images.NAMES, *images.ON_DEMAND}
    assert {name: refs[name] for name in images.NAMES} == {name: b.ref for name, b in out.items()}
    return out


FIFO_DIR = Path(tempfile.gettempdir()) / f"hanzo-test-ctr-fifo-{os.getpid()}"  # ctr's stdio FIFOs


@pytest.fixture(scope="module")
def ctr(kube_node) -> Iterator[list[str]]:
    """ctr for the node's containerd."""
    FIFO_DIR.mkdir(exist_ok=True)
    yield kube_node.ctr()[:3]
    shutil.rmtree(FIFO_DIR, ignore_errors=True)


@pytest.fixture(scope="module")
def imported(ctr: list[str], built: dict[str, images.Built]) -> dict[str, images.Built]:
    """What the node imported at its start: every image of this checkout, at its digest."""
    assert {b.ref: images.present_digest(ctr, b.ref) for b in built.values()} == {
        b.ref: b.digest for b in built.values()}
    return built


def run(ctr: list[str], ref: str, *args: str, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess:
    """`ctr run --rm` of the image with these args (after its entrypoint, as Kubernetes'
    `args:` would be)."""
    cid = f"hanzo-test-{next(_ids)}"
    flags = [f"--env={k}={val}" for k, val in (env or {}).items()]
    return subprocess.run(
        [*ctr, "-n", "k8s.io", "run", "--rm", "--net-host", "--cgroup", "", "--fifo-dir",
         str(FIFO_DIR), *flags, ref, cid, *args],
        capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture
def detached(ctr: list[str]) -> Iterator:
    """Start containers in the background; they are killed and removed afterwards."""
    started: list[str] = []

    def start(ref: str, *args: str) -> str:
        cid = f"hanzo-test-{next(_ids)}"
        ok(subprocess.run([*ctr, "-n", "k8s.io", "run", "-d", "--net-host", "--cgroup", "",
                           "--fifo-dir", str(FIFO_DIR), ref, cid, *args],
                          capture_output=True, text=True, timeout=60))
        started.append(cid)
        return cid
    yield start
    for cid in started:  # a test may have ended its task already
        subprocess.run([*ctr, "-n", "k8s.io", "tasks", "delete", "--force", cid], capture_output=True)
        subprocess.run([*ctr, "-n", "k8s.io", "containers", "delete", cid], capture_output=True)


def test_import_is_idempotent(ctr, imported):
    assert images.import_images(ctr) == []
    for b in imported.values():
        assert images.present_digest(ctr, b.ref) == b.digest


def test_refs_are_the_pinned_ones(imported):
    assert imported["pause"].ref == versions.KUBE_PAUSE_IMAGE
    assert imported["kafka"].ref == versions.KUBE_KAFKA_IMAGE


def test_kafka_tools_run(ctr, imported):
    ref = imported["kafka"].ref
    assert versions.KAFKA_VERSION in ok(run(ctr, ref, "/opt/kafka/bin/kafka-topics.sh", "--version"))
    uuid = ok(run(ctr, ref, "/opt/kafka/bin/kafka-storage.sh", "random-uuid")).strip()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", uuid), uuid
    # What the broker pod's entrypoint and join sidecar run with, as whom and where.
    out = ok(run(ctr, ref, "/bin/sh", "-c",
                 "id -u; id -g; pwd; for t in sh sed awk cat tr printf sleep; do command -v $t; done"))
    lines = out.split()
    assert lines[:3] == ["1000", "1000", "/opt/kafka"]
    assert len(lines) == 10, out


def test_kafka_broker_serves(ctr, imported):
    """A broker from the image as the pod starts one: kafka-storage.sh format, then
    kafka-server-start.sh logging to stdout and to LOG_DIR; the tools talk to it."""
    client, controller = free_ports(2)
    props = "\\n".join([
        "process.roles=broker,controller", "node.id=1", "controller.listener.names=CONTROLLER",
        f"listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{client}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"controller.quorum.bootstrap.servers=127.0.0.1:{controller}", "log.dirs=/tmp/data",
        "offsets.topic.replication.factor=1"])
    bootstrap = f"--bootstrap-server 127.0.0.1:{client}"
    script = f"""set -e
printf '{props}\\n' > /tmp/server.properties
bin/kafka-storage.sh format --cluster-id AAAAAAAAAAAAAAAAAAAAAA --config /tmp/server.properties --standalone
LOG_DIR=/tmp/logs KAFKA_HEAP_OPTS=-Xmx384m bin/kafka-server-start.sh /tmp/server.properties > /tmp/out 2>&1 &
broker=$!
for i in $(seq 90); do bin/kafka-topics.sh {bootstrap} --create --topic t1 2>/dev/null && break; sleep 1; done
bin/kafka-topics.sh {bootstrap} --list
bin/kafka-metadata-quorum.sh {bootstrap} describe --status | grep LeaderId
kill $broker; wait $broker || true
grep -l 'Kafka Server started' /tmp/out /tmp/logs/server.log
"""
    out = ok(run(ctr, imported["kafka"].ref, "/bin/sh", "-c", script))
    assert "t1" in out.split() and "LeaderId" in out, out
    assert "/tmp/out" in out.split() and "/tmp/logs/server.log" in out.split(), out


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_hanzo_stream_runs_our_code(ctr, imported):
    ref = imported["hanzo-stream"].ref
    assert "plan" in ok(run(ctr, ref, "hanzo-stream", "--help"))
    out = ok(run(ctr, ref, "python3", "-c",
                 "import pyspark, chdb, hanzo_stream; print(pyspark.__version__)"))
    assert out.strip() == versions.SPARK_VERSION
    ok(run(ctr, ref, "python", "-c", "import hanzo_stream.monitoring.lag_exporter"))
    java = run(ctr, ref, "java", "-version")
    assert f'version "{versions.KUBE_IMAGE_JAVA}.' in ok(java) + java.stderr
    out = ok(run(ctr, ref, "/bin/sh", "-c",
                 'id -u; echo "$HOME"; pwd; ls topics.yaml spark consumers schemas'))
    assert out.split()[:3] == ["10001", "/home/hanzo", "/opt/hanzo-stream"]


def test_hanzo_stream_jars_are_the_fetched_ones(ctr, imported):
    host = {p.name: p for p in [*spark_jobs.connector_jars(), *spark_jobs.s3a_jars()]}
    want = {f"/opt/hanzo-stream/jars/{n}": images.file_sha256(host[n])
            for n in infra_spark.connector_jars()}
    want[images.jmx_agent_path()] = images.file_sha256(jars.jmx_exporter_agent())
    assert want[images.jmx_agent_path()] == infra_settings.JMX_AGENT_SHA256  # what the init container checks
    out = ok(run(ctr, imported["hanzo-stream"].ref, "sha256sum", *want))
    assert {path: sha for sha, path in (line.split() for line in out.splitlines())} == want


def image_config(archive: Path) -> dict:
    """The OCI config of the one image in one of our archives."""
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> dict:
            return json.load(tar.extractfile(f"blobs/sha256/{digest.split(':')[1]}"))
        index = json.load(tar.extractfile("index.json"))
        return blob(blob(index["manifests"][0]["digest"])["config"]["digest"])["config"]


def test_spark_entrypoint_starts_spark(ctr, imported):
    """Spark's executor pods carry only args (`executor`): Kubernetes appends them to the
    image's entrypoint. ctr replaces the entrypoint with its arguments, so it is named here."""
    ref, entrypoint = imported["hanzo-stream"].ref, "/opt/hanzo-stream/bin/spark-entrypoint"
    config = image_config(imported["hanzo-stream"].archive)
    assert config["Entrypoint"] == [entrypoint]
    assert config["User"] == "10001:10001" and config["WorkingDir"] == "/opt/hanzo-stream"
    executor = run(ctr, ref, entrypoint, "executor", env={
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:9",
        "SPARK_EXECUTOR_ID": "1", "SPARK_EXECUTOR_CORES": "1", "SPARK_EXECUTOR_MEMORY": "512m",
        "SPARK_APPLICATION_ID": "spark-test", "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "test-exec-1",
        "SPARK_JAVA_OPT_0": "-Dspark.hanzo.test=a b"})
    out = executor.stdout + executor.stderr
    assert executor.returncode != 0, out
    assert "KubernetesExecutorBackend: Started daemon" in out, out[-3000:]
    assert "Failed to connect to /127.0.0.1:9" in out, out[-3000:]
    driver = run(ctr, ref, entrypoint, "driver", "--version")
    assert driver.returncode == 0 and f"version {versions.SPARK_VERSION}" in driver.stdout + driver.stderr


def test_hanzo_stream_is_readable_by_any_uid(ctr, imported, detached):
    cid = detached(imported["hanzo-stream"].ref, "sleep", "300")
    # uid:gid both numeric: for a bare uid, ctr mounts the running container's snapshot a
    # second time to look up its group, and that mount resets the overlay's workdir under
    # the container (its later copy-ups fail with ENOENT).
    proc = subprocess.run(
        [*ctr, "-n", "k8s.io", "tasks", "exec", "--exec-id", "other-uid", "--user", "4242:4242",
         "--fifo-dir", str(FIFO_DIR), cid, "/bin/sh", "-c",
         "id -u && python3 -c 'import pyspark, chdb, hanzo_stream' && cat topics.yaml "
         "/opt/hanzo-stream/jars/* /opt/hanzo-stream/jmx/* > /dev/null && hanzo-stream --help"],
        capture_output=True, text=True, timeout=120)
    assert ok(proc).split()[0] == "4242"


def test_pause_exits_on_sigterm(ctr, imported, detached):
    cid = detached(imported["pause"].ref)
    ps = ok(subprocess.run([*ctr, "-n", "k8s.io", "tasks", "ls"], capture_output=True, text=True))
    assert any(line.split()[:1] == [cid] and "RUNNING" in line for line in ps.splitlines()), ps
    ok(subprocess.run([*ctr, "-n", "k8s.io", "tasks", "kill", "-s", "SIGTERM", cid],
                      capture_output=True, text=True))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = next(ln for ln in subprocess.run([*ctr, "-n", "k8s.io", "tasks", "ls"], capture_output=True,
                                                text=True).stdout.splitlines() if ln.startswith(cid))
        if "STOPPED" in line:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"pause still running 20 s after SIGTERM: {line}")
    status = subprocess.run([*ctr, "-n", "k8s.io", "tasks", "delete", cid], capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    assert "non-zero exit code" not in status.stdout + status.stderr  # ctr's words for exit != 0
