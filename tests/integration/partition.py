"""A network partition a test can cut and heal, without touching the machine's own network.

A network namespace of the test's own (`ip netns add`, loopback only) gets, for each port
given, a listener on its 127.0.0.1:<port> relayed to the host's 127.0.0.1:<port>. A client
created inside it (`client()`: librdkafka's threads are born in the namespace of the thread
that creates them) reaches the brokers by the very addresses they advertise, through the
relay. `cut()` drops every packet on the namespace's loopback with iptables, inside the
namespace only: the client's connections stay open and go silent, its SYNs and
retransmissions vanish, as when a link fails. `heal()` lets them through again; TCP recovers
the connections that survived. Root only (netns, iptables), as the Kubernetes tests are.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from hanzo_stream.kube import netns

T = TypeVar("T")
DROP = ["OUTPUT", "-o", "lo", "-j", "DROP"]


class Partition:
    def __init__(self, ports: Iterable[int]):
        self.ns = netns.Addresses(netns=f"hs-part-{os.getpid()}-{id(self) % 10_000}")
        subprocess.run(["ip", "netns", "add", self.ns.netns], check=True)
        subprocess.run(["ip", "-n", self.ns.netns, "link", "set", "lo", "up"], check=True)
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self.is_cut = False
        for port in ports:
            listener = self.inside(lambda p=port: socket.create_server(("127.0.0.1", p)))
            self._sockets.append(listener)
            threading.Thread(target=self._accept, args=(listener, port), daemon=True).start()

    def inside(self, make: Callable[[], T]) -> T:
        """make() run on a thread that is in the namespace; what it opens stays there."""
        out: list = []

        def run() -> None:
            with netns.entered(self.ns):
                try:
                    out.append(make())
                except BaseException as e:  # handed to the caller
                    out.append(e)

        t = threading.Thread(target=run)
        t.start()
        t.join()
        if isinstance(out[0], BaseException):
            raise out[0]
        return out[0]

    def _accept(self, listener: socket.socket, port: int) -> None:
        while not self._closing.is_set():
            try:
                inner, _ = listener.accept()
                outer = socket.create_connection(("127.0.0.1", port), timeout=10)  # host side
            except OSError:
                return
            outer.settimeout(None)
            self._sockets += [inner, outer]
            for a, b in ((inner, outer), (outer, inner)):
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
        self._closing.set()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()
        subprocess.run(["ip", "netns", "delete", self.ns.netns], check=False)


@contextlib.contextmanager
def partitionable(ports: Iterable[int]) -> Iterator[Partition]:
    p = Partition(ports)
    try:
        yield p
    finally:
        p.close()
