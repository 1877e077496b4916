"""The roller (hanzo_stream/pods/roller.py) against a model of the StatefulSet controller and the
quorum: every out-of-date broker restarted once, one at a time, each only when every pod is
Ready (in sync) and every other voter has caught up with the quorum's leader, the active
controller last, so a roll elects a leader once."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanzo_stream.pods.quorum import FOLLOWER, LEADER, MAX_LAG, Describe, Replica
from hanzo_stream.pods.roller import Cluster, Pod, Step, next_step, pick, roll

OLD, NEW = "kafka-old", "kafka-new"
T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)


def pod(ordinal: int, revision: str = OLD, ready: bool = True, terminating: bool = False) -> Pod:
    return Pod(f"kafka-{ordinal}", ordinal, f"uid-{ordinal}", revision, ready, terminating)


def pods(*ps: Pod | None, n: int | None = None) -> dict[str, Pod | None]:
    out: dict[str, Pod | None] = {f"kafka-{i}": None for i in range(n or len(ps))}
    out |= {p.name: p for p in ps if p is not None}
    return out


def quorum(leader: int | None, n: int = 3, lags: dict[int, int] | None = None) -> Describe:
    """DescribeQuorum of n voters (node id = ordinal), each `lags` records behind (default 0)."""
    lag = lags or {}
    return Describe(tuple(Replica(i, f"dir{i}", 5000 - lag.get(i, 0), lag.get(i, 0),
                                  LEADER if i == leader else FOLLOWER)
                          for i in sorted(range(n), key=lambda i: i != leader)), leader)


def test_highest_ordinal_first_and_the_active_controller_last():
    three = pods(pod(0), pod(1), pod(2))
    assert next_step(three, NEW, quorum(0)).pod == pod(2)
    assert next_step(three, NEW, quorum(2)).pod == pod(1)
    assert next_step(pods(pod(0), pod(1, NEW), pod(2)), NEW, quorum(2)).pod == pod(0)
    assert next_step(pods(pod(0, NEW), pod(1, NEW), pod(2)), NEW, quorum(2)).pod == pod(2)
    assert pick(three, NEW, leader=None).pod == pod(2)  # the leader unknown: by ordinal alone


def test_nothing_goes_while_any_pod_is_missing_not_ready_or_stopping():
    q = quorum(0)
    assert next_step(pods(pod(0), pod(2), n=3), NEW, q) == Step(waiting="kafka-1 to be created")
    assert next_step(pods(pod(0), pod(1, NEW, ready=False), pod(2)), NEW, q) == Step(
        waiting="kafka-1 to be Ready (in sync)")
    assert next_step(pods(pod(0), pod(1, terminating=True), pod(2)), NEW, q).waiting
    # An up-to-date pod still catching up holds the roll as much as an old one.
    assert next_step(pods(pod(0), pod(1), pod(2, NEW, ready=False)), NEW, q).pod is None


def test_nothing_goes_while_another_voter_lags_or_the_quorum_cannot_say():
    """Every broker is a controller: with one voter behind, restarting another leaves no
    caught-up majority. The voter that lags may itself go (it takes no vote away)."""
    three = pods(pod(0), pod(1), pod(2))
    behind = quorum(0, lags={1: MAX_LAG + 1})
    assert next_step(three, NEW, behind) == Step(waiting=(
        f"the other controllers to catch up with the leader: node 1 ({MAX_LAG + 1} records behind)"))
    assert next_step(three, NEW, quorum(0, lags={1: MAX_LAG})).pod == pod(2)  # within max_lag
    assert next_step(pods(pod(0), pod(1), pod(2, NEW)), NEW, behind).pod == pod(1)
    assert next_step(three, NEW, behind, max_lag=MAX_LAG + 1).pod == pod(2)
    assert next_step(three, NEW, None) == Step(waiting="the controller quorum to answer DescribeQuorum")
    assert next_step(three, NEW, quorum(None)) == Step(
        waiting="the controller quorum to have a leader")
    # Nothing to do is done, whatever the quorum says.
    assert next_step(pods(pod(0, NEW), pod(1, NEW), pod(2, NEW)), NEW, None).done


def test_done_when_every_pod_is_on_the_new_template_and_back_if_any_was_restarted():
    settling = pods(pod(0, NEW), pod(1, NEW, ready=False), n=3)
    q = quorum(0)
    assert next_step(settling, NEW, q).done  # nothing to roll: an unready pod is not ours
    assert next_step(settling, NEW, q, settle=True) == Step(waiting="kafka-2 to be created")
    assert next_step(pods(pod(0, NEW), pod(1, NEW)), NEW, q, settle=True).done
    assert not next_step(pods(pod(0, NEW), pod(1)), NEW, q).done


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
    the kubelet (a pod stops, then starts not Ready, then is Ready: caught up) and the quorum:
    every pod's voter, `lag` records behind the leader. A stopped voter falls behind, a
    starting one replays and its pod is Ready only once within MAX_LAG (the join sidecar's
    readiness); a Ready voter may fall behind and stay Ready (`hiccups`: the chance per tick;
    the sidecar marks the pod ready once). When the leader stops there is none until the next
    tick, when a caught-up running voter is elected. DescribeQuorum fails with the chance
    `mute`. Each read of the StatefulSet is a tick."""

    def __init__(self, n: int, leader: int, seed: int, stale: set[int] | None = None,
                 hiccups: float = 0.0, mute: float = 0.0):
        self.rng = random.Random(seed)
        self.n, self.leader, self.elections = n, leader, 0
        self.hiccups, self.mute = hiccups, mute
        self.generation, self.observed = 2, 1
        self.ticks = 0  # seconds after T0
        self.pods = {i: {"uid": f"u{i}-0", "rev": OLD if stale is None or i in stale else NEW,
                         "phase": "ready", "created": 0} for i in range(n)}
        self.lag = dict.fromkeys(range(n), 0)
        self.behind_until: dict[int, int] = {}  # node -> the tick until which it stays behind
        self.uids = itertools.count(1)
        self.deleted: list[str] = []
        self.deleted_at: list[int] = []
        self.unready_at_delete: list[list[str]] = []
        self.lagging_at_delete: list[list[int]] = []
        self.leader_at_delete: list[int | None] = []

    def statefulset(self) -> dict:
        self.observed = self.generation  # the controller sees the template after a tick
        self.ticks += 1
        for i in range(self.n):
            p = self.pods.get(i)
            phase = p["phase"] if p else "absent"
            if i == self.leader:  # the leader is never behind itself
                self.lag[i] = 0
            elif self.behind_until.get(i, 0) > self.ticks:
                self.lag[i] = max(self.lag[i], 5000)
            elif phase in ("absent", "stopping", "crashing"):  # not fetching
                self.lag[i] += self.rng.randint(20, 80)
            elif phase == "starting":  # replaying the log
                self.lag[i] = max(0, self.lag[i] - self.rng.randint(50, 400))
            elif self.lag[i] and self.rng.random() < 0.5:
                self.lag[i] = 0  # caught up again
            elif self.rng.random() < self.hiccups:
                self.lag[i] = self.rng.randint(MAX_LAG + 1, 3000)  # a slow disk, a GC pause
        for i, p in list(self.pods.items()):
            if p["phase"] == "stopping":
                del self.pods[i]
            elif p["phase"] == "starting" and self.lag[i] <= MAX_LAG and self.rng.random() < 0.5:
                p["phase"] = "ready"
        for i in range(self.n):
            if i not in self.pods and self.rng.random() < 0.7:
                self.pods[i] = {"uid": f"u{i}-{next(self.uids)}", "rev": NEW, "phase": "starting",
                                "created": self.ticks}
        if self.leader is None:  # an election: a running voter that has the whole log
            able = [j for j, p in self.pods.items() if p["phase"] == "ready" and self.lag[j] == 0]
            if able:
                self.leader = self.rng.choice(able)
                self.lag[self.leader] = 0
                self.elections += 1
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

    def quorum(self) -> Describe | None:
        """DescribeQuorum as the leader answers it; None: the call failed."""
        if self.mute and self.rng.random() < self.mute:
            return None
        lags = {i: 0 if i == self.leader else lag for i, lag in self.lag.items()}
        return quorum(self.leader, self.n, lags)

    def delete(self, name: str, uid: str) -> bool:
        i = int(name.rsplit("-", 1)[1])
        assert self.pods[i]["uid"] == uid, "deleted a successor, not the pod that was judged"
        self.unready_at_delete.append([f"kafka-{j}" for j, p in self.pods.items()
                                       if p["phase"] != "ready"])
        self.lagging_at_delete.append([j for j in range(self.n)
                                       if j != i and j != self.leader and self.lag[j] > MAX_LAG])
        self.leader_at_delete.append(self.leader)
        self.deleted.append(name)
        self.deleted_at.append(self.ticks)
        self.pods[i]["phase"] = "stopping"
        if i == self.leader:  # a graceful stop resigns: the others elect (next tick)
            self.leader = None
        return True

    def cluster(self) -> Cluster:
        return Cluster(self.statefulset, self.pod, self.delete, self.quorum)


def bounded(rounds: int = 20_000):
    """A clock for roll() that counts its rounds: a roll that never ends fails, not hangs."""
    return {"clock": itertools.count().__next__, "timeout": rounds}


@settings(max_examples=80, deadline=None)
@given(n=st.sampled_from([3, 5]), leader=st.integers(0, 4), seed=st.integers(0, 10_000),
       hiccups=st.sampled_from([0.0, 0.05, 0.3]), mute=st.sampled_from([0.0, 0.3]))
def test_a_roll_restarts_each_broker_once_one_at_a_time_and_elects_once(n, leader, seed,
                                                                        hiccups, mute):
    model = Model(n, leader % n, seed, hiccups=hiccups, mute=mute)
    restarted = roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None, **bounded())
    assert sorted(restarted) == sorted(f"kafka-{i}" for i in range(n)) == sorted(model.deleted)
    assert all(unready == [] for unready in model.unready_at_delete), model.unready_at_delete
    # No controller went while another voter was behind, nor while there was no leader.
    assert all(lagging == [] for lagging in model.lagging_at_delete), model.lagging_at_delete
    assert None not in model.leader_at_delete
    assert restarted[-1] == f"kafka-{leader % n}"  # the leader when the roll began goes last
    assert model.elections == 1
    # It ends when the last one is back: `pulumi up` ends on a cluster in sync.
    assert [(i, p["rev"], p["phase"]) for i, p in sorted(model.pods.items())] == [
        (i, NEW, "ready") for i in range(n)]


def test_a_voter_behind_while_its_pod_is_ready_holds_the_roll_until_it_caught_up(caplog):
    """Every pod Ready, but node 1 replays 5000 records behind (its readiness came before):
    nothing restarts until it has caught up, and the log says who is waited for."""
    model = Model(3, leader=0, seed=2)
    model.lag[1], model.behind_until[1] = 5000, 8
    with caplog.at_level("INFO", logger="hanzo_stream.pods.roller"):
        restarted = roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None, **bounded())
    assert restarted == ["kafka-2", "kafka-1", "kafka-0"]
    assert model.deleted_at[0] >= 8 and model.lagging_at_delete == [[], [], []]
    assert ("waiting for the other controllers to catch up with the leader: node 1 (5000 "
            "records behind)") in caplog.text


def test_a_quorum_that_cannot_be_asked_restarts_nothing():
    model = Model(3, leader=0, seed=4, mute=1.0)
    now = itertools.count(0, 10)
    with pytest.raises(TimeoutError, match="still waiting for the controller quorum to answer "
                                           "DescribeQuorum"):
        roll(model.cluster(), "kafka", interval=0, timeout=60, clock=lambda: next(now),
             sleep=lambda _: None)
    assert model.deleted == []


def test_only_the_out_of_date_pods_restart():
    model = Model(3, leader=1, seed=7, stale={1, 2})
    def again() -> list[str]:
        return roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None, **bounded())
    assert again() == ["kafka-2", "kafka-1"]
    assert again() == []  # converged


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
    roll(cluster, "kafka", interval=0, sleep=lambda _: None, **bounded())
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
    crashing = quorum(0, lags={1: 5000})  # its voter is behind: that does not hold it
    assert next_step(pods(pod(0), pod(1, ready=False), pod(2)), NEW, crashing).pod == pod(
        1, ready=False)
    # Not while it is stopping, nor when another pod is unready too, nor when it is new.
    assert next_step(pods(pod(0), pod(1, ready=False, terminating=True), pod(2)), NEW,
                     crashing).waiting
    assert next_step(pods(pod(0, ready=False), pod(1, ready=False), pod(2)), NEW, crashing).waiting
    assert next_step(pods(pod(0), pod(1, NEW, ready=False), pod(2)), NEW, crashing).waiting
    model = Model(3, leader=0, seed=5)
    model.pods[1]["phase"] = "crashing"  # never Ready on the old template
    restarted = roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None, **bounded())
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
    restarted = roll(cluster, "kafka", interval=0, sleep=lambda _: None, **bounded())
    assert sorted(restarted) == ["kafka-0", "kafka-1", "kafka-2"] and gone == ["kafka-2"]


def test_a_restart_of_every_broker_takes_each_once_the_leader_last():
    """`--restart-all` (the kafka-restart CronJob's Job): nothing is on an old template, every
    pod started before the restart began goes, one at a time, the leader last."""
    model = Model(3, leader=0, seed=11, stale=set())
    model.ticks = 100
    since = T0 + timedelta(seconds=50)  # after every pod started, before the roll
    restarted = roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None, since=since,
                     **bounded())
    assert restarted == ["kafka-2", "kafka-1", "kafka-0"] and model.elections == 1
    assert roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None, **bounded()) == []
    assert roll(model.cluster(), "kafka", interval=0, sleep=lambda _: None, since=since,
                     **bounded()) == []
