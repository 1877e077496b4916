"""The roller (hanzo_stream/pods/roller.py) against a model of the StatefulSet controller and the
quorum: every out-of-date broker restarted once, one at a time, each only when every pod is
Ready (in sync), the active controller last, so a roll elects a leader once."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanzo_stream.pods.roller import Cluster, Pod, Step, next_step, roll

OLD, NEW = "kafka-old", "kafka-new"
T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)


def pod(ordinal: int, revision: str = OLD, ready: bool = True, terminating: bool = False) -> Pod:
    return Pod(f"kafka-{ordinal}", ordinal, f"uid-{ordinal}", revision, ready, terminating)


def pods(*ps: Pod | None, n: int | None = None) -> dict[str, Pod | None]:
    out: dict[str, Pod | None] = {f"kafka-{i}": None for i in range(n or len(ps))}
    out |= {p.name: p for p in ps if p is not None}
    return out


def test_highest_ordinal_first_and_the_active_controller_last():
    three = pods(pod(0), pod(1), pod(2))
    assert next_step(three, NEW, leader=0).pod == pod(2)
    assert next_step(three, NEW, leader=2).pod == pod(1)
    assert next_step(pods(pod(0), pod(1, NEW), pod(2)), NEW, leader=2).pod == pod(0)
    assert next_step(pods(pod(0, NEW), pod(1, NEW), pod(2)), NEW, leader=2).pod == pod(2)
    assert next_step(three, NEW, leader=None).pod == pod(2)  # unknown: by ordinal alone


def test_nothing_goes_while_any_pod_is_missing_not_ready_or_stopping():
    assert next_step(pods(pod(0), pod(2), n=3), NEW, 0) == Step(waiting="kafka-1 to be created")
    assert next_step(pods(pod(0), pod(1, NEW, ready=False), pod(2)), NEW, 0) == Step(
        waiting="kafka-1 to be Ready (in sync)")
    assert next_step(pods(pod(0), pod(1, terminating=True), pod(2)), NEW, 0).waiting
    # An up-to-date pod still catching up holds the roll as much as an old one.
    assert next_step(pods(pod(0), pod(1), pod(2, NEW, ready=False)), NEW, 0).pod is None


def test_done_when_every_pod_is_on_the_new_template_and_back_if_any_was_restarted():
    settling = pods(pod(0, NEW), pod(1, NEW, ready=False), n=3)
    assert next_step(settling, NEW, 0).done  # nothing to roll: an unready pod is not ours
    assert next_step(settling, NEW, 0, settle=True) == Step(waiting="kafka-2 to be created")
    assert next_step(pods(pod(0, NEW), pod(1, NEW)), NEW, 0, settle=True).done
    assert not next_step(pods(pod(0, NEW), pod(1)), NEW, 0).done


def test_a_pod_reads_from_the_api_objects_fields():
    obj = {"metadata": {"name": "kafka-2", "uid": "u2", "creationTimestamp": "2026-11-30T12:00:05Z",
                        "labels": {"controller-revision-hash": "kafka-7d9f"}},
           "status": {"conditions": [{"type": "PodScheduled", "status": "True"},
                                     {"type": "Ready", "status": "False"}]}}
    made = T0 + timedelta(seconds=5)
    assert Pod.of(obj) == Pod("kafka-2", 2, "u2", "kafka-7d9f", False, False, made)
    obj["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    obj["status"]["conditions"][1]["status"] = "True"
    assert Pod.of(obj) == Pod("kafka-2", 2, "u2", "kafka-7d9f", True, True, made)


class Model:
    """The StatefulSet controller (OnDelete: a deleted pod comes back on the update revision),
    the kubelet (a pod stops, then starts not Ready, then is Ready: caught up) and the quorum
    (when the leader stops, a running voter is elected). Each read of the StatefulSet is a tick."""

    def __init__(self, n: int, leader: int, seed: int, stale: set[int] | None = None):
        self.rng = random.Random(seed)
        self.n, self.leader, self.elections = n, leader, 0
        self.generation, self.observed = 2, 1
        self.ticks = 0  # seconds after T0
        self.pods = {i: {"uid": f"u{i}-0", "rev": OLD if stale is None or i in stale else NEW,
                         "phase": "ready", "created": 0} for i in range(n)}
        self.uids = itertools.count(1)
        self.deleted: list[str] = []
        self.unready_at_delete: list[list[str]] = []
        self.leader_at_delete: list[int] = []

    def statefulset(self) -> dict:
        self.observed = self.generation  # the controller sees the template after a tick
        self.ticks += 1
        for i, p in list(self.pods.items()):
            if p["phase"] == "stopping":
                del self.pods[i]
            elif p["phase"] == "starting" and self.rng.random() < 0.5:
                p["phase"] = "ready"
        for i in range(self.n):
            if i not in self.pods and self.rng.random() < 0.7:
                self.pods[i] = {"uid": f"u{i}-{next(self.uids)}", "rev": NEW, "phase": "starting",
                                "created": self.ticks}
        return {"metadata": {"generation": self.generation},
                "spec": {"replicas": self.n},
                "status": {"observedGeneration": self.observed, "updateRevision": NEW}}

    def pod(self, name: str) -> dict | None:
        p = self.pods.get(int(name.rsplit("-", 1)[1]))
        if p is None:
            return None
        meta = {"name": name, "uid": p["uid"], "labels": {"controller-revision-hash": p["rev"]},
                "creationTimestamp": (T0 + timedelta(seconds=p["created"])).isoformat()}
        if p["phase"] == "stopping":
            meta["deletionTimestamp"] = "now"
        return {"metadata": meta, "status": {"conditions": [
            {"type": "Ready", "status": "True" if p["phase"] == "ready" else "False"}]}}

    def delete(self, name: str, uid: str) -> bool:
        i = int(name.rsplit("-", 1)[1])
        assert self.pods[i]["uid"] == uid, "deleted a successor, not the pod that was judged"
        self.unready_at_delete.append([f"kafka-{j}" for j, p in self.pods.items()
                                       if p["phase"] != "ready"])
        self.leader_at_delete.append(self.leader)
        self.deleted.append(name)
        self.pods[i]["phase"] = "stopping"
        if i == self.leader:  # a graceful stop resigns: a running voter wins the election
            self.leader = self.rng.choice([j for j, p in self.pods.items()
                                           if p["phase"] == "ready" and j != i])
            self.elections += 1
        return True

    def cluster(self) -> Cluster:
        return Cluster(self.statefulset, self.pod, self.delete, lambda: self.leader)


@settings(max_examples=60, deadline=None)
@given(n=st.sampled_from([3, 5]), leader=st.integers(0, 4), seed=st.integers(0, 10_000))
def test_a_roll_restarts_each_broker_once_one_at_a_time_and_elects_once(n, leader, seed):
    model = Model(n, leader % n, seed)
    restarted = roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None)
    assert sorted(restarted) == sorted(f"kafka-{i}" for i in range(n)) == sorted(model.deleted)
    assert all(unready == [] for unready in model.unready_at_delete), model.unready_at_delete
    assert restarted[-1] == f"kafka-{leader % n}"  # the leader when the roll began goes last
    assert model.elections == 1
    # It ends when the last one is back: `pulumi up` ends on a cluster in sync.
    assert [(i, p["rev"], p["phase"]) for i, p in sorted(model.pods.items())] == [
        (i, NEW, "ready") for i in range(n)]


def test_only_the_out_of_date_pods_restart():
    model = Model(3, leader=1, seed=7, stale={1, 2})
    assert roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None) == ["kafka-2", "kafka-1"]
    assert roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None) == []  # converged


def test_nothing_restarts_before_the_controller_has_seen_the_new_template():
    model = Model(3, leader=0, seed=1)
    first = model.statefulset
    calls: list[dict] = []

    def lagging() -> dict:
        answer = first()
        if not calls:
            answer["status"]["observedGeneration"] = 1  # the first read: not seen yet
        calls.append(answer)
        return answer
    deleted_before: list[int] = []
    cluster = model.cluster()
    cluster.statefulset = lagging
    real_delete = cluster.delete
    cluster.delete = lambda name, uid: (deleted_before.append(len(calls)), real_delete(name, uid))[1]
    roll(cluster, "kafka", interval=0, sleep=lambda _: None)
    assert deleted_before[0] >= 2


def test_a_roll_that_cannot_go_on_stops_with_what_it_waited_for():
    model = Model(3, leader=0, seed=3)
    model.pods[1].update(phase="starting", rev=NEW)
    model.rng.random = lambda: 0.99  # kafka-1, already new, never becomes Ready
    now = itertools.count(0, 10)
    with pytest.raises(TimeoutError, match=r"still waiting for kafka-1 to be Ready \(in sync\)"):
        roll(model.cluster(), "kafka", interval=0, timeout=60, clock=lambda: next(now),
             sleep=lambda _: None)
    assert model.deleted == []


def test_a_pod_stuck_on_the_old_template_is_restarted_first_not_waited_for():
    """A bad setting left kafka-1 crash-looping; the update that fixes it must not wait for it
    to become Ready, which it never will on the old template."""
    assert next_step(pods(pod(0), pod(1, ready=False), pod(2)), NEW, 0).pod == pod(1, ready=False)
    # Not while it is stopping, nor when another pod is unready too, nor when it is new.
    assert next_step(pods(pod(0), pod(1, ready=False, terminating=True), pod(2)), NEW, 0).waiting
    assert next_step(pods(pod(0, ready=False), pod(1, ready=False), pod(2)), NEW, 0).waiting
    assert next_step(pods(pod(0), pod(1, NEW, ready=False), pod(2)), NEW, 0).waiting
    model = Model(3, leader=0, seed=5)
    model.pods[1]["phase"] = "crashing"  # never Ready on the old template
    restarted = roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None)
    assert restarted[0] == "kafka-1" and restarted[-1] == "kafka-0"
    assert all(p["phase"] == "ready" for p in model.pods.values())


def test_a_pod_replaced_meanwhile_is_judged_again_not_counted():
    model = Model(3, leader=0, seed=9)
    cluster = model.cluster()
    real_delete, gone = cluster.delete, []

    def delete(name: str, uid: str) -> bool:
        if not gone:  # the first delete finds a successor: the uid precondition refuses
            gone.append(name)
            return False
        return real_delete(name, uid)
    cluster.delete = delete
    restarted = roll(cluster, "kafka", interval=0, sleep=lambda _: None)
    assert sorted(restarted) == ["kafka-0", "kafka-1", "kafka-2"] and gone == ["kafka-2"]


def test_a_restart_of_every_broker_takes_each_once_the_leader_last():
    """`--restart-all` (the kafka-restart CronJob's Job): nothing is on an old template, every
    pod started before the restart began goes, one at a time, the leader last."""
    model = Model(3, leader=0, seed=11, stale=set())
    model.ticks = 100
    since = T0 + timedelta(seconds=50)  # after every pod started, before the roll
    restarted = roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None, since=since)
    assert restarted == ["kafka-2", "kafka-1", "kafka-0"] and model.elections == 1
    assert roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None) == []
    assert roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None, since=since) == []
