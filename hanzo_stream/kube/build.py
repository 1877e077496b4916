"""Build the local Kubernetes and Pulumi binaries from the Go module proxy, cached by version.

Nothing here is downloaded as a binary: the machines reach no release site and no image
registry. Two Go modules of ours under kube/ name what to build:

- kube/k8s: Kubernetes' own commands (kube-apiserver, kube-controller-manager,
  kube-scheduler, kubelet, kube-proxy, kubectl) from the published k8s.io/kubernetes module,
  whose staging modules are replaced by their published v0.x.y releases, etcd's own server
  at the release of the API server's etcd client (Debian's 3.4 lacks the watch progress
  requests that 1.37's watch lists need), plus a CoreDNS with only the plugins cluster DNS
  uses;
- kube/pulumi: the Pulumi CLI (the `pulumi` command of pkg/v3, built as a `tool`);
- kube/provider: pulumi-resource-kubernetes (the provider's own three-line main; its schema
  is stamped with the release here, as the provider's `go generate` does). A module of its
  own: the provider is built against the pkg/v3 release it requires, whose codegen API the
  CLI's release has since changed.

Plus `pulumi-resource-pulumi-python`, the launcher of Python dynamic providers that the
Pulumi CLI ships beside itself; it comes from the same sdk/v3 module release.

The output directory's name is a hash of everything that decides the binaries (the
modules' go.mod/go.sum/sources, the Go version, the build flags), so a warm machine
builds nothing and a changed pin builds anew. Cold: ~25-30 minutes on 2 cores; the Go
module and build caches (~/go, ~/.cache/go-build) make a rebuild minutes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..artifacts import gotoolchain, versions
from ..core.paths import cache_dir

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "kube"
PROVIDER_CMD = "cmd/pulumi-resource-kubernetes"
PYTHON_LAUNCHER = "pulumi-resource-pulumi-python"


class BuildFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Module:
    """One Go module of ours and the binaries it yields."""

    name: str
    binaries: tuple[str, ...]
    ldflags: tuple[str, ...]
    packages: tuple[str, ...]  # what `go build` is given

    @property
    def dir(self) -> Path:
        return MODULES / self.name


def _k8s_ldflags() -> tuple[str, ...]:
    v = versions.KUBERNETES_VERSION
    major, minor = v.lstrip("v").split(".")[:2]
    out = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        out += [f"-X {pkg}.gitVersion={v}", f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"]
    return tuple(out)


K8S = Module(
    "k8s",
    ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
     "kube-proxy", "kubectl", "coredns"),
    _k8s_ldflags() + (f"-X github.com/coredns/coredns/coremain.GitCommit={versions.COREDNS_VERSION}",),
    ("tool", "./cmd/..."),
)
PULUMI = Module(
    "pulumi",
    ("pulumi", PYTHON_LAUNCHER),
    (f"-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v{versions.PULUMI_VERSION}",),
    ("tool",),
)
PROVIDER = Module(
    "provider",
    ("pulumi-resource-kubernetes",),
    ("-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version="
     f"{versions.PULUMI_KUBERNETES_VERSION}",),
    (f"./{PROVIDER_CMD}",),
)
ALL = (K8S, PULUMI, PROVIDER)


def go() -> str:
    try:
        return gotoolchain.go()
    except (gotoolchain.ToolchainError, OSError) as e:
        raise BuildFailed(f"no Go toolchain of at least {versions.GO_VERSION}: {e}") from e


def _go_env() -> dict[str, str]:
    """GOTOOLCHAIN=local: build with the machine's Go, never fetch another one silently.
    GOGC=400 under a 5 GiB soft limit: the compiler collects garbage a quarter as often
    (measured on k8s.io/api and apimachinery, cold: 15% less CPU, peak 0.46 -> 0.68 GB), and
    the linker's multi-GB heap still stays bounded. A caller's own GOGC/GOMEMLIMIT wins."""
    return {"GOGC": "400", "GOMEMLIMIT": "5GiB", **os.environ,
            "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod -buildvcs=false"}


def _go_version() -> str:
    return subprocess.run([go(), "env", "GOVERSION"], capture_output=True, text=True,
                          check=True).stdout.strip()


def key(m: Module) -> str:
    """Everything that decides the binaries: sources, pins, flags, the Go release."""
    h = hashlib.sha256()
    for p in sorted(m.dir.rglob("*")):
        if p.is_file() and not p.name.endswith("-embed.json"):
            h.update(str(p.relative_to(m.dir)).encode() + b"\0" + p.read_bytes() + b"\0")
    h.update("\0".join(m.ldflags + m.packages).encode())
    h.update(_go_version().encode())
    return h.hexdigest()[:16]


def out_dir(m: Module) -> Path:
    return cache_dir() / "kube" / "bin" / f"{m.name}-{key(m)}"


def _module_dir(mod: Module, path: str) -> Path:
    """Where the Go module cache holds `path` at the version mod's go.mod selects."""
    proc = subprocess.run([go(), "list", "-m", "-f", "{{.Dir}}", path], cwd=mod.dir,
                          env=_go_env(), capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        subprocess.run([go(), "mod", "download", path], cwd=mod.dir, env=_go_env(), check=True)
        proc = subprocess.run([go(), "list", "-m", "-f", "{{.Dir}}", path], cwd=mod.dir,
                              env=_go_env(), capture_output=True, text=True, check=True)
    return Path(proc.stdout.strip())


def stamp_provider_schema(mod: Module = PROVIDER) -> None:
    """What the provider's `go generate` does: its schema.json with the release as the
    package version, and its terraform mapping, both minified, beside our main."""
    src = _module_dir(mod, "github.com/pulumi/pulumi-kubernetes/provider/v4") / PROVIDER_CMD
    dest = mod.dir / PROVIDER_CMD
    schema = json.loads((src / "schema.json").read_text())
    schema["version"] = versions.PULUMI_KUBERNETES_VERSION
    (dest / "schema-embed.json").write_text(json.dumps(schema, separators=(",", ":")))
    mapping = json.loads((src / "terraform-mapping.json").read_text())
    (dest / "terraform-mapping-embed.json").write_text(json.dumps(mapping, separators=(",", ":")))


def build(m: Module, log=print) -> Path:
    """The module's binaries, built unless the cache already has this exact build."""
    dest = out_dir(m)
    if (dest / ".complete").exists():
        return dest
    if m is PROVIDER:
        stamp_provider_schema(m)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"==> go build {m.name}: {', '.join(m.binaries)} (cold: many minutes; cached after)")
    t = time.monotonic()
    cmd = [go(), "build", "-trimpath", "-ldflags", " ".join(("-s", "-w") + m.ldflags),
           "-o", str(partial) + "/", *m.packages]
    proc = subprocess.run(["nice", "-n", "10", *cmd], cwd=m.dir, env=_go_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise BuildFailed(f"go build in {m.dir} failed:\n{proc.stdout[-6000:]}")
    if m is PULUMI:
        launcher = _module_dir(m, "github.com/pulumi/pulumi/sdk/v3") / "python" / "dist" / PYTHON_LAUNCHER
        shutil.copyfile(launcher, partial / PYTHON_LAUNCHER)
        (partial / PYTHON_LAUNCHER).chmod(0o755)
    missing = [b for b in m.binaries if not (partial / b).is_file()]
    if missing:
        raise BuildFailed(f"go build in {m.dir} did not produce {missing}")
    (partial / ".complete").write_text(f"{time.monotonic() - t:.0f}s\n")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    for old in dest.parent.glob(f"{m.name}-*"):  # earlier builds: ~0.5 GB each
        if old != dest:
            shutil.rmtree(old, ignore_errors=True)
    log(f"    {m.name} built in {time.monotonic() - t:.0f}s -> {dest}")
    return dest


def bin_dir() -> Path:
    """One directory with every binary (links into the per-module builds): what goes on PATH.
    One builder at a time: a second caller (the tests, while CI's background build of
    .ci/install-kube.sh runs) waits for the first and then finds everything built."""
    d = cache_dir() / "kube" / "bin" / "current"
    d.mkdir(parents=True, exist_ok=True)
    with open(d.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _link_all(d)


def _link_all(d: Path) -> Path:
    for m in ALL:
        src = build(m)
        for f in src.iterdir():
            if f.name.startswith("."):
                continue
            link = d / f.name
            if link.is_symlink() or link.exists():
                if link.resolve() == f.resolve():
                    continue
                link.unlink()
            link.symlink_to(f)
    return d


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    t = time.monotonic()
    try:
        d = bin_dir()
    except BuildFailed as e:
        print(f"hanzo-stream kube build: {e}", file=sys.stderr)
        return 1
    if "--quiet" not in args:
        print(f"    Kubernetes {versions.KUBERNETES_VERSION}, Pulumi {versions.PULUMI_VERSION}, "
              f"pulumi-kubernetes {versions.PULUMI_KUBERNETES_VERSION}: {d} "
              f"({time.monotonic() - t:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
