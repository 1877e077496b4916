"""The node's own network namespace: every non-loopback address lives in it, none on the host.

kubelet will not run on a loopback node IP, and this machine's own network must stay as it
was. So the node gets a namespace of its own (`ip netns add`), with its address on an
empty bridge, and every Kubernetes process, container and pod lives behind it. The host
reaches the API server through 127.0.0.1 (a socat forwarder); anything that must talk to
pods by their cluster DNS names runs inside with `ip netns exec` (`hanzo-stream local
kube exec -- ...`), where /etc/netns/<name>/resolv.conf points at the cluster DNS.

`entered()` moves only the calling thread into the namespace (setns(2) is per thread for
network namespaces), so a test or a health check can open sockets there and return.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class Addresses:
    """The node's network plan. All of it exists only inside the namespace."""

    netns: str = "hanzo-kube"
    node_name: str = "hanzo-node"
    node_ip: str = "10.123.0.2"
    node_prefix: int = 24
    bridge: str = "hs-node0"  # holds the node IP; an empty bridge, as a dummy device would
    pod_cidr: str = "10.123.64.0/18"
    pod_bridge: str = "hs-cni0"
    service_cidr: str = "10.123.128.0/20"
    api_service_ip: str = "10.123.128.1"  # the first address of service_cidr: `kubernetes`
    cluster_domain: str = "cluster.local"
    api_port: int = 6443
    host_api_port: int = 16443  # 127.0.0.1 on the host, forwarded to node_ip:api_port
    s3_port: int = 9000  # the node's S3-compatible object store, on node_ip (node.py)

    @property
    def path(self) -> Path:
        return Path("/run/netns") / self.netns

    @property
    def resolv_dir(self) -> Path:
        """iproute2 bind-mounts these files over /etc for `ip netns exec` (ip-netns(8))."""
        return Path("/etc/netns") / self.netns


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip", *(("-n", ns) if ns else ()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def exists(a: Addresses) -> bool:
    return a.path.exists()


def create(a: Addresses) -> None:
    """The namespace with loopback up and the node address on its bridge (idempotent)."""
    if not exists(a):
        _ip("netns", "add", a.netns)
    _ip("link", "set", "lo", "up", ns=a.netns)
    if _ip("link", "show", a.bridge, ns=a.netns, check=False).returncode != 0:
        _ip("link", "add", a.bridge, "type", "bridge", ns=a.netns)
    addr = f"{a.node_ip}/{a.node_prefix}"
    if addr not in _ip("-o", "addr", "show", "dev", a.bridge, ns=a.netns).stdout:
        _ip("addr", "add", addr, "dev", a.bridge, ns=a.netns)
    _ip("link", "set", a.bridge, "up", ns=a.netns)
    # Service addresses need a route for the node's own clients (kube-proxy rewrites them
    # after routing, in OUTPUT); pods reach them through their gateway already.
    if a.service_cidr not in _ip("route", "show", ns=a.netns).stdout:
        _ip("route", "add", a.service_cidr, "dev", a.bridge, ns=a.netns)
    a.resolv_dir.mkdir(parents=True, exist_ok=True)
    (a.resolv_dir / "resolv.conf").write_text(
        f"# hanzo-stream local kube: the cluster DNS\nnameserver {a.node_ip}\n"
        f"search default.svc.{a.cluster_domain} svc.{a.cluster_domain} {a.cluster_domain}\n"
        "options ndots:5\n")


def delete(a: Addresses) -> None:
    with contextlib.suppress(FileNotFoundError):
        (a.resolv_dir / "resolv.conf").unlink()
    with contextlib.suppress(OSError):
        a.resolv_dir.rmdir()
    if exists(a):
        _ip("netns", "delete", a.netns, check=False)


def run_in(a: Addresses) -> list[str]:
    """The prefix that runs a daemon in the namespace but nowhere else (not in a new mount
    namespace, as `ip netns exec` would: kubelet's mounts must reach containerd)."""
    return ["nsenter", f"--net={a.path}", "--"]


def exec_in(a: Addresses) -> list[str]:
    """The prefix for a client: `ip netns exec`, which also gives it the cluster's resolv.conf."""
    return ["ip", "netns", "exec", a.netns]


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextlib.contextmanager
def entered(a: Addresses) -> Iterator[None]:
    """Run the block with this thread in the node's namespace; sockets opened inside stay
    there after it returns."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(a.path, os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)
