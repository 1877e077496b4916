"""The apache/kafka image's own config contract, run from the very Kafka release it ships.

The official image turns every `KAFKA_*` variable into a server.properties line with
`kafka.docker.KafkaDockerWrapper setup` (its /etc/kafka/docker/launch calls it), a class of
the Kafka jars. This test runs that class from the pinned 4.4.0 jars on the environment
each rendered pod really has when its broker starts (our entrypoint run with sh, as
test_infra_entrypoint does), and checks:

- what the image would write is exactly broker_config() of that pod, and exactly what our
  entrypoint wrote (the JAAS half is not in the environment: it travels in a Secret-backed
  variable that is not `KAFKA_*` and is unset before Kafka starts);
- the image's own launch cannot format our dynamic quorum (it only knows static voters),
  which is why the container runs the rendered entrypoint instead (docs/images.md). If a
  later image learns KIP-853 formatting, this test says so.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hanzo_stream.artifacts.jars import kafka_classpath
from hanzo_stream.artifacts.jvm import java, jit_flags
from hanzo_stream.core.broker_config import broker_config
from infra import broker
from infra.render import stack_config
from infra.settings import parse
from infra.topology import Topology

from .infra_helpers import parse_properties, render, run_pod


def image_setup(env: dict[str, str], tmp: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """KafkaDockerWrapper setup as the image's launch runs it, with empty default and
    mounted config directories; returns the process and the server.properties it wrote."""
    dirs = {name: tmp / name for name in ("default", "mounted", "final")}
    for d in dirs.values():
        d.mkdir(parents=True)
    proc = subprocess.run(
        [java(), *jit_flags(), "-Xmx128m", "-cp", kafka_classpath(), "kafka.docker.KafkaDockerWrapper",
         "setup",
         "--default-configs-dir", str(dirs["default"]), "--mounted-configs-dir",
         str(dirs["mounted"]), "--final-configs-dir", str(dirs["final"])],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        capture_output=True, text=True, timeout=120)
    props = dirs["final"] / "server.properties"
    # The wrapper writes the last property without a newline; stdout may follow it.
    return proc, parse_properties(props.read_text() + "\n") if props.exists() else {}


def broker_env(pod_dir: Path) -> dict[str, str]:
    """The environment kafka-server-start.sh ran with (dumped by the stand-in Kafka)."""
    out = {}
    for line in (pod_dir / "env").read_text().splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    return out


@pytest.mark.integration  # runs the image's Java wrapper (Kafka's jars)
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_image_reads_exactly_broker_config_from_the_rendered_env(stack, tmp_path):
    rendered = render(stack)  # apache/kafka is the default flavour
    s = parse(stack_config(stack)[0])
    top = Topology.of(s)
    for i in range(top.brokers):
        pod = tmp_path / f"pod{i}"
        assert run_pod(rendered, i, pod).returncode == 0
        env = broker_env(pod)
        assert "HANZO_KAFKA_JAAS" not in env
        # The data directory of this machine, not /var/lib/kafka: the wrapper formats it.
        want = broker_config(broker.broker_settings(top, i, s.brokerConfigOverrides))
        log_dirs = pod / "image-data"
        env["KAFKA_LOG_DIRS"] = str(log_dirs)
        proc, got = image_setup(env, pod / "image")
        assert got == {**want, "log.dirs": str(log_dirs)}, proc.stderr[-2000:]
        ours = parse_properties((pod / "server.properties").read_text())
        assert {k: v for k, v in ours.items() if "jaas" not in k} == want
        # ...but its launch cannot format a KIP-853 quorum: nothing was formatted.
        assert proc.returncode != 0
        assert "controller.quorum.voters is not set" in proc.stdout + proc.stderr
        assert not (log_dirs / "meta.properties").exists()
