"""Container images for the local Kubernetes, built here without any registry.

Why: the cluster on these machines can pull from nowhere, so every image it runs is made
from Debian packages (mmdebstrap), PyPI (pip) and Maven Central (the jars the local
platform already fetches), packed as OCI archives with umoci and imported into
containerd's `k8s.io` namespace (import_images).

- pause (versions.KUBE_PAUSE_IMAGE): image_files/pause.c built with `gcc -static`, alone.
- kafka (versions.KUBE_KAFKA_IMAGE) stands in for docker.io/apache/kafka with its layout:
  Kafka's jars in /opt/kafka/libs, our own scripts in /opt/kafka/bin, log4j2 configurations
  in /opt/kafka/config, uid 1000 (appuser), workdir /opt/kafka; no JMX agent.
- hanzo-stream (versions.KUBE_HANZO_STREAM_REPO:<hash of what went in>) runs every pod of
  our own code: python3 and the JRE, the package with its [spark] extra, the repository
  files the jobs read under /opt/hanzo-stream, the Spark connector jars, the JMX agent the
  broker's init container copies, and spark-entrypoint; uid 10001 (hanzo).

- kafka-3.7 (versions.KUBE_LEGACY_KAFKA_IMAGE) stands in for the standard's bitnami/kafka:3.7:
  Kafka 3.7.2's jars in Bitnami's layout, uid 1001 and a run script of Bitnami's convention
  (KAFKA_CFG_* variables); only the takeover test imports it.

kafka, kafka-3.7 and hanzo-stream share one Debian base. Every layer is a stage cached as an OCI
layout under cache_dir()/kube/images, named by a hash of its inputs and its parent's, so
a code change rebuilds only hanzo-stream's small top layer and a build with nothing
changed only hashes its inputs. Builds run as root (mmdebstrap, chroot).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib
import importlib.metadata
import io
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType

from ..artifacts import jars
from ..artifacts import versions as v
from ..artifacts.kafka_tools import SCRIPTS, console_appender, tools_log4j2
from ..core.paths import cache_dir
from ..local.kafka import LOG4J2

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
FILES = Path(__file__).with_name("image_files")
NAMES = ("pause", "kafka", "hanzo-stream")  # what every node imports
ON_DEMAND = ("kafka-3.7",)  # what only the test that runs it imports
PAUSE_IMAGE = v.KUBE_PAUSE_IMAGE  # containerd's CRI sandbox_image
FORMAT = 1  # part of every key: bump it when the way a layer is made changes

ARCH = "amd64"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
JAVA_HOME = f"/usr/lib/jvm/java-{v.KUBE_IMAGE_JAVA}-openjdk-{ARCH}"
SITE = f"/usr/local/lib/python{v.KUBE_IMAGE_PYTHON}/dist-packages"  # pip's target for Debian's python3
SPARK_HOME = f"{SITE}/pyspark"
MIRRORS = ("deb http://deb.debian.org/debian {suite} main",
           "deb http://deb.debian.org/debian {suite}-updates main",
           "deb http://deb.debian.org/debian-security {suite}-security main")
# What no container reads: documentation (copyright files stay), manuals, translations.
DPKG_EXCLUDES = ("path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
                 "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
                 "path-exclude=/usr/share/locale/*")

KAFKA_TOOLS = SCRIPTS  # /opt/kafka/bin: kafka_tools.py has the one table
SERVER_TOOL = "kafka-server-start.sh"
# Apache's kafka-server-start.sh defaults, kept: a 1 GB heap and the broker's log4j2 file.
SERVER_DEFAULTS = {
    "KAFKA_HEAP_OPTS": "-Xmx1G -Xms1G",
    "KAFKA_LOG4J_OPTS": '-Dlog4j2.configurationFile=$(dirname "$0")/../config/log4j2.properties',
}


class BuildFailed(RuntimeError):
    pass


def cache() -> Path:
    return cache_dir() / "kube" / "images"


def digest(*parts: object) -> str:
    """The key of a cached thing: a hash of everything it is made from, as JSON."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _run(cmd: Sequence[str | Path], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise BuildFailed(f"{' '.join(map(str, cmd[:4]))} ... failed ({proc.returncode}):\n"
                          f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def _infra(module: str) -> ModuleType:
    """A module of infra/, whose values are the contracts the pods rely on (paths, uid, jar
    names). Images are built from a checkout: its root is put on sys.path if missing."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"infra.{module}")


def app_home() -> str:
    """Where the hanzo-stream image keeps the repository files (infra/spark.py's APP_HOME)."""
    return _infra("spark").APP_HOME


def jmx_agent_path() -> str:
    """Where the hanzo-stream image keeps the JMX exporter agent, which the broker's init
    container copies and checks (infra/settings.py's JMX_AGENT_IN_IMAGE)."""
    return _infra("settings").JMX_AGENT_IN_IMAGE


# ---------------------------------------------------------------------------------------
# Layers we write ourselves


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a file from `source` or `data`, else a directory."""

    path: str  # absolute, in the image
    source: Path | None = None
    data: bytes | None = None
    mode: int = 0o644
    uid: int = 0

    @property
    def is_dir(self) -> bool:
        return self.source is None and self.data is None

    def fingerprint(self) -> list:
        """What the entry contributes to a key. A jar counts by its name: Maven Central
        artifacts are immutable and versioned in the name (hashing 700 MB would cost seconds)."""
        if self.source is not None:
            content = self.source.name if self.source.suffix == ".jar" else file_sha256(self.source)
        else:
            content = None if self.data is None else hashlib.sha256(self.data).hexdigest()
        return [self.path, oct(self.mode), self.uid, content]


@dataclass(frozen=True)
class User:
    name: str
    uid: int  # also the gid of its own group
    home: str
    shell: str = "/bin/sh"


def with_user(passwd: str, group: str, user: User) -> tuple[str, str]:
    """The base's /etc/passwd and /etc/group plus `user` in a group of its own."""
    if any(line.split(":")[0] == user.name for line in passwd.splitlines()):
        raise BuildFailed(f"the base already has a user {user.name}")
    return (passwd + f"{user.name}:x:{user.uid}:{user.uid}::{user.home}:{user.shell}\n",
            group + f"{user.name}:x:{user.uid}:\n")


def _parents(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _tarinfo(name: str, kind: bytes, mode: int, uid: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.strip("/"))
    info.type, info.mode, info.uid, info.gid, info.size = kind, mode, uid, uid, size
    info.uname = info.gname = ""
    info.mtime = 0  # our own entries are the same bytes whenever they are built
    return info


def _readable(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Root-owned and readable (directories enterable) by every uid: Spark executors and
    pods with another runAsUser read the same files."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if info.isdir():
        info.mode |= 0o555
    elif info.isreg():
        info.mode |= 0o444 | (0o111 if info.mode & 0o100 else 0)
    return info


def write_layer(dest: Path, entries: Iterable[Entry] = (),
                trees: Iterable[tuple[Path, str]] = ()) -> Path:
    """An uncompressed layer tar: `entries` with their parent directories (root, 0755), then
    each (directory, image path) tree as it is on disk but readable by all (_readable)."""
    by_path: dict[str, Entry] = {}
    for e in entries:
        for p in _parents(e.path):
            by_path.setdefault(p, Entry(p, mode=0o755))
        by_path[e.path] = e
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(by_path, key=lambda p: p.strip("/").split("/")):
            e = by_path[path]
            if e.is_dir:
                tar.addfile(_tarinfo(path, tarfile.DIRTYPE, e.mode, e.uid))
            elif e.data is not None:
                tar.addfile(_tarinfo(path, tarfile.REGTYPE, e.mode, e.uid, len(e.data)),
                            io.BytesIO(e.data))
            else:
                assert e.source is not None
                with open(e.source, "rb") as f:
                    info = _tarinfo(path, tarfile.REGTYPE, e.mode, e.uid, os.fstat(f.fileno()).st_size)
                    tar.addfile(info, f)
        for src, target in trees:
            for p in sorted(src.rglob("*")):
                name = f"{target.rstrip('/')}/{p.relative_to(src)}".lstrip("/")
                if "/" + name in by_path:
                    continue
                info = _readable(tar.gettarinfo(str(p), name))
                if info.isreg():
                    with open(p, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return dest


# ---------------------------------------------------------------------------------------
# Stages: one layer each, cached as an OCI layout with the tag "img"


@dataclass(frozen=True)
class Stage:
    """One layer on its parent's layers. `inputs` (JSON) is everything the layer is made
    from; `make(work_dir)` returns the uncompressed layer tar."""

    name: str
    inputs: object = field(repr=False)
    make: Callable[[Path], Path] = field(repr=False, compare=False)
    parent: Stage | None = None

    @cached_property
    def key(self) -> str:
        return digest(FORMAT, self.name, self.inputs, self.parent.key if self.parent else None)

    @property
    def dir(self) -> Path:
        return cache() / "oci" / f"{self.name}-{self.key[:20]}"

    def chain(self) -> list[Stage]:
        return (self.parent.chain() if self.parent else []) + [self]


DONE = "stage.json"  # written last: the stage is complete


PRUNE_AFTER_SECONDS = 86_400
KEEP_OTHERS = 2  # other builds of an image kept beside this one, however young
BUSY_SECONDS = 7_200  # no younger build is dropped: a run beside us may still import it


def _prune(directory: Path, name: str, keep: str) -> None:
    """Drop builds of `name` with other keys: any a day old, and any beyond the KEEP_OTHERS
    newest that is BUSY_SECONDS old. Not at once: two checkouts building side by side (a
    developer's and CI's) would delete each other's archives, and a rebuilt image is a new
    digest under the same tag (seen: a test's images changed under it mid-run). Not only daily
    either: every commit is a new key for the images that carry the code (1.6 GB of archives
    a commit), and a day of commits filled the disk."""
    pattern = re.compile(rf"^({re.escape(name)}-[0-9a-f]+)(\..+)?$")
    builds: dict[str, list[Path]] = {}
    for p in directory.glob(f"{name}-*"):
        if (m := pattern.match(p.name)) and not p.name.startswith(keep):
            builds.setdefault(m.group(1), []).append(p)
    now = time.time()
    age = {b: now - max(p.stat().st_mtime for p in ps) for b, ps in builds.items()}
    for rank, build in enumerate(sorted(builds, key=age.__getitem__)):
        if age[build] > PRUNE_AFTER_SECONDS or (rank >= KEEP_OTHERS and age[build] > BUSY_SECONDS):
            for p in builds[build]:
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink()


@contextmanager
def _work() -> Iterator[Path]:
    """A scratch directory on the cache's filesystem (wheels and blobs are hard-linked)."""
    (cache() / "tmp").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache() / "tmp") as d:
        yield Path(d)


def _link_tree(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        if p.is_file() and not (dst / p.name).exists():
            try:
                os.link(p, dst / p.name)
            except OSError:
                shutil.copy2(p, dst / p.name)


def copy_layout(src: Path, dst: Path) -> None:
    """An OCI layout's copy sharing its blobs (content-addressed, never written in place)."""
    _link_tree(src / "blobs" / "sha256", dst / "blobs" / "sha256")
    for f in ("index.json", "oci-layout"):
        shutil.copy2(src / f, dst / f)


def realize(stage: Stage) -> Path:
    """The stage's OCI layout, built on its parent's unless cached."""
    dest = stage.dir
    if (dest / DONE).exists():
        return dest
    parent = realize(stage.parent) if stage.parent else None
    t0 = time.monotonic()
    log.info("  %s: building", stage.name)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    if parent:
        copy_layout(parent, tmp)
    else:
        _run(["umoci", "init", "--layout", tmp])
        _run(["umoci", "new", "--image", f"{tmp}:img"])
    with _work() as work:
        layer = stage.make(work)
        _run(["umoci", "raw", "add-layer", "--image", f"{tmp}:img",
              "--history.created_by", f"hanzo_stream.kube.images {stage.name}", layer])
        meta = {"layer_bytes": layer.stat().st_size, "seconds": round(time.monotonic() - t0, 1)}
    (tmp / DONE).write_text(json.dumps(meta) + "\n")
    _prune(dest.parent, stage.name, dest.name)
    tmp.rename(dest)
    log.info("  %s: layer of %s built in %.1f s", stage.name, _size(meta["layer_bytes"]),
             meta["seconds"])
    return dest


def _size(n: int) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


# ---------------------------------------------------------------------------------------
# The Debian base (kafka and hanzo-stream)


def debian_packages() -> list[str]:
    """On top of minbase (bash, coreutils, sed, mawk, grep, ...): the JRE, python3 (and the
    `python` name monitoring pods run), ps."""
    return [f"openjdk-{v.KUBE_IMAGE_JAVA}-jre-headless", "python3", "python-is-python3",
            "procps", "ca-certificates"]


def mmdebstrap_argv(out: Path, apt_cache: Path) -> list[str]:
    """The one mmdebstrap run of the base. Its .debs are synced in and out of apt_cache by
    hooks (essential ones kept for that), so a rebuild downloads nothing it has."""
    suite = v.KUBE_IMAGE_DEBIAN
    return [
        "mmdebstrap", "--variant=minbase", "--format=tar", f"--architectures={ARCH}",
        "--include=" + ",".join(debian_packages()),
        *(f"--dpkgopt={o}" for o in DPKG_EXCLUDES),
        "--skip=essential/unlink", "--skip=output/dev",
        # openjdk's postinst links its manual page even when manuals are left out
        '--setup-hook=mkdir -p "$1"/var/cache/apt/archives "$1"/usr/share/man/man1',
        f"--setup-hook=sync-in {apt_cache} /var/cache/apt/archives",
        f"--customize-hook=sync-out /var/cache/apt/archives {apt_cache}",
        # the build host's resolver and name: the container runtime provides its own
        '--customize-hook=rm -f "$1"/etc/resolv.conf "$1"/etc/hostname',
        suite, str(out), *(m.format(suite=suite) for m in MIRRORS),
    ]


def base_stage() -> Stage:
    return Stage("base", mmdebstrap_argv(Path("OUT"), Path("APT")), lambda work: base_rootfs())


def base_rootfs() -> Path:
    """The base as a rootfs tar (the base layer, and the chroot pip runs in)."""
    key = base_stage().key
    dest = cache() / "rootfs" / f"base-{key[:20]}.tar"
    if dest.exists():
        return dest
    if os.geteuid() != 0:
        raise BuildFailed("building the images needs root (mmdebstrap's root mode, chroot)")
    apt = cache() / "apt"
    apt.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.unlink(missing_ok=True)
    t0 = time.monotonic()
    log.info("  base: mmdebstrap %s %s", v.KUBE_IMAGE_DEBIAN, " ".join(debian_packages()))
    _run(mmdebstrap_argv(tmp, apt))
    names = set(_run(["tar", "-tf", tmp]).stdout.split())
    for want in (f"./usr/bin/python{v.KUBE_IMAGE_PYTHON}", f".{JAVA_HOME}/bin/java"):
        if want not in names:
            raise BuildFailed(f"the {v.KUBE_IMAGE_DEBIAN} base has no {want[1:]}: "
                              "versions.KUBE_IMAGE_PYTHON / KUBE_IMAGE_JAVA disagree with it")
    _prune(dest.parent, "base", dest.name)
    tmp.rename(dest)
    log.info("  base: rootfs of %s in %.1f s", _size(dest.stat().st_size), time.monotonic() - t0)
    return dest


def base_file(path: str) -> str:
    return _run(["tar", "-xOf", base_rootfs(), f".{path}"]).stdout


def user_entries(user: User) -> list[Entry]:
    passwd, group = with_user(base_file("/etc/passwd"), base_file("/etc/group"), user)
    return [Entry("/etc/passwd", data=passwd.encode()), Entry("/etc/group", data=group.encode()),
            Entry(user.home, mode=0o755, uid=user.uid)]


def unpack_base(work: Path, wheels: Path) -> Path:
    """The base unpacked under `work` with the wheelhouse linked in at /wheels: pip runs in
    the image's own python3 (no bind mount, so nothing to leave mounted)."""
    root = work / "rootfs"
    root.mkdir()
    _run(["tar", "-xf", base_rootfs(), "-C", root, "--numeric-owner"])
    (root / "dev").mkdir(exist_ok=True)
    os.mknod(root / "dev" / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.chmod(root / "dev" / "null", 0o666)
    _link_tree(wheels, root / "wheels")
    version = "import sys; print('.'.join(map(str, sys.version_info[:2])))"
    got = _run(["chroot", root, "/usr/bin/python3", "-c", version]).stdout.strip()
    host = ".".join(map(str, sys.version_info[:2]))
    if not got == v.KUBE_IMAGE_PYTHON == host:
        raise BuildFailed(f"python {got} in the image, {host} here, "
                          f"versions.KUBE_IMAGE_PYTHON {v.KUBE_IMAGE_PYTHON}: they must agree")
    return root


def pip_in(root: Path, args: Sequence[str]) -> Path:
    """`pip install` in the unpacked base, offline from /wheels, staged under /stage (the
    layer's content: Debian's python3 puts it in /usr/local)."""
    pip_wheel = next((root / "wheels").glob("pip-*.whl"))
    _run(["chroot", root, "/bin/sh", "-c", 'umask 022 && exec "$@"', "sh",
          "/usr/bin/python3", f"/wheels/{pip_wheel.name}/pip", "install", "--no-index",
          "--find-links", "/wheels", "--root", "/stage", "--no-cache-dir",
          "--disable-pip-version-check", "--break-system-packages", "--no-warn-script-location",
          "--progress-bar", "off", *args],
         env={"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "TMPDIR": "/tmp"})
    return root / "stage"


# ---------------------------------------------------------------------------------------
# pause


def pause_stage() -> Stage:
    src = FILES / "pause.c"
    gcc = _run(["gcc", "-dumpfullversion"]).stdout.strip()

    def make(work: Path) -> Path:
        _run(["gcc", "-static", "-Os", "-s", "-o", work / "pause", src])
        return write_layer(work / "layer.tar", [Entry("/pause", source=work / "pause", mode=0o755)])
    return Stage("pause", {"source": file_sha256(src), "gcc": gcc, "flags": "-static -Os -s"}, make)


# ---------------------------------------------------------------------------------------
# kafka


def broker_log4j2() -> str:
    """The local broker's configuration (file under kafka.logs.dir) plus stdout for `kubectl logs`."""
    return LOG4J2 + console_appender("stdout", "SYSTEM_OUT") + "rootLogger.appenderRef.stdout.ref = stdout\n"


def tool_script(tool: str, main_class: str) -> str:
    """One /opt/kafka/bin wrapper: kafka-run-class.sh with the tool's class."""
    lines = ["#!/bin/sh", f"# {tool}: {main_class} (hanzo_stream/kube/images.py)"]
    if tool == SERVER_TOOL:
        lines.append('[ $# -ge 1 ] || { echo "USAGE: $0 server.properties [--override property=value]*"'
                     ' >&2; exit 1; }')
        lines += [f'export {k}="${{{k}:-{val}}}"' for k, val in SERVER_DEFAULTS.items()]
    lines.append(f'exec "$(dirname "$0")/kafka-run-class.sh" {main_class} "$@"')
    return "\n".join(lines) + "\n"


def kafka_flavor():
    """infra/broker.py's apache flavor: the Kafka home and uid the broker pod relies on."""
    return _infra("broker").FLAVORS["apache"]


def kafka_user() -> User:
    return User("appuser", kafka_flavor().uid, "/home/appuser", "/bin/bash")


def kafka_entries() -> list[Entry]:
    """Everything of the kafka layer but the jars and the user."""
    home, uid = kafka_flavor().kafka_home, kafka_flavor().uid
    return [
        Entry(f"{home}/bin/kafka-run-class.sh", source=FILES / "kafka-run-class.sh", mode=0o755),
        *(Entry(f"{home}/bin/{tool}", data=tool_script(tool, cls).encode(), mode=0o755)
          for tool, cls in KAFKA_TOOLS.items()),
        Entry(f"{home}/config/log4j2.properties", data=broker_log4j2().encode()),
        Entry(f"{home}/config/tools-log4j2.properties", data=tools_log4j2().encode()),
        Entry(f"{home}/libs", mode=0o755),
        Entry(f"{home}/logs", mode=0o755, uid=uid),  # LOG_DIR's default
    ]


def kafka_stage(base: Stage) -> Stage:
    home = kafka_flavor().kafka_home
    entries = kafka_entries()

    def make(work: Path) -> Path:
        libs = [Entry(f"{home}/libs/{j.name}", source=j) for j in sorted(jars.kafka_jars().glob("*.jar"))]
        return write_layer(work / "layer.tar", [*entries, *libs, *user_entries(kafka_user())])
    # The jar set is what Maven resolves for these pins (hanzo_stream.artifacts.jars.kafka_jars).
    inputs = {"jars": [v.KAFKA_VERSION, v.SCALA_BINARY, v.KAFKA_LOG4J2],
              "files": [e.fingerprint() for e in entries], "user": kafka_user()}
    return Stage("kafka", inputs, make, base)


# ---------------------------------------------------------------------------------------
# kafka-3.7: the standard's running insights-kafka (bitnami/kafka:3.7), for the takeover test

LEGACY_HOME = "/opt/bitnami/kafka"
LEGACY_RUN = "/opt/bitnami/scripts/kafka/run.sh"
LEGACY_TOOLS = {  # what the standard's lines and the test run (Kafka 3.7.2's classes)
    "kafka-server-start.sh": "kafka.Kafka",
    "kafka-storage.sh": "kafka.tools.StorageTool",
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
    "kafka-features.sh": "org.apache.kafka.tools.FeatureCommand",
}
_CONSOLE = "org.apache.log4j.ConsoleAppender"
LEGACY_LOG4J = {  # log4j 1 (reload4j): the broker to stdout, the tools' warnings to stderr
    "log4j.properties": f"log4j.rootLogger=INFO, out\nlog4j.appender.out={_CONSOLE}\n",
    "tools-log4j.properties": f"log4j.rootLogger=WARN, err\nlog4j.appender.err={_CONSOLE}\n"
                              "log4j.appender.err.Target=System.err\n",
}


def legacy_user() -> User:
    """Bitnami's images run as 1001; its files on the volume belong to it."""
    return User("bitnami", _infra("broker").FLAVORS["bitnami"].uid, "/home/bitnami")


def legacy_tool(main_class: str) -> str:
    log4j = "log4j.properties" if main_class == "kafka.Kafka" else "tools-log4j.properties"
    return ("#!/bin/sh\n"
            f'exec java ${{KAFKA_HEAP_OPTS:--Xmx256m}} ${{KAFKA_OPTS:-}} '
            f'-Dlog4j.configuration=file:{LEGACY_HOME}/config/{log4j} '
            f'-cp "{LEGACY_HOME}/libs/*" {main_class} "$@"\n')


def legacy_kafka_stage(base: Stage) -> Stage:
    uid = legacy_user().uid
    entries = [
        Entry(LEGACY_RUN, source=FILES / "legacy-kafka-run.sh", mode=0o755),
        *(Entry(f"{LEGACY_HOME}/bin/{t}", data=legacy_tool(c).encode(), mode=0o755)
          for t, c in LEGACY_TOOLS.items()),
        *(Entry(f"{LEGACY_HOME}/config/{n}", data=text.encode()) for n, text in LEGACY_LOG4J.items()),
        Entry(f"{LEGACY_HOME}/config", mode=0o775, uid=uid),  # run.sh writes server.properties
        Entry(f"{LEGACY_HOME}/libs", mode=0o755),
        Entry("/bitnami/kafka", mode=0o775, uid=uid),  # the volume's mount point
    ]

    def make(work: Path) -> Path:
        libs = [Entry(f"{LEGACY_HOME}/libs/{j.name}", source=j)
                for j in sorted(jars.takeover_from_kafka_jars().glob("*.jar"))]
        return write_layer(work / "layer.tar", [*entries, *libs, *user_entries(legacy_user())])
    inputs = {"jars": [v.TAKEOVER_FROM_KAFKA, v.TAKEOVER_FROM_SLF4J_RELOAD4J],
              "files": [e.fingerprint() for e in entries], "user": legacy_user()}
    return Stage("kafka-3.7", inputs, make, base)


# ---------------------------------------------------------------------------------------
# hanzo-stream


HANZO = User("hanzo", 10001, "/home/hanzo")


def requirements() -> list[str]:
    """The dependencies layer: the package's dependencies with its [spark] extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["spark"]]


def build_requirements() -> list[str]:
    """What builds the package's own wheel, offline in the image's python3 (top layer)."""
    system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    return [*system["requires"], "wheel"]


def deps_inputs() -> dict:
    return {"requirements": requirements(), "build": build_requirements(),
            "pip": importlib.metadata.version("pip"), "python": v.KUBE_IMAGE_PYTHON}


def wheelhouse() -> Path:
    """Every wheel the image's pip installs, made by this machine's pip with its own cache
    (~/.cache/pip): pyspark's sdist is built once, downloads happen once. The chroot's pip
    runs from the pip wheel here, the host's version."""
    inputs = deps_inputs()
    dest = cache() / "wheels" / f"wheels-{digest(FORMAT, inputs)[:20]}"
    if (dest / ".complete").exists():
        return dest
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    _run([sys.executable, "-m", "pip", "wheel", "--wheel-dir", tmp, "--progress-bar", "off",
          "--disable-pip-version-check", *inputs["requirements"], *inputs["build"],
          f"pip=={inputs['pip']}"])
    (tmp / ".complete").write_text(json.dumps(inputs) + "\n")
    _prune(dest.parent, "wheels", dest.name)
    tmp.rename(dest)
    log.info("  wheels: %d in %.1f s", len(list(dest.glob("*.whl"))), time.monotonic() - t0)
    return dest


def deps_stage(base: Stage) -> Stage:
    def make(work: Path) -> Path:
        root = unpack_base(work, wheelhouse())
        return write_layer(work / "layer.tar", trees=[(pip_in(root, requirements()), "/")])
    return Stage("hanzo-stream-deps", deps_inputs(), make, base)


def jars_stage(deps: Stage) -> Stage:
    """The Spark connector jars under the names infra/spark.py gives them, and the JMX agent."""
    names = _infra("spark").connector_jars()
    home = app_home()

    def make(work: Path) -> Path:
        from ..jobs import spark as spark_jobs  # fetches into the cache, from ~/.m2 when there
        found = {p.name: p for p in [*spark_jobs.connector_jars(), *spark_jobs.s3a_jars()]}
        missing = [n for n in names if n not in found]
        if missing:
            raise BuildFailed(f"infra/spark.py names jars the jobs do not fetch: {missing}")
        agent = jars.jmx_exporter_agent()
        if file_sha256(agent) != _infra("settings").JMX_AGENT_SHA256:
            raise BuildFailed(f"{agent} is not the agent infra/settings.py's JMX_AGENT_SHA256 names")
        entries = [Entry(f"{home}/jars/{n}", source=found[n]) for n in names]
        entries.append(Entry(jmx_agent_path(), source=agent))
        return write_layer(work / "layer.tar", entries)
    inputs = {"jars": names, "agent": [v.JMX_EXPORTER_VERSION, jmx_agent_path()]}
    return Stage("hanzo-stream-jars", inputs, make, deps)


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix != ".pyc")


def package_files() -> list[Path]:
    """The sources pip builds the package from (pyproject.toml names README.md as its readme)."""
    return [ROOT / "pyproject.toml", ROOT / "README.md", *_files(ROOT / "hanzo_stream")]


def app_entries() -> list[Entry]:
    """The repository files the pods read (topics.yaml, spark/, consumers/, schemas/, and the
    package's sources, which job specs name by path: `job: hanzo_stream/jobs/consumer.py`)
    and the entrypoint, under the app home."""
    home = app_home()
    out = [Entry(f"{home}/topics.yaml", source=ROOT / "topics.yaml")]
    for d in ("spark", "consumers", "schemas", "hanzo_stream"):
        out += [Entry(f"{home}/{p.relative_to(ROOT)}", source=p) for p in _files(ROOT / d)]
    out.append(Entry(f"{home}/bin/spark-entrypoint", source=FILES / "spark-entrypoint", mode=0o755))
    return out


def app_stage(parent: Stage) -> Stage:
    entries = app_entries()

    def make(work: Path) -> Path:
        root = unpack_base(work, wheelhouse())
        for p in package_files():
            dst = root / "src" / p.relative_to(ROOT)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst)
        stage = pip_in(root, ["--no-deps", "/src"])
        return write_layer(work / "layer.tar", [*entries, *user_entries(HANZO)], [(stage, "/")])
    inputs = {"files": [e.fingerprint() for e in entries], "user": HANZO, "pip": deps_inputs()["pip"],
              "package": [[str(p.relative_to(ROOT)), file_sha256(p)] for p in package_files()]}
    return Stage("hanzo-stream-app", inputs, make, parent)


# ---------------------------------------------------------------------------------------
# Images


@dataclass(frozen=True)
class Image:
    name: str
    top: Stage
    config: dict  # user, workdir, env, entrypoint, cmd (umoci config)
    repo: str
    tag: str | None = None  # None: a hash of what went in

    @cached_property
    def key(self) -> str:
        return digest(FORMAT, self.name, self.top.key, self.config)

    @property
    def ref(self) -> str:
        return f"{self.repo}:{self.tag or self.key[:16]}"


def _split(ref: str) -> tuple[str, str]:
    repo, tag = ref.rsplit(":", 1)
    return repo, tag


def specs() -> dict[str, Image]:
    """What each image is made of; cheap (hashes inputs, builds nothing)."""
    base = base_stage()
    kafka = kafka_flavor()
    env = [f"PATH={PATH}", f"JAVA_HOME={JAVA_HOME}", "LANG=C.UTF-8"]
    home = app_home()
    return {
        "pause": Image("pause", pause_stage(), {"user": "65535:65535", "entrypoint": ["/pause"]},
                       *_split(PAUSE_IMAGE)),
        "kafka": Image("kafka", kafka_stage(base),
                       {"user": f"{kafka.uid}:{kafka.uid}", "workdir": kafka.kafka_home, "env": env},
                       *_split(v.KUBE_KAFKA_IMAGE)),
        "hanzo-stream": Image(
            "hanzo-stream", app_stage(jars_stage(deps_stage(base))),
            {"user": f"{HANZO.uid}:{HANZO.uid}", "workdir": home,
             "env": [*env, f"SPARK_HOME={SPARK_HOME}", "PYTHONUNBUFFERED=1"],
             # Spark's executor pods pass only args (`executor`): the entrypoint takes them;
             # a pod's `command:` replaces it.
             "entrypoint": [f"{home}/bin/spark-entrypoint"], "cmd": ["hanzo-stream", "--help"]},
            v.KUBE_HANZO_STREAM_REPO),
        "kafka-3.7": Image("kafka-3.7", legacy_kafka_stage(base),
                           {"user": f"{legacy_user().uid}:{legacy_user().uid}",
                            "workdir": LEGACY_HOME, "env": env, "entrypoint": [LEGACY_RUN]},
                           *_split(v.KUBE_LEGACY_KAFKA_IMAGE)),
    }


def refs() -> dict[str, str]:
    """The references this checkout's images have (what the stack's image settings name)."""
    return {name: img.ref for name, img in specs().items()}


def config_flags(config: dict) -> list[str]:
    flags = []
    for key, flag in (("user", "user"), ("workdir", "workingdir")):
        if key in config:
            flags += [f"--config.{flag}", config[key]]
    for key in ("env", "entrypoint", "cmd"):
        for item in config.get(key, ()):
            flags += [f"--config.{key}", item]
    return flags


def write_archive(layout: Path, ref: str, dest: Path) -> tuple[str, int]:
    """An OCI archive of the image tagged "img" in `layout`: only its own blobs, named `ref`
    for containerd's import. Returns the manifest digest and the archive's size."""
    index = json.loads((layout / "index.json").read_text())
    desc = next(m for m in index["manifests"]
                if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "img")
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / desc["digest"].split(":")[1]).read_bytes())
    needed = [desc["digest"], manifest["config"]["digest"], *(la["digest"] for la in manifest["layers"])]
    desc = {**desc, "annotations": {"io.containerd.image.name": ref,
                                    "org.opencontainers.image.ref.name": _split(ref)[1]}}
    files = {"oci-layout": (layout / "oci-layout").read_bytes(),
             "index.json": json.dumps({"schemaVersion": 2, "manifests": [desc]}).encode()}
    with tarfile.open(dest, "w") as tar:
        for name, data in files.items():
            tar.addfile(_tarinfo(name, tarfile.REGTYPE, 0o644, 0, len(data)), io.BytesIO(data))
        tar.addfile(_tarinfo("blobs", tarfile.DIRTYPE, 0o755, 0))
        tar.addfile(_tarinfo("blobs/sha256", tarfile.DIRTYPE, 0o755, 0))
        for d in needed:
            path = blobs / d.split(":")[1]
            with open(path, "rb") as f:
                tar.addfile(_tarinfo(f"blobs/sha256/{path.name}", tarfile.REGTYPE, 0o644, 0,
                                     path.stat().st_size), f)
    return desc["digest"], dest.stat().st_size


@dataclass(frozen=True)
class Built:
    name: str
    ref: str
    archive: Path
    digest: str  # the manifest's: what containerd lists for the ref
    packed_bytes: int  # the archive (compressed layers)
    unpacked_bytes: int  # the layers' tars
    seconds: float
    cached: bool


def build_image(img: Image) -> Built:
    """The image's archive, from cached stages where their keys match."""
    t0 = time.monotonic()
    archives = cache() / "archives"
    stem = f"{img.name}-{img.key[:20]}"
    record, archive = archives / f"{stem}.json", archives / f"{stem}.tar"
    if record.exists() and archive.exists():
        meta = json.loads(record.read_text())
        return Built(img.name, img.ref, archive, meta["digest"], meta["packed_bytes"],
                     meta["unpacked_bytes"], time.monotonic() - t0, True)
    top = realize(img.top)
    archives.mkdir(parents=True, exist_ok=True)
    with _work() as work:
        layout = work / "layout"
        copy_layout(top, layout)
        _run(["umoci", "config", "--image", f"{layout}:img", *config_flags(img.config)])
        tmp = archive.with_name(archive.name + ".partial")
        manifest, packed = write_archive(layout, img.ref, tmp)
    unpacked = sum(json.loads((s.dir / DONE).read_text())["layer_bytes"] for s in img.top.chain())
    _prune(archives, img.name, stem)
    tmp.rename(archive)
    meta = {"ref": img.ref, "digest": manifest, "packed_bytes": packed, "unpacked_bytes": unpacked}
    record.write_text(json.dumps(meta, indent=1) + "\n")
    return Built(img.name, img.ref, archive, manifest, packed, unpacked, time.monotonic() - t0, False)


@contextmanager
def _lock() -> Iterator[None]:
    """One build at a time per cache (a second waits)."""
    cache().mkdir(parents=True, exist_ok=True)
    with open(cache() / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def build(names: Iterable[str] = NAMES) -> dict[str, Built]:
    """Build (or find cached) the named images' archives."""
    wanted = list(names)
    with _lock():
        all_specs = specs()
        unknown = set(wanted) - set(all_specs)
        if unknown:
            raise BuildFailed(f"no image {sorted(unknown)}; there are {', '.join(all_specs)}")
        out = {}
        for name in wanted:
            log.info("%s: %s", name, all_specs[name].ref)
            out[name] = build_image(all_specs[name])
        return out


# ---------------------------------------------------------------------------------------
# containerd


def present_digest(ctr: Sequence[str], ref: str) -> str | None:
    """The manifest digest containerd's k8s.io namespace holds for `ref`, if any."""
    out = _run([*ctr, "-n", "k8s.io", "images", "ls", f"name=={ref}"]).stdout.splitlines()
    for line in out[1:]:
        cols = line.split()
        if len(cols) >= 3 and cols[0] == ref:
            return cols[2]
    return None


def import_images(ctr: Sequence[str], names: Iterable[str] = NAMES) -> list[str]:
    """Import the images into containerd's k8s.io namespace under their refs (unpacked for
    its default snapshotter), building what is missing. An image containerd holds with the
    same digest is skipped. ctr: the command prefix, e.g. ["ctr", "--address", SOCK].
    Returns the refs imported."""
    imported = []
    for b in build(names).values():
        if present_digest(ctr, b.ref) == b.digest:
            log.info("%s: in containerd already (%s)", b.ref, b.digest[:19])
            continue
        t0 = time.monotonic()
        _run([*ctr, "-n", "k8s.io", "images", "import", b.archive])
        log.info("%s: imported in %.1f s", b.ref, time.monotonic() - t0)
        imported.append(b.ref)
    return imported


# ---------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hanzo_stream.kube.images",
                                 description="Images for the local Kubernetes, built without a registry.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the images' OCI archives (cached)")
    b.add_argument("--only", choices=[*NAMES, *ON_DEMAND], action="append",
                   help="just this image (repeatable)")
    sub.add_parser("refs", help="print the images' references as JSON")
    args = ap.parse_args(argv)
    if args.cmd == "refs":
        print(json.dumps(refs(), indent=1))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        built = build(args.only or NAMES)
    except BuildFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for r in built.values():
        print(f"{r.name:13} {r.ref:50} {'cached' if r.cached else 'built '} {r.seconds:7.1f} s"
              f"  packed {_size(r.packed_bytes)}, unpacked {_size(r.unpacked_bytes)}  {r.archive}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
