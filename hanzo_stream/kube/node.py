"""A real single-node Kubernetes on this machine: `hanzo-stream local kube up|down|status`.

Every part is the real program: containerd, runc and the CNI plugins from Debian; etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl and
CoreDNS built from the Go module proxy (build.py); images built here (images.py). All of
it runs in the node's network namespace (netns.py), so the machine's own network, sysctls
and mounts stay as they were:

- kubelet writes six kernel tunables at start (vm.overcommit_memory, kernel.panic, ...).
  It runs in a mount namespace of its own where those /proc/sys files are shadowed by
  files of ours; its root directory is a shared bind mount, so the volumes it mounts
  (secrets, memory emptyDirs) still reach containerd and the containers.
- runc here cannot lower oom_score_adj (no CAP_SYS_RESOURCE): containerd's CRI
  `restrict_oom_score_adj` keeps it from trying, which otherwise fails every pod sandbox.
- kubelet 1.37 refuses cgroup v1 unless told otherwise (`failCgroupV1: false`).
- CoreDNS runs as a process on the node address, which kubelet hands to pods as their
  nameserver; the CNI bridge, kube-proxy's rules and ip_forward live in the namespace.

Volumes: a StorageClass `hanzo-local` (the default) whose PersistentVolumes are directories
under the node's home, provisioned and grown in place by storage.py.

Object storage: an S3-compatible store on the node address (`object_store()`, port
`Addresses.s3_port`), as a cloud offers one beside its clusters: s3proxy with its filesystem
backend (hanzo_stream/local/object_store.py, the local platform's store), data under the
node's home, its key pair generated once into a 0600 file there and handed to s3proxy on its
standard input. Pods reach it as they reach CoreDNS; the host reaches it from inside the
namespace (`netns.entered`). Buckets are made by whoever uses them (`ensure_buckets`), as
with a cloud's store: the deployer makes the ones its stack settings name.

`down` stops everything it started, unmounts what the node mounted, removes the pods'
cgroups and the namespace; `down --purge` also deletes the node's data.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.paths import state_dir
from ..jobs.s3 import S3Access
from ..local.daemon import Daemon
from . import build, netns, pki
from .netns import Addresses

# The tunables kubelet sets at start (pkg/kubelet/cm setupKernelTunables); shadowed, not set.
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
                   "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
STORAGE_CLASS = "hanzo-local"
OBJECT_STORE = "object-store"  # the daemon's name (hanzo_stream.local.object_store.NAME)

# The node's topology labels, as a cloud provider's nodes carry them: the broker pods get the
# zone as their broker.rack (infra/broker.py RACK_ENV).
NODE_LABELS = {"topology.kubernetes.io/zone": "local-a", "topology.kubernetes.io/region": "local"}

IDENTITIES = {
    "admin": pki.Identity("admin", "kubernetes-admin", ("system:masters",)),
    "controller-manager": pki.Identity("controller-manager", "system:kube-controller-manager"),
    "scheduler": pki.Identity("scheduler", "system:kube-scheduler"),
    "kube-proxy": pki.Identity("kube-proxy", "system:kube-proxy"),
    "coredns": pki.Identity("coredns", "hanzo:coredns", ("system:masters",)),
    "storage": pki.Identity("storage", "hanzo:local-storage", ("system:masters",)),
    "apiserver-kubelet": pki.Identity("apiserver-kubelet", "kube-apiserver-kubelet-client",
                                      ("system:masters",)),
}


class NodeFailed(RuntimeError):
    pass


@dataclass
class Node:
    home: Path = field(default_factory=lambda: state_dir() / "kube")
    addr: Addresses = field(default_factory=Addresses)
    bin: Path | None = None  # the built binaries; found (and built if needed) on first use

    # -- where things live -------------------------------------------------------------
    @property
    def pki(self) -> Path:
        return self.home / "pki"

    @property
    def kubelet_dir(self) -> Path:
        return self.home / "kubelet"

    @property
    def volumes(self) -> Path:
        return self.home / "volumes"

    @property
    def run_dir(self) -> Path:
        """containerd's socket: a short path (sun_path has 108 bytes), one per node."""
        return Path("/run") / self.addr.netns

    @property
    def containerd_sock(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def cgroup_root(self) -> str:
        """kubelet's cgroupRoot: each node keeps its pods' cgroups under one of its own, so
        two nodes (a developer's and a test session's) never touch each other's pods."""
        return "/" + self.addr.netns

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig for the host: the API server through 127.0.0.1."""
        return self.home / "kubeconfig"

    @property
    def inner_kubeconfig(self) -> Path:
        """The admin's kubeconfig inside the namespace: the API server at the node address."""
        return self.pki / "admin.kubeconfig"

    @property
    def object_store_home(self) -> Path:
        return self.home / OBJECT_STORE

    @property
    def s3_endpoint(self) -> str:
        """The object store's URL: pods and the node's own clients reach it there."""
        return f"http://{self.addr.node_ip}:{self.addr.s3_port}"

    def _store_credentials(self):
        """The store's key pair: generated on first use, kept 0600 under the node's home."""
        from ..local import credentials

        return credentials.of_home(self.object_store_home)

    def object_store(self) -> S3Access:
        """The object store's endpoint and key pair (S3Access never prints the secret key)."""
        from ..local.credentials import S3_ACCESS_KEY, S3_SECRET_KEY

        creds = self._store_credentials()
        return S3Access(self.s3_endpoint, creds.service(S3_ACCESS_KEY),
                        creds.service(S3_SECRET_KEY))

    def ensure_buckets(self, names: Iterable[str]) -> list[str]:
        """Create the buckets the store does not have yet; returns those it created."""
        wanted = sorted(set(names))
        if not wanted:
            return []
        with netns.entered(self.addr):
            client = self.object_store().client()
            have = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
            made = [b for b in wanted if b not in have]
            for b in made:
                client.create_bucket(Bucket=b)
        return made

    def binary(self, name: str) -> str:
        if self.bin is None:
            self.bin = build.bin_dir()
        return str(self.bin / name)

    def daemon(self, name: str) -> Daemon:
        if name == OBJECT_STORE:  # object_store.start keeps its state in a home of its own
            return Daemon.load(self.object_store_home, name)
        return Daemon.load(self.home, name)

    @property
    def inner_server(self) -> str:
        return f"https://{self.addr.node_ip}:{self.addr.api_port}"

    def ctr(self) -> list[str]:
        return ["ctr", "--address", str(self.containerd_sock), "--namespace", "k8s.io"]

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120,
                input: str | None = None) -> subprocess.CompletedProcess:
        """kubectl as the cluster admin, from the host (through the 127.0.0.1 forwarder)."""
        return subprocess.run([self.binary("kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, check=check, timeout=timeout,
                              input=input)

    # -- up ------------------------------------------------------------------------------
    def up(self, log: Callable[[str], None] = print, timeout: float = 180) -> None:
        t0 = time.monotonic()
        for b in ("nsenter", "unshare", "ip", "socat", "containerd", "runc", "ctr",
                  "iptables", "mount"):
            if shutil.which(b) is None:
                raise NodeFailed(f"`{b}` is not installed: run .ci/install-kube.sh (it installs "
                                 "the local Kubernetes' Debian packages and builds the rest)")
        self.binary("kubelet")  # builds on a cold machine, before anything starts
        self.home.mkdir(parents=True, exist_ok=True)
        netns.create(self.addr)
        self._pki()
        steps = [("etcd", self._etcd), ("kube-apiserver", self._apiserver),
                 ("api-forwarder", self._forwarder),
                 ("kube-controller-manager", self._controller_manager),
                 ("kube-scheduler", self._scheduler), ("containerd", self._containerd),
                 ("images", self._images), ("kubelet", self._kubelet),
                 ("kube-proxy", self._kube_proxy), ("coredns", self._coredns),
                 ("storage", self._storage), (OBJECT_STORE, self._object_store)]
        for name, step in steps:
            t = time.monotonic()
            if name != "images" and self.daemon(name).alive():
                continue  # running: its configuration stays as it started with
            step(timeout)
            log(f"    {name}: ready ({time.monotonic() - t:.1f}s)")
        self._wait(lambda: self._node_ready(), timeout, "node Ready")
        self._wait(lambda: self.kubectl("get", "serviceaccount", "default", check=False)
                   .returncode == 0, timeout, "the default service account")
        log(f"    node {self.addr.node_name} Ready at {self.addr.node_ip} "
            f"({time.monotonic() - t0:.0f}s); KUBECONFIG={self.kubeconfig}")

    def _wait(self, ok: Callable[[], object], timeout: float, what: str,
              daemon: Daemon | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if daemon is not None and not daemon.alive():
                raise NodeFailed(f"{daemon.name} exited; log {daemon.log_file}:\n{daemon.log_tail()}")
            with contextlib.suppress(Exception):
                if ok():
                    return
            time.sleep(0.5)
        tail = f"; log {daemon.log_file}:\n{daemon.log_tail()}" if daemon else ""
        raise NodeFailed(f"timed out after {timeout:.0f}s waiting for {what}{tail}")

    def _spawn(self, name: str, argv: list[str], inside: bool = True) -> Daemon:
        d = self.daemon(name)
        if d.alive():
            return d
        d.spawn([*(netns.run_in(self.addr) if inside else []), *argv])
        return d

    def _get(self, url: str, cert: str = "admin", verify: bool = True) -> bytes:
        """GET inside the namespace (health endpoints listen on the node's addresses).
        verify=False: the component serves a self-signed certificate of its own (the
        controller manager and scheduler make one at start)."""
        import ssl

        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        if not verify:
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.load_cert_chain(self.pki / f"{cert}.crt", self.pki / f"{cert}.key")
        with netns.entered(self.addr), urllib.request.urlopen(url, timeout=3, context=ctx) as r:
            return r.read()

    def _pki(self) -> None:
        d, a = self.pki, self.addr
        pki.ensure_ca(d)
        pki.ensure_signing_key(d)
        pki.issue(d, "apiserver", "kube-apiserver", server=True,
                  dns=("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                       f"kubernetes.default.svc.{a.cluster_domain}", "localhost"),
                  ips=(a.node_ip, a.api_service_ip, "127.0.0.1"))
        pki.issue(d, "kubelet-serving", f"system:node:{a.node_name}", server=True,
                  dns=(a.node_name,), ips=(a.node_ip,))
        pki.issue(d, "kubelet", f"system:node:{a.node_name}", ("system:nodes",))
        for ident in IDENTITIES.values():
            pki.issue(d, ident.stem, ident.user, ident.groups)
            pki.kubeconfig(d, ident, self.inner_server)
        pki.kubeconfig(d, pki.Identity("kubelet", f"system:node:{a.node_name}"), self.inner_server)
        pki.kubeconfig(d, IDENTITIES["admin"], f"https://127.0.0.1:{a.host_api_port}",
                       path=self.kubeconfig)

    def _etcd(self, timeout: float) -> None:
        data = self.home / "etcd"
        d = self._spawn("etcd", [
            self.binary("etcd"), "--name", "hanzo", "--data-dir", str(data),
            "--listen-client-urls", "http://127.0.0.1:2379",
            "--advertise-client-urls", "http://127.0.0.1:2379",
            "--listen-peer-urls", "http://127.0.0.1:2380",
            "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
            "--initial-cluster", "hanzo=http://127.0.0.1:2380",
            "--listen-metrics-urls", "http://127.0.0.1:2381",
            "--quota-backend-bytes", str(2 * 1024**3), "--log-level", "warn"])
        self._wait(lambda: b"true" in self._get("http://127.0.0.1:2381/health"), timeout, "etcd", d)

    def _apiserver(self, timeout: float) -> None:
        p, a = self.pki, self.addr
        d = self._spawn("kube-apiserver", [
            self.binary("kube-apiserver"),
            "--etcd-servers", "http://127.0.0.1:2379",
            "--bind-address", "0.0.0.0", "--secure-port", str(a.api_port),
            "--advertise-address", a.node_ip,
            "--service-cluster-ip-range", a.service_cidr,
            "--tls-cert-file", str(p / "apiserver.crt"), "--tls-private-key-file", str(p / "apiserver.key"),
            "--client-ca-file", str(p / "ca.crt"),
            "--kubelet-client-certificate", str(p / "apiserver-kubelet.crt"),
            "--kubelet-client-key", str(p / "apiserver-kubelet.key"),
            "--kubelet-preferred-address-types", "InternalIP",
            "--service-account-issuer", f"https://kubernetes.default.svc.{a.cluster_domain}",
            "--service-account-key-file", str(p / "sa.pub"),
            "--service-account-signing-key-file", str(p / "sa.key"),
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction",
            "--allow-privileged=true", "--profiling=false"])
        self._wait(lambda: self._get(f"{self.inner_server}/readyz") == b"ok", timeout,
                   "kube-apiserver /readyz", d)

    def _forwarder(self, timeout: float) -> None:
        """127.0.0.1:<host_api_port> on the host -> the API server in the namespace."""
        a = self.addr
        d = self._spawn("api-forwarder", [
            "socat", "-lf", str(self.home / "api-forwarder.socat.log"),
            f"TCP-LISTEN:{a.host_api_port},bind=127.0.0.1,reuseaddr,fork",
            f"EXEC:{' '.join(netns.run_in(a))} socat STDIO TCP\\:{a.node_ip}\\:{a.api_port}"],
            inside=False)
        self._wait(lambda: self.kubectl("get", "--raw", "/readyz", check=False).stdout == "ok",
                   timeout, "the API server through 127.0.0.1", d)

    def _controller_manager(self, timeout: float) -> None:
        p = self.pki
        d = self._spawn("kube-controller-manager", [
            self.binary("kube-controller-manager"),
            "--kubeconfig", str(p / "controller-manager.kubeconfig"),
            "--authentication-kubeconfig", str(p / "controller-manager.kubeconfig"),
            "--authorization-kubeconfig", str(p / "controller-manager.kubeconfig"),
            "--bind-address", "127.0.0.1",
            "--service-account-private-key-file", str(p / "sa.key"),
            "--root-ca-file", str(p / "ca.crt"),
            "--cluster-signing-cert-file", str(p / "ca.crt"),
            "--cluster-signing-key-file", str(p / "ca.key"),
            "--use-service-account-credentials", "--leader-elect=false",
            "--service-cluster-ip-range", self.addr.service_cidr])
        self._wait(lambda: self._get("https://127.0.0.1:10257/healthz", verify=False) == b"ok", timeout,
                   "kube-controller-manager", d)

    def _scheduler(self, timeout: float) -> None:
        p = self.pki
        d = self._spawn("kube-scheduler", [
            self.binary("kube-scheduler"), "--kubeconfig", str(p / "scheduler.kubeconfig"),
            "--authentication-kubeconfig", str(p / "scheduler.kubeconfig"),
            "--authorization-kubeconfig", str(p / "scheduler.kubeconfig"),
            "--bind-address", "127.0.0.1", "--leader-elect=false"])
        self._wait(lambda: self._get("https://127.0.0.1:10259/healthz", verify=False) == b"ok", timeout,
                   "kube-scheduler", d)

    def _containerd(self, timeout: float) -> None:
        from . import images

        base = self.home / "containerd"
        cni = self.home / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-hanzo.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "hanzo", "plugins": [
                {"type": "bridge", "bridge": self.addr.pod_bridge, "isGateway": True,
                 "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": self.addr.pod_cidr}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(cni / "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}, indent=1))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config = base / "config.toml"
        base.mkdir(parents=True, exist_ok=True)
        config.write_text(f"""version = 2
root = "{base / 'root'}"
state = "{base / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.containerd_sock}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni / 'net.d'}"
""")
        d = self._spawn("containerd", ["containerd", "--config", str(config)])
        self._wait(lambda: subprocess.run([*self.ctr(), "version"], capture_output=True)
                   .returncode == 0, timeout, "containerd", d)

    def _images(self, timeout: float) -> None:
        from . import images

        images.import_images(self.ctr()[:3])

    def _kubelet(self, timeout: float) -> None:
        a, p, k = self.addr, self.pki, self.kubelet_dir
        k.mkdir(parents=True, exist_ok=True)
        _shared_bind(k)
        shadow = self.home / "sysctl-shadow"
        shadow.mkdir(exist_ok=True)
        binds = []
        for s in KUBELET_SYSCTLS:
            f = shadow / s.replace("/", "_")
            if not f.exists():
                f.write_text(Path("/proc/sys", s).read_text())
            binds.append(f"mount --bind {f} /proc/sys/{s}")
        (self.home / "resolv.conf").write_text(f"nameserver {a.node_ip}\n")
        _make_cgroup_root(self.cgroup_root)
        config = k / "config.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "failSwapOn": False,
            "cgroupRoot": self.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{self.containerd_sock}",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(p / "ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(p / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(p / "kubelet-serving.key"),
            "clusterDNS": [a.node_ip], "clusterDomain": a.cluster_domain,
            "resolvConf": str(self.home / "resolv.conf"),
            "podLogsDir": str(self.home / "pod-logs"),
            "healthzBindAddress": "127.0.0.1", "readOnlyPort": 0,
            "serializeImagePulls": False, "maxPods": 60,
            # A changed Secret reaches its pods' volumes at their next sync: within 10 s here,
            # not the default minute, so the tests of a certificate change wait less. What they
            # prove holds at any period (tests/integration/test_kube_3_growth.py waits for it).
            "syncFrequency": "10s",
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "200Mi", "nodefs.available": "2%",
                             "imagefs.available": "2%"},
            "protectKernelDefaults": False,
        }, indent=1))
        kubelet = " ".join([
            self.binary("kubelet"), "--config", str(config),
            "--kubeconfig", str(p / "kubelet.kubeconfig"), "--root-dir", str(k),
            "--hostname-override", a.node_name, "--node-ip", a.node_ip,
            "--node-labels", ",".join(f"{key}={value}" for key, value in NODE_LABELS.items())])
        d = self._spawn("kubelet", [
            "unshare", "--mount", "--propagation", "unchanged", "--",
            "/bin/sh", "-ec", "; ".join([*binds, f"exec {kubelet}"])])
        self._wait(lambda: self._get("http://127.0.0.1:10248/healthz") == b"ok", timeout,
                   "kubelet /healthz", d)

    def _node_ready(self) -> bool:
        out = self.kubectl("get", "node", self.addr.node_name, "-o", "json", check=False)
        if out.returncode != 0:
            return False
        conds = json.loads(out.stdout)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def _kube_proxy(self, timeout: float) -> None:
        a = self.addr
        config = self.home / "kube-proxy.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.pki / "kube-proxy.kubeconfig")},
            "mode": "iptables", "clusterCIDR": a.pod_cidr, "hostnameOverride": a.node_name,
            # Leave the kernel's conntrack settings alone: some are not per namespace.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            "metricsBindAddress": "127.0.0.1:10249", "healthzBindAddress": "127.0.0.1:10256",
        }, indent=1))
        d = self._spawn("kube-proxy", [self.binary("kube-proxy"), "--config", str(config)])
        self._wait(lambda: b"lastUpdated" in self._get("http://127.0.0.1:10256/healthz"), timeout,
                   "kube-proxy", d)

    def _coredns(self, timeout: float) -> None:
        a = self.addr
        corefile = self.home / "Corefile"
        corefile.write_text(f""".:53 {{
    bind {a.node_ip}
    errors
    health 127.0.0.1:8080
    ready 127.0.0.1:8181
    kubernetes {a.cluster_domain} in-addr.arpa ip6.arpa {{
        kubeconfig {self.pki / 'coredns.kubeconfig'}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
""")
        d = self._spawn("coredns", [self.binary("coredns"), "-conf", str(corefile)])
        self._wait(lambda: self._get("http://127.0.0.1:8181/ready") == b"OK", timeout, "coredns", d)

    def _storage(self, timeout: float) -> None:
        import sys

        self.volumes.mkdir(parents=True, exist_ok=True)
        d = self._spawn("storage", [
            sys.executable, "-m", "hanzo_stream.kube.storage", "--kubeconfig",
            str(self.pki / "storage.kubeconfig"), "--root", str(self.volumes),
            "--node", self.addr.node_name, "--class", STORAGE_CLASS])
        self._wait(lambda: self.kubectl("get", "storageclass", STORAGE_CLASS, check=False)
                   .returncode == 0, timeout, "the local StorageClass", d)

    def _object_store(self, timeout: float) -> None:
        """s3proxy on the node address: started from a thread inside the namespace, so the
        process is born there and the readiness check (an authenticated S3 request) runs
        where pods would make it."""
        from ..local import object_store

        with netns.entered(self.addr):
            object_store.start(self.object_store_home, self._store_credentials(),
                               port=self.addr.s3_port, host=self.addr.node_ip, timeout=timeout)

    # -- status and down -------------------------------------------------------------
    NAMES = ("etcd", "kube-apiserver", "api-forwarder", "kube-controller-manager",
             "kube-scheduler", "containerd", "kubelet", "kube-proxy", "coredns", "storage",
             OBJECT_STORE)

    def status(self) -> dict:
        return {"netns": netns.exists(self.addr), "kubeconfig": str(self.kubeconfig),
                "components": {n: self.daemon(n).status() for n in self.NAMES}}

    def running(self) -> bool:
        return netns.exists(self.addr) and all(self.daemon(n).alive() for n in self.NAMES)

    def down(self, purge: bool = False, log: Callable[[str], None] = print) -> None:
        """Stop everything, then undo every mount, cgroup and namespace the node made."""
        for n in (OBJECT_STORE, "storage", "coredns", "kube-proxy", "kubelet"):
            self.daemon(n).stop(timeout=20)
        self._kill_containers()
        for n in ("containerd", "kube-scheduler", "kube-controller-manager", "api-forwarder",
                  "kube-apiserver", "etcd"):
            self.daemon(n).stop(timeout=20)
        _kill_marked(str(self.home))
        _unmount_under(self.home)
        _unmount_under(self.run_dir)
        _remove_cgroups(self.cgroup_root)
        netns.delete(self.addr)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if purge:
            shutil.rmtree(self.home, ignore_errors=True)
        log("    local kube: stopped" + (" and purged" if purge else ""))

    def _kill_containers(self) -> None:
        """Every container's processes (kubelet is gone, nothing restarts them), then the shims."""
        for h in _hierarchies():
            for d in _cgroup_dirs(h / self.cgroup_root.lstrip("/")):
                for pid in _procs(d):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        _kill_marked(str(self.containerd_sock))


def _shared_bind(path: Path) -> None:
    """Make `path` a mount point of its own with shared propagation (idempotent)."""
    if not _is_mountpoint(path):
        subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    subprocess.run(["mount", "--make-shared", str(path)], check=True)


def _mountpoints() -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mp = line.split()[4].encode().decode("unicode_escape")
        out.append(mp)
    return out


def _is_mountpoint(path: Path) -> bool:
    return str(path) in _mountpoints()


def _unmount_under(root: Path) -> None:
    """Detach every mount at or below root, deepest first (pods' volumes, rootfs, netns)."""
    prefix = str(root)
    for _ in range(5):
        mps = sorted({m for m in _mountpoints() if m == prefix or m.startswith(prefix + "/")},
                     key=len, reverse=True)
        if not mps:
            return
        for m in mps:
            subprocess.run(["umount", "-l", m], capture_output=True)


def _kill_marked(marker: str) -> None:
    """SIGKILL any process whose command line names `marker` (leftovers of a crashed node)."""
    me = os.getpid()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == me:
            continue
        with contextlib.suppress(OSError):
            if marker in (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                os.kill(int(p.name), signal.SIGKILL)


def _hierarchies() -> list[Path]:
    return [h for h in Path("/sys/fs/cgroup").iterdir() if (h / "cgroup.procs").exists()]


def _make_cgroup_root(root: str) -> None:
    """kubelet refuses a cgroupRoot that does not exist: make it in every hierarchy. cgroup v1's
    cpuset needs its cpus and mems before a child can hold a task: copy the parent's."""
    for h in _hierarchies():
        d = h / root.lstrip("/")
        d.mkdir(exist_ok=True)
        for f in ("cpuset.cpus", "cpuset.mems"):
            if (d / f).exists() and not (d / f).read_text().strip():
                (d / f).write_text((h / f).read_text())


def _cgroup_dirs(top: Path) -> list[Path]:
    """`top` and every cgroup under it, deepest first. Cgroups vanish while they are listed (a
    pod's, as its processes die): os.walk skips a directory gone meanwhile, where Path.glob
    raised FileNotFoundError out of a node's teardown."""
    found = [Path(d) for d, _, _ in os.walk(top)]
    return sorted(found, key=lambda d: len(d.parts), reverse=True)


def _procs(cgroup: Path) -> list[int]:
    try:
        return [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    except OSError:  # gone meanwhile
        return []


def _remove_cgroups(root: str) -> None:
    """The node's cgroup root and everything kubelet made under it, deepest first."""
    for h in _hierarchies():
        for d in _cgroup_dirs(h / root.lstrip("/")):
            with contextlib.suppress(OSError):
                d.rmdir()
