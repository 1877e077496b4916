"""A network partition a test can cut and heal, without touching the machine's own network.

A network namespace of the test's own (`ip netns add`, loopback only) gets, for each
`outward` port, a listener on its 127.0.0.1:<port> relayed to the host's 127.0.0.1:<port>
(and for each `inward` port the reverse: a broker started inside is reached from the host by
its usual address). A client
created inside it (`client()`: librdkafka's threads are born in the namespace of the thread
that creates them) reaches the brokers by the very addresses they advertise, through the
relay. `cut()` drops every packet on the namespace's loopback with iptables, inside the
namespace only: the client's connections stay open and go silent, its SYNs and
retransmissions vanish, as when a link fails. `heal()` lets them through again; TCP recovers
the connections that survived. Root only (netns, iptables), as the Kubernetes tests are.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from hanzo_stream.kube import netns

T = TypeVar("T")
DROP = ["OUTPUT", "-o", "lo", "-j", "DROP"]


def _listen(port: int, timeout: float = 90.0) -> socket.socket:
    """A listener on 127.0.0.1:port; a broker just killed may hold the port a while longer
    (its peers' connections closing), so retry until `timeout` (tcp_fin_timeout is 60 s)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_server(("127.0.0.1", port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class Partition:
    """outward: ports the namespace's clients reach on the host; inward: ports of servers
    inside the namespace (a broker started there) that the host reaches."""

    def __init__(self, outward: Iterable[int] = (), inward: Iterable[int] = ()):
        self.ns = netns.Addresses(netns=f"hs-part-{os.getpid()}-{id(self) % 10_000}")
        subprocess.run(["ip", "netns", "add", self.ns.netns], check=True)
        subprocess.run(["ip", "-n", self.ns.netns, "link", "set", "lo", "up"], check=True)
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self.is_cut = False
        for port, into in [(p, False) for p in outward] + [(p, True) for p in inward]:
            bind = lambda p=port: _listen(p)  # noqa: E731
            listener = bind() if into else self.inside(bind)
            self._sockets.append(listener)
            threading.Thread(target=self._accept, args=(listener, port, into), daemon=True).start()

    def inside(self, make: Callable[[], T]) -> T:
        """make() run on a thread that is in the namespace; what it opens stays there."""
        out: list = []

        def run() -> None:
            try:
                with netns.entered(self.ns):
                    out.append(make())
            except BaseException as e:  # handed to the caller
                out.append(e)

        t = threading.Thread(target=run)
        t.start()
        t.join()
        if isinstance(out[0], BaseException):
            raise out[0]
        return out[0]

    def _accept(self, listener: socket.socket, port: int, into: bool) -> None:
        while not self._closing.is_set():
            try:
                near, _ = listener.accept()
            except OSError:
                return
            self._sockets.append(near)
            threading.Thread(target=self._bridge, args=(near, port, into), daemon=True).start()

    def _bridge(self, near: socket.socket, port: int, into: bool) -> None:
        def dial() -> socket.socket:
            return socket.create_connection(("127.0.0.1", port), timeout=10)

        try:
            far = self.inside(dial) if into else dial()
        except OSError:  # a cut link: the far side is unreachable, as a SYN timeout would say
            near.close()
            return
        far.settimeout(None)
        self._sockets.append(far)
        for a, b in ((near, far), (far, near)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _iptables(self, op: str) -> None:
        subprocess.run(["ip", "netns", "exec", self.ns.netns, "iptables", op, *DROP], check=True)

    def cut(self) -> None:
        self._iptables("-I")
        self.is_cut = True

    def heal(self) -> None:
        if self.is_cut:
            self._iptables("-D")
            self.is_cut = False

    def close(self) -> None:
        """Every relayed port free again at once: listeners shut down (close() alone would
        not wake a thread blocked in accept(), which keeps the port), connections reset
        (SO_LINGER 0: no TIME_WAIT left holding a broker's port when it starts again)."""
        self._closing.set()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        for _ in range(20):  # bounded: a thread still inside may keep it busy a moment
            gone = subprocess.run(["ip", "netns", "delete", self.ns.netns], capture_output=True,
                                  text=True)
            if gone.returncode == 0 or not self.ns.path.exists():
                return
            time.sleep(0.5)
        raise RuntimeError(f"network namespace {self.ns.netns} left behind: {gone.stderr}")


@contextlib.contextmanager
def partitionable(outward: Iterable[int] = (), inward: Iterable[int] = ()) -> Iterator[Partition]:
    p = Partition(outward, inward)
    try:
        yield p
    finally:
        p.close()
