"""The roller: restart the brokers whose pods are out of date, one at a time, the active
controller last.

A StatefulSet's RollingUpdate restarts pods in a fixed order (the highest ordinal first).
When the active controller is not the last of them, a roll of three brokers elects a leader
two or three times: each restart of the current leader moves leadership, possibly to a pod
that is still to be restarted. Strimzi's KafkaRoller restarts the active controller last so
a roll costs one election. So a 3+ broker stack's StatefulSet is `OnDelete` and a Job runs
this after every `pulumi up` that changes the pod template (infra/roller.py). Each step:

- wait until the StatefulSet controller has seen the new template, and every pod exists and
  is Ready. Ready means the roll gate's verdict: this broker's replicas are all in their ISR
  (hanzo_stream/pods/roll_gate.py), so a restarted broker counts as back only once caught up;
- pick the next out-of-date pod, highest ordinal first, the active controller last. The
  quorum is asked (DescribeQuorum) just before each pick, since the leader moves, and the pod
  goes only if the quorum has a leader and every other voter is within `max_lag` records of
  it (hanzo_stream/pods/quorum.py, as Strimzi's KafkaQuorumCheck): every broker is a controller,
  and one voter still replaying its log while another restarts leaves no majority. A quorum
  that cannot be asked restarts nothing either;
- delete it, only that very pod (a uid precondition). Its preStop hook holds the broker until
  the gate says no partition would fall under min ISR without it.

One exception to waiting for Ready, as in Strimzi: when the one pod that is not Ready is on
the old template (crash-looping on a setting this very update fixes), it is restarted first.
It serves nothing, and it would never become Ready where it is.

`pulumi up` waits for the Job, so it ends when the roll has ended, and fails if it fails.
With `--restart-all` it restarts every broker the same way (on-call's rolling restart: the
suspended CronJob `kafka-restart` is its template).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .quorum import MAX_LAG, Describe, from_admin, quorum_verdict

log = logging.getLogger("hanzo_stream.pods.roller")
STATEFULSETS, PODS = "apis/apps/v1/statefulsets", "api/v1/pods"


@dataclass(frozen=True)
class Pod:
    name: str
    ordinal: int
    uid: str
    revision: str  # the controller-revision-hash label: the template it was made from
    ready: bool
    terminating: bool
    created: datetime = datetime.min.replace(tzinfo=UTC)

    @classmethod
    def of(cls, obj: Mapping) -> Pod:
        meta = obj["metadata"]
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in obj.get("status", {}).get("conditions", []))
        return cls(meta["name"], int(meta["name"].rsplit("-", 1)[1]), meta["uid"],
                   meta.get("labels", {}).get("controller-revision-hash", ""), ready,
                   bool(meta.get("deletionTimestamp")),
                   datetime.fromisoformat(meta["creationTimestamp"]))


@dataclass(frozen=True)
class Step:
    """What to do now: restart `pod`, or wait (`waiting` says for what); neither: done."""
    pod: Pod | None = None
    waiting: str = ""

    @property
    def done(self) -> bool:
        return self.pod is None and not self.waiting


def outdated(pods: Mapping[str, Pod | None], target: str,
             since: datetime | None = None) -> list[Pod]:
    """The pods not on the `target` template, and with `since`, those started before it too."""
    return [p for p in pods.values() if p is not None
            and (p.revision != target or (since is not None and p.created < since))]


def pick(pods: Mapping[str, Pod | None], target: str, leader: int | None,
         settle: bool = False, since: datetime | None = None) -> Step:
    """The next pod to restart as far as the pods go. `pods`: every pod the StatefulSet should
    have, by name (None: not there now); `target`: the StatefulSet's update revision;
    `leader`: the active controller's node id (None: unknown, then the order is by ordinal
    alone); `settle`: a roll has restarted pods, so it ends only when every pod is back and
    Ready; `since`: a restart of every broker: a pod started before it counts as out of date."""
    stale = outdated(pods, target, since)
    missing = [name for name, p in sorted(pods.items()) if p is None]
    busy = sorted(p.name for p in pods.values() if p is not None and (p.terminating or not p.ready))
    if not stale and not (settle and (missing or busy)):
        return Step()
    if missing:
        return Step(waiting=f"{', '.join(missing)} to be created")
    stuck = [p for p in stale if not p.ready and not p.terminating]
    if len(busy) == 1 and [p.name for p in stuck] == busy:
        # The one unready pod is on the old template (say, crash-looping on a bad setting
        # this update fixes): it serves nothing, and waiting for it would wait forever.
        return Step(stuck[0])
    if busy:
        return Step(waiting=f"{', '.join(busy)} to be Ready (in sync)")
    return Step(min(stale, key=lambda p: (p.ordinal == leader, -p.ordinal)))


def next_step(pods: Mapping[str, Pod | None], target: str, quorum: Describe | None,
              settle: bool = False, since: datetime | None = None,
              max_lag: int = MAX_LAG) -> Step:
    """pick() with the quorum's say: `quorum` is DescribeQuorum's answer (None: it could
    not be asked). The pod picked goes only if the quorum has a leader and no other voter is
    more than `max_lag` records behind it (a pod's node id is its ordinal); the active
    controller goes last."""
    step = pick(pods, target, quorum.leader if quorum else None, settle, since)
    if step.pod is None:
        return step
    if quorum is None:
        return Step(waiting="the controller quorum to answer DescribeQuorum")
    verdict = quorum_verdict(quorum, step.pod.ordinal, None, max_lag)
    return step if verdict.may_restart else Step(waiting=verdict.waiting_for)


@dataclass
class Cluster:
    """What the roll reads and does, as functions: the Kubernetes API and the quorum.
    `delete(name, uid)` is False when that pod was already gone (replaced meanwhile);
    `quorum()` is None when the quorum cannot be asked."""
    statefulset: Callable[[], dict | None]
    pod: Callable[[str], dict | None]
    delete: Callable[[str, str], bool]
    quorum: Callable[[], Describe | None]


def roll(cluster: Cluster, name: str, interval: float = 5.0, timeout: float = 3600.0,
         clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep, since: datetime | None = None,
         max_lag: int = MAX_LAG) -> list[str]:
    """Restart every out-of-date pod of StatefulSet `name` (with `since`, every pod started
    before it too), each only while the other controllers are within `max_lag` records of the
    quorum's leader; the pods restarted, in order."""
    restarted: list[str] = []
    said, deadline = "", clock() + timeout
    while True:
        sts = cluster.statefulset()
        if sts is None:
            raise RuntimeError(f"StatefulSet {name} not found: nothing to roll")
        status, spec = sts.get("status", {}), sts["spec"]
        if status.get("observedGeneration", 0) < sts["metadata"]["generation"]:
            step = Step(waiting="the StatefulSet controller to see the new template")
        else:
            pods = {f"{name}-{i}": cluster.pod(f"{name}-{i}") for i in range(spec["replicas"])}
            seen = {n: Pod.of(p) if p else None for n, p in pods.items()}
            target = status["updateRevision"]
            step = pick(seen, target, None, bool(restarted), since)
            if step.pod is not None:  # the quorum is asked only when a pod is about to go
                step = next_step(seen, target, cluster.quorum(), bool(restarted), since, max_lag)
        if step.done:
            return restarted
        if step.pod is not None:
            log.info("restarting %s (%d of the pods still to restart)", step.pod.name,
                     len(outdated(seen, target, since)))
            if cluster.delete(step.pod.name, step.pod.uid):
                restarted.append(step.pod.name)
            said = ""
            continue
        if step.waiting != said:
            log.info("waiting for %s", step.waiting)
            said = step.waiting
        if clock() > deadline:
            raise TimeoutError(f"the roll of {name} did not finish in {timeout:.0f} s: still "
                               f"waiting for {step.waiting}")
        sleep(interval)


def quorum_reader(connect: Callable[[], Any]) -> Callable[[], Describe | None]:
    """DescribeQuorum, as a Describe (kafka-python: confluent-kafka does not have it); None,
    with a warning, when the quorum cannot be asked: the roll then restarts nothing until it
    can (it asks again every interval, within its timeout)."""
    said = {"now": ""}  # each leader (or failure) is logged once, not every interval

    def tell(level: int, text: str) -> None:
        if text != said["now"]:
            log.log(level, "%s", text)
            said["now"] = text

    def read() -> Describe | None:
        client = None
        try:
            client = connect()
            quorum = from_admin(client.describe_metadata_quorum())
            tell(logging.INFO, "the controller quorum has no leader" if quorum.leader is None
                 else f"the active controller is node {quorum.leader} (epoch {quorum.epoch})")
            return quorum
        except Exception as e:
            tell(logging.WARNING, f"cannot ask the controller quorum: {e}")
            return None
        finally:
            if client is not None:
                client.close()
    return read


def quorum_leader(connect: Callable[[], Any]) -> Callable[[], int | None]:
    """The active controller's node id, from DescribeQuorum; None when there is none or the
    quorum cannot be asked."""
    read = quorum_reader(connect)

    def leader() -> int | None:
        quorum = read()
        return quorum.leader if quorum is not None else None
    return leader


def main(argv: list[str] | None = None) -> int:
    from ..core.connection import Connection
    from . import in_cluster

    ap = argparse.ArgumentParser(prog="python -m hanzo_stream.pods.roller",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--statefulset", default=os.environ.get("STATEFULSET", "kafka"))
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--restart-all", action="store_true",
                    help="restart every broker, not only those on an old template (a restart "
                         "by hand: kubectl create job --from=cronjob/kafka-restart ...)")
    ap.add_argument("--max-lag", type=int, default=MAX_LAG,
                    help="restart a controller only while every other voter is within this "
                         f"many records of the quorum's leader (default {MAX_LAG}, "
                         "hanzo_stream/pods/quorum.py MAX_LAG)")
    a = ap.parse_args(argv)
    since = datetime.now(UTC) if a.restart_all else None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s roller %(message)s")
    logging.getLogger("kafka").setLevel(logging.ERROR)
    kube = in_cluster.api()
    if kube is None:
        raise SystemExit("no service account token: the roller cannot reach the Kubernetes API")

    def connect() -> Any:
        from kafka.admin import KafkaAdminClient
        return KafkaAdminClient(client_id="hanzo-stream-roller",
                                **Connection.from_env().kafka_python())

    def delete(pod: str, uid: str) -> bool:
        try:
            return kube.delete(PODS, pod, uid) is not None
        except urllib.error.HTTPError as e:
            if e.code == 409:  # the uid precondition: a successor stands there now
                log.info("%s was replaced meanwhile: judged again", pod)
                return False
            raise

    cluster = Cluster(
        statefulset=lambda: kube.get(STATEFULSETS, a.statefulset),
        pod=lambda pod: kube.get(PODS, pod), delete=delete, quorum=quorum_reader(connect))
    restarted = roll(cluster, a.statefulset, a.interval, a.timeout, since=since,
                     max_lag=a.max_lag)
    log.info("done: %s", f"restarted {', '.join(restarted)}" if restarted else "nothing to restart")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
