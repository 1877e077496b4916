"""The roll gate: may this broker stop now, and is it back in sync?

Kubernetes restarts a StatefulSet's pods one at a time, waiting for each to be Ready, and a
drain asks the PodDisruptionBudget, which counts Ready pods. Neither knows about in-sync
replicas, so a TCP readiness check lets a roll take the next broker while the last one is
still catching up, and acks=all producers see NOT_ENOUGH_REPLICAS. This gate runs as a
native sidecar in every broker pod of a 3+ broker stack (infra/cluster.py) and answers the
two questions Strimzi's KafkaAvailability asks, from the cluster's own metadata:

- in sync (the sidecar's readiness): every partition with a replica on this broker has it in
  its ISR. A restarted broker counts as back only once it has caught up, so the StatefulSet
  does not take the next one, and the PodDisruptionBudget refuses evictions, until then.
- safe to stop (the broker container's preStop hook waits for it): no partition this broker
  is in sync for would fall under its min.insync.replicas without it. Whatever deletes the
  pod (a roll, a drain, `kubectl delete`), the broker stops when that is true or when the
  wait runs out. Partitions whose replication factor is not above their min ISR cannot be
  made safe by waiting, so they never hold a stop.

When the StatefulSet itself is being deleted (`pulumi destroy`, `kubectl delete sts`), every
broker stops together and none can keep another's ISR: a broker held back then only stops
after its peers have taken the quorum with them, and its controlled shutdown waits for a
controller that is gone until the grace period kills it (a 57 s destroy took 340 s). So the
gate reads its StatefulSet from the Kubernetes API (get on that one object, nothing else)
and lets the broker go once the set is being deleted. Even released at once, brokers stopping
a second apart leave the last without a quorum, so the gate also marks the deletion for the
broker's shell, which kills a broker still waiting 30 s after its SIGTERM (infra/broker.py
`supervised`).

Each verdict is a file in a shared emptyDir, rewritten every `interval` seconds; a file
older than a few intervals means the gate is not answering, and the probes read it so.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import in_cluster
from .in_cluster import SA_DIR

log = logging.getLogger("hanzo_stream.pods.roll_gate")
IN_SYNC, SAFE, ALIVE = "in-sync", "safe-to-stop", "alive"  # the files the probes read
EVERYONE_GOES = "everyone-goes"  # the set is being deleted: the broker's shell reads it (infra/broker.py)
RECONNECT_AFTER = 3  # failed metadata reads in a row before the admin client is made anew


@dataclass(frozen=True)
class Partition:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class Verdict:
    in_sync: bool
    safe_to_stop: bool
    behind: tuple[str, ...] = ()  # partitions with a replica here that is out of the ISR
    holding: tuple[str, ...] = ()  # partitions that would fall under min ISR without it
    everyone_goes: bool = False  # the StatefulSet is being deleted: holding helps no one

    def describe(self) -> str:
        def some(names: tuple[str, ...]) -> str:
            return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        parts = ["in sync" if self.in_sync else f"behind on {some(self.behind)}" if self.behind
                 else "not known to be in sync",
                 "safe to stop: the StatefulSet is being deleted, every broker stops"
                 if self.everyone_goes else "safe to stop" if self.safe_to_stop
                 else f"must not stop: {some(self.holding)} would fall under min ISR"]
        return "; ".join(parts)


def judge(broker: int, partitions: Iterable[Partition], min_isr: Mapping[str, int],
          default_min_isr: int = 1) -> Verdict:
    behind: list[str] = []
    holding: list[str] = []
    for p in partitions:
        if broker not in p.replicas:
            continue
        name = f"{p.topic}-{p.partition}"
        if broker not in p.isr:
            behind.append(name)
            continue
        need = min_isr.get(p.topic, default_min_isr)
        if len(p.replicas) > need and len(p.isr) - 1 < need:
            holding.append(name)
    return Verdict(not behind, not holding, tuple(sorted(behind)), tuple(sorted(holding)))


def observe(admin, timeout: float = 10.0) -> list[Partition]:
    """Every partition with its replicas and ISR, from one Metadata request."""
    md = admin.list_topics(timeout=timeout)
    return [Partition(t, i, tuple(p.replicas), tuple(p.isrs))
            for t, tm in md.topics.items() if tm.error is None
            for i, p in tm.partitions.items()]


def topic_min_isr(admin, topics: Iterable[str], timeout: float = 30.0) -> dict[str, int]:
    """min.insync.replicas of each topic (its own or the broker default it inherits)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    out: dict[str, int] = {}
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in sorted(topics)]
    if not resources:  # a broker with no replicas yet (just added): the client refuses []
        return out
    futures = admin.describe_configs(resources)
    for res, fut in futures.items():
        entry = fut.result(timeout=timeout).get("min.insync.replicas")
        if entry is not None and entry.value is not None:
            out[res.name] = int(entry.value)
    return out


def being_deleted(statefulset: dict | None) -> bool:
    """The StatefulSet is gone (a background delete) or has a deletionTimestamp (a foreground
    delete, Pulumi's default: it stays until its pods are gone)."""
    return statefulset is None or bool(statefulset["metadata"].get("deletionTimestamp"))


def statefulset_reader(name: str, sa_dir: Path = SA_DIR,
                       environ: Mapping[str, str] = os.environ) -> Callable[[], dict | None] | None:
    """GET this pod's StatefulSet with the pod's service account (None: 404); None when the
    pod has no token (a stack without the gate's Role)."""
    kube = in_cluster.api(sa_dir, environ)
    if kube is None:
        return None
    return lambda: kube.get("apis/apps/v1/statefulsets", name)


def _write(path: Path, on: bool, text: str) -> None:
    if on:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(path)  # a fresh mtime is what the probes trust
    else:
        path.unlink(missing_ok=True)


def run(broker: int, state_dir: Path, admin, interval: float = 5.0,
        rounds: int | None = None, min_isr_every: float = 60.0,
        statefulset: Callable[[], dict | None] | None = None,
        connect: Callable[[], Any] | None = None) -> None:
    """The sidecar's loop; `rounds` bounds it (tests), None runs until SIGTERM. Each round reads
    `statefulset` (see statefulset_reader) before the cluster; while it holds a stop it asks
    again every second. After RECONNECT_AFTER failed reads in a row `connect` makes a new
    admin client: a client reads ca.crt once, and after a CA rollover's new certificate only
    a new one trusts the brokers (this sidecar is not restarted with the clients)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    stop = {"now": False}
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    min_isr: dict[str, int] = {}
    fetched_at = float("-inf")
    said, n, deleted, failed = "", 0, False, 0
    while not stop["now"] and (rounds is None or n < rounds):
        n += 1
        # The StatefulSet first: while the others stop, reading the cluster's metadata can
        # take seconds, and a release that late finds the quorum gone (CI: a 341 s destroy).
        unread = ""
        if statefulset is not None and not deleted:
            try:  # once deleted, always deleted: nothing brings a StatefulSet back
                deleted = being_deleted(statefulset())
            except Exception as e:
                unread = f"; cannot read the StatefulSet: {e}"
        if deleted:  # released now, before the metadata read below
            _write(state_dir / SAFE, True, Verdict(False, True, everyone_goes=True).describe())
            _write(state_dir / EVERYONE_GOES, True, "the StatefulSet is being deleted")
        try:
            parts = observe(admin)
            hosted = {p.topic for p in parts if broker in p.replicas}
            # Refreshed every minute, and at once for a topic this broker has just got.
            if time.monotonic() - fetched_at > min_isr_every or not hosted <= min_isr.keys():
                min_isr = topic_min_isr(admin, hosted)
                fetched_at = time.monotonic()
            verdict = judge(broker, parts, min_isr)
            now, failed = verdict.describe(), 0
        except Exception as e:  # unknown is neither in sync nor safe; say why and keep asking
            verdict = Verdict(False, False)
            now = f"cannot read the cluster's metadata: {e}"
            failed += 1
            if connect is not None and failed >= RECONNECT_AFTER:
                admin, failed = connect(), 0
        if deleted:
            verdict = replace(verdict, safe_to_stop=True, holding=(), everyone_goes=True)
            now = verdict.describe()
        elif not verdict.safe_to_stop:
            now += unread
        _write(state_dir / IN_SYNC, verdict.in_sync, now)
        _write(state_dir / SAFE, verdict.safe_to_stop, now)
        _write(state_dir / ALIVE, True, now)
        if now != said:
            log.info("broker %d: %s", broker, now)
            said = now
        if rounds is None or n < rounds:
            time.sleep(interval if verdict.safe_to_stop else min(interval, 1.0))
    signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    from confluent_kafka.admin import AdminClient

    from ..core.connection import Connection, pod_ordinal

    ap = argparse.ArgumentParser(prog="python -m hanzo_stream.pods.roll_gate",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--broker", type=int,
                    help="this broker's node id (default: the pod's ordinal, from HOSTNAME)")
    ap.add_argument("--dir", type=Path, default=Path("/gate"), help="where the verdicts go")
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, help="stop after this many rounds (default: never)")
    ap.add_argument("--statefulset", default=os.environ.get("STATEFULSET"),
                    help="this broker's StatefulSet, read while a stop is held (default: "
                         "$STATEFULSET; none: never read)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s roll-gate %(message)s")
    broker = a.broker if a.broker is not None else pod_ordinal()
    def connect() -> AdminClient:  # reads ca.crt as it is now
        return AdminClient(Connection.from_env().confluent())

    reader = statefulset_reader(a.statefulset) if a.statefulset else None
    if a.statefulset and reader is None:
        log.warning("no service account token: a deleted StatefulSet cannot release a held stop")
    run(broker, a.dir, connect(), a.interval, a.rounds, statefulset=reader, connect=connect)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
