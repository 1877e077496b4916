"""hanzo_stream/kube/images.py without building anything: keys, scripts, layers, archives.

The scripts run here with a stand-in `java` that prints its arguments, so what each
wrapper hands the JVM is checked without a JVM. tests/integration/test_kube_images.py
builds the images and runs them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from hanzo_stream.artifacts import jars, versions
from hanzo_stream.kube import images
from hanzo_stream.local.kafka import LOG4J2
from infra import broker as infra_broker
from infra import settings as infra_settings
from infra import spark as infra_spark

ROOT = Path(__file__).resolve().parents[2]
FAKE_JAVA = '#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n'


def stage(inputs: object, parent: images.Stage | None = None, name: str = "s") -> images.Stage:
    return images.Stage(name, inputs, lambda work: work, parent)


# --- keys ---------------------------------------------------------------------------------


def test_a_stage_key_follows_its_inputs_and_its_parent():
    base = stage(["a"])
    assert stage(["a"]).key == base.key
    assert stage(["b"]).key != base.key
    assert stage(["x"], base).key != stage(["x"], stage(["a2"])).key
    assert stage(["x"], base, "other").key != stage(["x"], base).key


def test_base_key_follows_the_package_list(monkeypatch):
    before = images.base_stage().key
    monkeypatch.setattr(images, "debian_packages", lambda: ["python3"])
    assert images.base_stage().key != before


def test_base_key_does_not_depend_on_the_cache_location(monkeypatch, tmp_path):
    before = images.base_stage().key
    monkeypatch.setenv("HANZO_STREAM_CACHE", str(tmp_path))
    assert images.base_stage().key == before


def checkout(tmp_path: Path) -> Path:
    """A small checkout: what the dependency and app layers are made from."""
    for rel in ("topics.yaml", "spark/job.py", "consumers/g.yaml", "schemas/e.json",
                "hanzo_stream/__init__.py", "README.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\n[project]\nname = "x"\n'
        'dependencies = ["pyyaml>=6"]\n[project.optional-dependencies]\nspark = ["pyspark==4.2.0"]\n'
        "[tool.ruff]\nline-length = 110\n")
    return tmp_path


def test_app_key_follows_every_file_that_goes_in(monkeypatch, tmp_path):
    monkeypatch.setattr(images, "ROOT", checkout(tmp_path))
    parent = stage(["jars"])
    keys = {images.app_stage(parent).key}
    for rel in ("topics.yaml", "spark/job.py", "consumers/g.yaml", "schemas/e.json",
                "hanzo_stream/__init__.py", "pyproject.toml", "README.md"):
        (tmp_path / rel).write_text((tmp_path / rel).read_text() + "\n# changed")
        keys.add(images.app_stage(parent).key)
    assert len(keys) == 8
    (tmp_path / "spark" / "__pycache__").mkdir()
    (tmp_path / "spark" / "__pycache__" / "job.cpython-311.pyc").write_bytes(b"x")
    assert images.app_stage(parent).key in keys  # bytecode is not an input


def test_deps_key_follows_the_requirements_not_the_rest_of_pyproject(monkeypatch, tmp_path):
    monkeypatch.setattr(images, "ROOT", checkout(tmp_path))
    base = stage(["base"])
    key = images.deps_stage(base).key
    text = (tmp_path / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text.replace("line-length = 110", "line-length = 100"))
    assert images.deps_stage(base).key == key
    (tmp_path / "pyproject.toml").write_text(text.replace("pyyaml>=6", "pyyaml>=6.0.2"))
    assert images.deps_stage(base).key != key


def test_requirements_are_the_dependencies_and_the_spark_extra():
    reqs = images.requirements()
    assert f"pyspark=={versions.SPARK_VERSION}" in reqs
    assert any(r.startswith("chdb") for r in reqs) and any(r.startswith("pyyaml") for r in reqs)
    assert not any(r.startswith(("pytest", "pulumi")) for r in reqs)


def test_kafka_key_follows_its_scripts(monkeypatch):
    base = stage(["base"])
    key = images.kafka_stage(base).key
    monkeypatch.setitem(images.KAFKA_TOOLS, "kafka-topics.sh", "org.example.Other")
    assert images.kafka_stage(base).key != key


def test_refs():
    refs = images.refs()
    assert refs["pause"] == versions.KUBE_PAUSE_IMAGE
    assert refs["kafka"] == f"localhost/hanzo-stream/kafka:{versions.KAFKA_VERSION}"
    repo, tag = refs["hanzo-stream"].rsplit(":", 1)
    assert repo == versions.KUBE_HANZO_STREAM_REPO and re.fullmatch(r"[0-9a-f]{16}", tag)


def test_the_hanzo_stream_tag_is_a_hash_of_what_went_in(monkeypatch, tmp_path):
    before = images.refs()["hanzo-stream"]
    monkeypatch.setattr(images, "ROOT", checkout(tmp_path))
    after = images.refs()
    assert after["hanzo-stream"] != before
    assert after["kafka"] == versions.KUBE_KAFKA_IMAGE


# --- the contracts other code relies on ---------------------------------------------------


def test_kafka_tools_run_classes_of_the_kafka_jars():
    classes = set()
    for jar in jars.kafka_jars().glob("*.jar"):
        with zipfile.ZipFile(jar) as z:
            classes |= {n[:-6].replace("/", ".") for n in z.namelist() if n.endswith(".class")}
    missing = {tool: cls for tool, cls in images.KAFKA_TOOLS.items() if cls not in classes}
    assert not missing


def test_every_kafka_script_the_docs_and_infra_name_is_in_the_image():
    named = set()
    for d in ("docs", "infra"):
        for p in (ROOT / d).rglob("*"):
            if p.suffix in (".md", ".py"):
                named |= set(re.findall(r"kafka-[a-z-]+\.sh", p.read_text()))
    assert named - {*images.KAFKA_TOOLS, "kafka-run-class.sh"} == set()


def test_the_jars_layer_holds_infra_spark_names():
    inputs = images.jars_stage(stage(["deps"])).inputs
    assert inputs["jars"] == infra_spark.connector_jars()
    assert images.jmx_agent_path() == infra_settings.JMX_AGENT_IN_IMAGE
    assert inputs["agent"] == [versions.JMX_EXPORTER_VERSION, infra_settings.JMX_AGENT_IN_IMAGE]


def test_image_configs():
    specs = images.specs()
    kafka = infra_broker.FLAVORS["apache"]
    assert specs["kafka"].config["user"] == f"{kafka.uid}:{kafka.uid}" == "1000:1000"
    assert specs["kafka"].config["workdir"] == kafka.kafka_home == "/opt/kafka"
    hs = specs["hanzo-stream"].config
    assert hs["user"] == "10001:10001" and hs["workdir"] == infra_spark.APP_HOME
    assert hs["entrypoint"] == [f"{infra_spark.APP_HOME}/bin/spark-entrypoint"]
    assert f"SPARK_HOME={images.SPARK_HOME}" in hs["env"] and f"JAVA_HOME={images.JAVA_HOME}" in hs["env"]
    assert specs["pause"].config["entrypoint"] == ["/pause"]


def test_config_flags():
    assert images.config_flags({"user": "1:1", "env": ["A=1", "B=2"], "entrypoint": ["/e", "x"]}) == [
        "--config.user", "1:1", "--config.env", "A=1", "--config.env", "B=2",
        "--config.entrypoint", "/e", "--config.entrypoint", "x"]


def test_mmdebstrap_runs_minbase_with_our_packages_and_apt_cache(tmp_path):
    argv = images.mmdebstrap_argv(tmp_path / "out.tar", tmp_path / "apt")
    assert "--variant=minbase" in argv and "--format=tar" in argv
    assert f"--include={','.join(images.debian_packages())}" in argv
    assert f"--setup-hook=sync-in {tmp_path / 'apt'} /var/cache/apt/archives" in argv
    assert f"--customize-hook=sync-out /var/cache/apt/archives {tmp_path / 'apt'}" in argv
    assert argv[-4:] == [str(tmp_path / "out.tar"),
                         "deb http://deb.debian.org/debian bookworm main",
                         "deb http://deb.debian.org/debian bookworm-updates main",
                         "deb http://deb.debian.org/debian-security bookworm-security main"]


# --- scripts ------------------------------------------------------------------------------


def materialize(entries: list[images.Entry], root: Path) -> None:
    for e in entries:
        path = root / e.path.lstrip("/")
        if e.is_dir:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(e.data if e.data is not None else e.source.read_bytes())
        path.chmod(e.mode)


@pytest.fixture
def kafka_home(tmp_path) -> tuple[Path, dict[str, str]]:
    """The kafka layer's scripts and configs under tmp_path, and an env with a fake java."""
    materialize(images.kafka_entries(), tmp_path)
    (tmp_path / "jdk" / "bin").mkdir(parents=True)
    (tmp_path / "jdk" / "bin" / "java").write_text(FAKE_JAVA)
    (tmp_path / "jdk" / "bin" / "java").chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "JAVA_HOME": str(tmp_path / "jdk")}
    return tmp_path / "opt" / "kafka", env


def java_args(script: Path, args: list[str], env: dict[str, str]) -> list[str]:
    proc = subprocess.run(["sh", str(script), *args], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_every_script_is_posix_sh(kafka_home):
    home, _ = kafka_home
    scripts = [*(home / "bin").iterdir(), images.FILES / "spark-entrypoint"]
    assert len(scripts) == len(images.KAFKA_TOOLS) + 2
    for p in scripts:
        assert subprocess.run(["sh", "-n", str(p)], capture_output=True).returncode == 0, p
        assert p.read_text().startswith("#!/bin/sh\n")


def test_a_tool_runs_its_class_with_kafka_libs_and_tool_logging(kafka_home):
    home, env = kafka_home
    args = java_args(home / "bin" / "kafka-topics.sh", ["--version"], env)
    assert args[-2:] == ["org.apache.kafka.tools.TopicCommand", "--version"]
    assert args[args.index("-cp") + 1] == f"{home.resolve()}/libs/*"
    assert "-Xmx256M" in args
    assert f"-Dlog4j2.configurationFile={home.resolve()}/config/tools-log4j2.properties" in args
    assert f"-Dkafka.logs.dir={home.resolve()}/logs" in args


def test_kafka_run_class_honours_the_official_variables(kafka_home, tmp_path):
    home, env = kafka_home
    env |= {"KAFKA_HEAP_OPTS": "-Xms1m -Xmx2m", "KAFKA_JVM_PERFORMANCE_OPTS": "-XX:+UseZGC",
            "KAFKA_OPTS": "-javaagent:/a.jar=9404:/r.yaml -Dx=*", "KAFKA_LOG4J_OPTS": "-Dl=1",
            "LOG_DIR": str(tmp_path / "logs")}
    args = java_args(home / "bin" / "kafka-run-class.sh", ["some.Main", "a b"], env)
    assert args[:4] == ["-Xms1m", "-Xmx2m", "-XX:+UseZGC", "-Dl=1"]
    assert args[-4:] == ["-javaagent:/a.jar=9404:/r.yaml", "-Dx=*", "some.Main", "a b"]  # never globbed
    assert f"-Dkafka.logs.dir={tmp_path / 'logs'}" in args and (tmp_path / "logs").is_dir()


def test_the_server_gets_apache_defaults_and_the_broker_logging(kafka_home):
    home, env = kafka_home
    args = java_args(home / "bin" / "kafka-server-start.sh", ["/run/server.properties"], env)
    assert args[:2] == ["-Xmx1G", "-Xms1G"]
    assert args[-2:] == ["kafka.Kafka", "/run/server.properties"]
    log4j = next(a for a in args if a.startswith("-Dlog4j2.configurationFile="))
    assert Path(log4j.split("=", 1)[1]).resolve() == (home / "config" / "log4j2.properties").resolve()
    usage = subprocess.run(["sh", str(home / "bin" / "kafka-server-start.sh")], env=env,
                           capture_output=True, text=True)
    assert usage.returncode == 1 and "USAGE" in usage.stderr


def test_broker_logging_is_the_local_one_plus_stdout():
    assert images.broker_log4j2().startswith(LOG4J2)
    assert "rootLogger.appenderRef.stdout.ref = stdout" in images.broker_log4j2()
    assert "appender.stdout.target = SYSTEM_OUT" in images.broker_log4j2()
    tools = images.tools_log4j2()
    assert "SYSTEM_ERR" in tools and "rootLogger.level = WARN" in tools and "File" not in tools


@pytest.fixture
def spark_env(tmp_path) -> dict[str, str]:
    for d in ("jdk/bin", "spark/bin"):
        (tmp_path / d).mkdir(parents=True)
    for p in ("jdk/bin/java", "spark/bin/spark-submit"):
        (tmp_path / p).write_text(FAKE_JAVA)
        (tmp_path / p).chmod(0o755)
    return {"PATH": "/usr/bin:/bin", "JAVA_HOME": str(tmp_path / "jdk"),
            "SPARK_HOME": str(tmp_path / "spark")}


def entrypoint(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """spark-entrypoint as the image has it: <app home>/bin, the jars in <app home>/jars."""
    app = Path(env["SPARK_HOME"]).parent / "app"
    (app / "bin").mkdir(parents=True, exist_ok=True)
    (app / "bin" / "spark-entrypoint").write_bytes((images.FILES / "spark-entrypoint").read_bytes())
    return subprocess.run(["sh", str(app / "bin" / "spark-entrypoint"), *args], env=env,
                          capture_output=True, text=True, timeout=30)


def test_spark_entrypoint_starts_an_executor_as_spark_does(spark_env):
    env = spark_env | {
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@driver:7078", "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "2", "SPARK_EXECUTOR_MEMORY": "2g", "SPARK_APPLICATION_ID": "app-1",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.7", "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "job-exec-3", "SPARK_JAVA_OPT_10": "-Dten=1",
        "SPARK_JAVA_OPT_0": "-Dzero=a b", "SPARK_JAVA_OPT_2": "-Dtwo=*", "SPARK_CLASSPATH": "/extra/*"}
    args = entrypoint(["executor"], env).stdout.splitlines()
    app = Path(spark_env["SPARK_HOME"]).parent.resolve() / "app"
    cp = f"/extra/*:{spark_env['SPARK_HOME']}/jars/*:{app}/jars/*"
    assert args == [
        "-Dzero=a b", "-Dtwo=*", "-Dten=1", "-Xms2g", "-Xmx2g", "-cp", cp,
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
        "--driver-url", "spark://CoarseGrainedScheduler@driver:7078", "--executor-id", "3",
        "--cores", "2", "--app-id", "app-1", "--hostname", "10.0.0.7", "--resourceProfileId", "0",
        "--podName", "job-exec-3"]


def test_spark_entrypoint_leaves_unset_options_to_spark(spark_env):
    args = entrypoint(["executor"], spark_env).stdout.splitlines()
    assert args[-1] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"


def test_spark_entrypoint_driver_and_pass_through(spark_env):
    args = entrypoint(["driver", "--class", "X", "local:///a.py"], spark_env).stdout.splitlines()
    assert args == ["--conf", "spark.driver.bindAddress=0.0.0.0", "--deploy-mode", "client",
                    "--class", "X", "local:///a.py"]
    assert entrypoint(["echo", "a  b"], spark_env).stdout == "a  b\n"
    assert entrypoint([], spark_env).returncode == 64


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.skipif(os.geteuid() != 0 or not all(map(shutil.which, ("gcc", "unshare", "nsenter"))),
                    reason="needs root, gcc, unshare and nsenter")
def test_pause_reaps_orphans_and_exits_0_on_sigterm(tmp_path):
    """pause as PID 1 of a PID namespace, as in a pod: an orphan that exits is reaped."""
    subprocess.run(["gcc", "-static", "-Os", "-s", "-o", str(tmp_path / "pause"),
                    str(images.FILES / "pause.c")], check=True)
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", str(tmp_path / "pause")])
    try:
        deadline = time.monotonic() + 10
        while not children(proc.pid):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pause = children(proc.pid)[0]
        subprocess.run(["nsenter", "--target", str(pause), "--pid", "--", "sh", "-c",
                        "(sleep 0.3; exit 3) & exit 0"], check=True)
        assert children(pause), "the orphan was not handed to pause"
        while children(pause):
            assert time.monotonic() < deadline, "pause left a zombie"
            time.sleep(0.05)
        os.kill(pause, signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        proc.wait()


# --- layers and archives ------------------------------------------------------------------


def members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_a_layer_has_its_parents_and_is_the_same_bytes_every_time(tmp_path):
    src = tmp_path / "f.jar"
    src.write_bytes(b"jar")
    entries = [images.Entry("/opt/kafka/libs/f.jar", source=src),
               images.Entry("/opt/kafka/logs", mode=0o755, uid=1000),
               images.Entry("/opt/kafka/bin/x.sh", data=b"#!/bin/sh\n", mode=0o755)]
    a = images.write_layer(tmp_path / "a.tar", entries)
    b = images.write_layer(tmp_path / "b.tar", list(reversed(entries)))
    assert a.read_bytes() == b.read_bytes()
    m = members(a)
    assert list(m) == ["opt", "opt/kafka", "opt/kafka/bin", "opt/kafka/bin/x.sh", "opt/kafka/libs",
                       "opt/kafka/libs/f.jar", "opt/kafka/logs"]
    assert m["opt/kafka/logs"].isdir() and (m["opt/kafka/logs"].uid, m["opt/kafka/logs"].gid) == (1000, 1000)
    assert m["opt/kafka/bin/x.sh"].mode == 0o755 and m["opt/kafka/libs/f.jar"].mode == 0o644
    assert all(x.mtime == 0 and x.uid in (0, 1000) for x in m.values())


def test_a_tree_in_a_layer_is_readable_by_every_uid(tmp_path):
    tree = tmp_path / "stage" / "usr" / "local" / "bin"
    tree.mkdir(parents=True)
    (tree / "tool").write_text("x")
    (tree / "tool").chmod(0o700)
    (tree / "lib").write_text("x")
    (tree / "lib").chmod(0o600)
    (tree / "link").symlink_to("tool")
    m = members(images.write_layer(tmp_path / "l.tar", trees=[(tmp_path / "stage", "/")]))
    assert m["usr/local/bin/tool"].mode == 0o755 and m["usr/local/bin/lib"].mode == 0o644
    assert m["usr/local/bin/link"].issym() and m["usr/local/bin/link"].linkname == "tool"
    assert all(x.uid == 0 for x in m.values())


def test_with_user():
    passwd, group = images.with_user("root:x:0:0:root:/root:/bin/bash\n", "root:x:0:\n",
                                     images.User("hanzo", 10001, "/home/hanzo"))
    assert passwd.splitlines()[-1] == "hanzo:x:10001:10001::/home/hanzo:/bin/sh"
    assert group.splitlines()[-1] == "hanzo:x:10001:"
    with pytest.raises(images.BuildFailed):
        images.with_user(passwd, group, images.User("hanzo", 10002, "/h"))


def blob(layout: Path, data: bytes) -> dict:
    d = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / d).write_bytes(data)
    return {"digest": f"sha256:{d}", "size": len(data)}


def test_an_archive_holds_one_image_under_its_ref(tmp_path):
    layout = tmp_path / "layout"
    layer, config = blob(layout, b"layer"), blob(layout, b"{}")
    blob(layout, b"stale blob of an earlier stage")
    manifest = blob(layout, json.dumps({"schemaVersion": 2, "config": config, "layers": [layer]}).encode())
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {**manifest, "annotations": {"org.opencontainers.image.ref.name": "img"}}]}))
    digest, size = images.write_archive(layout, "localhost/hanzo-stream/x:1", tmp_path / "a.tar")
    assert digest == manifest["digest"] and size == (tmp_path / "a.tar").stat().st_size
    with tarfile.open(tmp_path / "a.tar") as tar:
        names = set(tar.getnames())
        index = json.load(tar.extractfile("index.json"))
    assert names == {"oci-layout", "index.json", "blobs", "blobs/sha256",
                     *(f"blobs/sha256/{d['digest'][7:]}" for d in (layer, config, manifest))}
    assert index["manifests"][0]["annotations"] == {
        "io.containerd.image.name": "localhost/hanzo-stream/x:1", "org.opencontainers.image.ref.name": "1"}


# --- containerd import ----------------------------------------------------------------------


@pytest.fixture
def fake_ctr(tmp_path) -> tuple[list[str], Path]:
    """A `ctr` that lists what it imported (name and digest from the archive's index)."""
    state = tmp_path / "ctr-state.json"
    script = tmp_path / "ctr.py"
    script.write_text(f"""import json, sys, tarfile
state = {str(state)!r}
try:
    images = json.load(open(state))
except FileNotFoundError:
    images = {{}}
args = sys.argv[1:]
if args[2:4] == ["images", "import"]:
    with tarfile.open(args[4]) as t:
        m = json.load(t.extractfile("index.json"))["manifests"][0]
    images[m["annotations"]["io.containerd.image.name"]] = m["digest"]
    json.dump(images, open(state, "w"))
elif args[2:4] == ["images", "ls"]:
    print("REF TYPE DIGEST SIZE PLATFORMS LABELS")
    ref = args[4].split("==")[1]
    if ref in images:
        print(ref, "application/vnd.oci.image.manifest.v1+json", images[ref], "1 MiB linux/amd64 -")
""")
    return [sys.executable, str(script)], state


def test_import_is_idempotent(monkeypatch, tmp_path, fake_ctr):
    ctr, state = fake_ctr
    archive = tmp_path / "x.tar"
    with tarfile.open(archive, "w") as t:
        data = json.dumps({"manifests": [{"digest": "sha256:abc", "annotations": {
            "io.containerd.image.name": "localhost/x:1"}}]}).encode()
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    built = images.Built("x", "localhost/x:1", archive, "sha256:abc", 1, 1, 0.0, True)
    monkeypatch.setattr(images, "build", lambda names: {"x": built})
    assert images.import_images(ctr, ["x"]) == ["localhost/x:1"]
    assert json.loads(state.read_text()) == {"localhost/x:1": "sha256:abc"}
    assert images.import_images(ctr, ["x"]) == []
    assert images.present_digest(ctr, "localhost/other:1") is None


def test_other_builds_are_pruned_only_once_a_day_old(tmp_path):
    """Another checkout's build of the same image (CI beside a developer) stays usable."""
    import os
    import time

    from hanzo_stream.kube.images import PRUNE_AFTER_SECONDS, _prune

    for d in ("kafka-aaaa", "kafka-bbbb", "kafka-eeee", "kafka-flavor-dddd"):
        (tmp_path / d).mkdir()
    (tmp_path / "kafka-cccc.tar").write_text("")
    stale = time.time() - PRUNE_AFTER_SECONDS - 60
    for old in ("kafka-bbbb", "kafka-cccc.tar", "kafka-flavor-dddd"):
        os.utime(tmp_path / old, (stale, stale))
    _prune(tmp_path, "kafka", "kafka-aaaa")
    # kept: this build, another one made today, and another stage's (not kafka-<hex>)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kafka-aaaa", "kafka-eeee", "kafka-flavor-dddd"]


def test_a_day_of_commits_keeps_only_the_newest_other_builds(tmp_path):
    """Each commit is a new key: beyond KEEP_OTHERS newest, builds go once BUSY_SECONDS old;
    a build's archive and its record go together."""
    import os
    import time

    from hanzo_stream.kube.images import BUSY_SECONDS, KEEP_OTHERS, _prune

    now = time.time()
    ages = {"a1": 10, "b2": BUSY_SECONDS + 60, "c3": BUSY_SECONDS + 120, "d4": BUSY_SECONDS + 180,
            "e5": 20, "f6": 30, "g7": 40}
    for key, age in ages.items():
        for suffix in (".tar", ".json"):
            f = tmp_path / f"kafka-{key}{suffix}"
            f.write_text("")
            os.utime(f, (now - age, now - age))
    _prune(tmp_path, "kafka", "kafka-a1")
    kept = sorted({p.name.split(".")[0] for p in tmp_path.iterdir()})
    # this build; the KEEP_OTHERS newest others; and every other still younger than BUSY_SECONDS
    assert KEEP_OTHERS == 2 and kept == ["kafka-a1", "kafka-e5", "kafka-f6", "kafka-g7"]
    assert len(list(tmp_path.iterdir())) == 2 * len(kept)


# --- kafka-3.7: the standard's insights-kafka for the takeover test ------------------------


def test_legacy_tools_run_classes_of_the_kafka_3_7_jars():
    classes = set()
    for jar in jars.takeover_from_kafka_jars().glob("*.jar"):
        with zipfile.ZipFile(jar) as z:
            classes |= {n[:-6].replace("/", ".") for n in z.namelist() if n.endswith(".class")}
    assert set(images.LEGACY_TOOLS.values()) <= classes
    assert images.specs()["kafka-3.7"].config["user"] == "1001:1001"  # Bitnami's uid


def test_the_legacy_run_script_turns_kafka_cfg_variables_into_properties_and_formats_once(tmp_path):
    home = tmp_path / "kafka"
    (home / "bin").mkdir(parents=True)
    (home / "config").mkdir()
    fakes = {"kafka-storage.sh": 'echo "$@" >> "$OUT/formatted"; mkdir -p "$LOGS"; '
                                 ': > "$LOGS/meta.properties"',
             "kafka-server-start.sh": 'cp "$1" "$OUT/server.properties"'}
    for name, body in fakes.items():
        (home / "bin" / name).write_text(f"#!/bin/sh\n{body}\n")
        (home / "bin" / name).chmod(0o755)
    script = (images.FILES / "legacy-kafka-run.sh").read_text().replace(images.LEGACY_HOME, str(home))
    logs = tmp_path / "data"
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "LOGS": str(logs),
           "KAFKA_KRAFT_CLUSTER_ID": "abc", "KAFKA_CFG_NODE_ID": "0",
           "KAFKA_CFG_LOG_DIRS": str(logs),
           "KAFKA_CFG_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
           "KAFKA_CFG_CONTROLLER_QUORUM_VOTERS": "0@insights-kafka-0.insights-kafka:9094",
           "KAFKA_HEAP_OPTS": "-Xmx1g"}
    for _ in range(2):
        proc = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 0, proc.stderr
    props = dict(line.split("=", 1) for line in (tmp_path / "server.properties").read_text().splitlines())
    assert props == {"node.id": "0", "log.dirs": str(logs),
                     "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                     "controller.quorum.voters": "0@insights-kafka-0.insights-kafka:9094"}
    conf = home / "config" / "server.properties"
    assert (tmp_path / "formatted").read_text().splitlines() == [
        f"format --ignore-formatted -t abc -c {conf}"]  # the second start found its directory
