"""The quorum's decisions (hanzo_stream/pods/quorum.py) over what real brokers answered
(tests/unit/data/quorum/, recorded from Kafka 4.4.0 by record.py there): the three shapes of
DescribeQuorum read alike, the join sidecar's actions and the roller's check. The join
sidecar's own sh is held to the same answers in test_infra_growth.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanzo_stream.pods.quorum import (
    ADD,
    FOLLOWER,
    LEADER,
    MAX_LAG,
    OBSERVER,
    READY,
    REMOVE,
    WAIT,
    Describe,
    QuorumParseError,
    Replica,
    from_admin,
    kafka_uuid,
    parse_replication,
    parse_status,
    quorum_verdict,
)

DATA = Path(__file__).parent / "data" / "quorum"


@dataclass(frozen=True)
class Recorded:
    name: str
    note: str
    directories: dict[int, str]  # node id -> the directory.id of its meta.properties
    running: tuple[int, ...]
    replication: str | None  # None: the call failed (then <what>.failed.txt says how)
    status: str | None
    admin: dict | None


@cache
def recorded(name: str) -> Recorded:
    d = DATA / name
    scenario = json.loads((d / "scenario.json").read_text())

    def text(f: str) -> str | None:
        return (d / f).read_text() if (d / f).exists() else None
    admin = text("admin.json")
    return Recorded(name, scenario["note"], {int(k): v for k, v in scenario["directories"].items()},
                    tuple(scenario["running"]), text("replication.txt"), text("status.txt"),
                    json.loads(admin) if admin else None)


SCENARIOS = sorted(p.name for p in DATA.iterdir() if (p / "scenario.json").exists())
ANSWERED = [n for n in SCENARIOS if recorded(n).replication is not None]


def test_every_scenario_was_recorded_from_the_pinned_kafka():
    from hanzo_stream.artifacts.versions import KAFKA_VERSION

    assert len(SCENARIOS) == 11 and "majority-stopped" not in ANSWERED
    assert {json.loads((DATA / n / "scenario.json").read_text())["kafka"] for n in SCENARIOS} == {
        KAFKA_VERSION}
    assert KAFKA_VERSION in (DATA / "README.md").read_text()


def key(r: Replica) -> tuple[int, str, str]:
    return r.node, r.directory, r.status


@pytest.mark.parametrize("name", ANSWERED)
def test_the_three_shapes_say_the_same_quorum(name):
    """--replication, --status and the Admin API (read seconds apart): the same leader, the
    same voters and observers with the same directory ids."""
    rec = recorded(name)
    text, status, admin = (parse_replication(rec.replication), parse_status(rec.status),
                           from_admin(rec.admin))
    assert text.leader == status.leader == admin.leader is not None
    assert {key(r) for r in text.replicas} == {key(r) for r in admin.replicas}
    assert {(m.node, m.directory) for m in status.voters} == {
        (r.node, r.directory) for r in text.voters}
    assert {(m.node, m.directory) for m in status.observers} == {
        (r.node, r.directory) for r in text.observers}
    # The tool's order: the leader first, then the other voters, then the observers.
    for q in (text, admin):
        assert q.replicas[0].status == LEADER and q.replicas[0].lag == 0
        kinds = [r.status for r in q.replicas]
        assert kinds == sorted(kinds, key=[LEADER, FOLLOWER, OBSERVER].index)
        assert all(r.lag == q.replicas[0].log_end_offset - r.log_end_offset for r in q.replicas)
    assert status.cluster_id and status.epoch == admin.epoch == 1
    assert all(m.endpoints and m.endpoints[0].startswith("CONTROLLER://127.0.0.1:")
               for m in status.voters)


def test_kafka_python_hands_directory_ids_over_as_uuid_text():
    """What the roller reads must compare with what the tool prints and meta.properties holds."""
    rec = recorded("three-voters")
    raw = {v["replica_id"]: v["replica_directory_id"]
           for v in rec.admin["topics"][0]["partitions"][0]["current_voters"]}
    assert all(len(d) == 36 and d.count("-") == 4 for d in raw.values())
    assert {n: kafka_uuid(d) for n, d in raw.items()} == rec.directories
    assert kafka_uuid(rec.directories[1]) == rec.directories[1]  # Kafka's own text stays


def test_a_table_is_read_by_its_header_tabs_or_spaces():
    real = recorded("follower-stopped").replication
    assert "\t" in real  # the tool pads tab-separated columns
    spaced = "\n".join(" ".join(line.split()) for line in real.splitlines())
    assert parse_replication(spaced) == parse_replication(real)
    stopped = parse_replication(real).replicas[2]
    assert stopped == Replica(3, "xetFbTzcfViKmjK9uYA6DA", 203, 118, FOLLOWER,
                              1796655558914, 1796655558502)
    noisy = "WARN something on stdout\n\n" + real + "\n"
    assert parse_replication(noisy) == parse_replication(real)
    for bad in ("", "Error: no leader\n", real.replace("Lag", "Behind")):
        with pytest.raises(QuorumParseError):
            parse_replication(bad)
    with pytest.raises(QuorumParseError):
        parse_status(real)


def verdict(name: str, node: int, directory: str | None = "", max_lag: int = MAX_LAG):
    rec = recorded(name)
    q = parse_replication(rec.replication)
    return quorum_verdict(q, node, rec.directories[node] if directory == "" else directory,
                          max_lag)


# --- the join sidecar's decisions -------------------------------------------------------


def test_a_founder_and_a_caught_up_voter_are_ready():
    assert verdict("single-voter", 1).action == READY
    for n in (1, 2, 3):
        v = verdict("three-voters", n)
        assert (v.action, v.seat, v.lag) == (READY, "voter", 0), v
    assert verdict("follower-back", 3).action == READY


def test_an_observer_that_has_caught_up_is_added():
    for n in (2, 3):
        v = verdict("two-observers", n)
        assert (v.action, v.seat, v.lag) == (ADD, "observer", 0), v
    assert verdict("one-observer", 2).action == READY
    assert verdict("one-observer", 3).action == ADD
    assert verdict("two-observers", 3, max_lag=-1).action == WAIT  # not caught up: waits


def test_a_voter_behind_the_leader_is_not_ready():
    v = verdict("follower-stopped", 3)
    assert (v.action, v.seat, v.lag) == (WAIT, "behind", 118)
    assert v.why == "node 3 is a voter 118 records behind: catching up"


def test_a_lost_volumes_seat_is_removed_once_the_new_one_caught_up_then_it_is_added():
    """The whole KIP-853 replacement of a lost disk, as the leader reported each step."""
    old, new = recorded("follower-back").directories[3], recorded("lost-volume").directories[3]
    assert old != new
    v = verdict("lost-volume", 3)
    assert (v.action, v.seat, v.old_directory, v.lag) == (REMOVE, "stale", old, 0)
    assert verdict("lost-volume", 3, max_lag=-1).action == WAIT  # the new volume catches up first
    assert verdict("old-seat-removed", 3).action == ADD
    assert verdict("new-seat-added", 3).action == READY


def test_the_ghost_row_of_a_removed_seat_decides_nothing():
    """After remove-controller the leader still lists the old directory as an observer of
    node 3, silent, its lag growing past max_lag (108), for up to 5 minutes; the observer row
    of the pod's own directory is the one that counts. (The join script's awk read the last
    Observer row of its node id whatever its directory, and so waited out the ghost.)"""
    q = parse_replication(recorded("old-seat-removed").replication)
    node3 = [(r.directory, r.lag, r.status) for r in q.replicas if r.node == 3]
    new = recorded("old-seat-removed").directories[3]
    assert node3 == [(new, 0, OBSERVER), ("xetFbTzcfViKmjK9uYA6DA", 108, OBSERVER)]
    v = verdict("old-seat-removed", 3)
    assert (v.action, v.lag) == (ADD, 0)


def test_only_this_node_ids_rows_decide_its_action():
    v = verdict("lost-volume", 2)
    assert v.action == READY  # node 3's two rows are node 3's business
    absent = quorum_verdict(parse_replication(recorded("single-voter").replication), 2, "x")
    assert (absent.action, absent.seat) == (WAIT, "absent")


# --- the roller's check -----------------------------------------------------------------


def test_no_controller_restarts_while_another_voter_lags():
    assert all(verdict("three-voters", n).may_restart for n in (1, 2, 3))
    for n in (1, 2):  # node 3 is stopped, 118 records behind: restarting 1 or 2 loses the majority
        v = verdict("follower-stopped", n)
        assert not v.may_restart and [r.node for r in v.lagging] == [3]
        assert v.waiting_for == ("the other controllers to catch up with the leader: "
                                 "node 3 (118 records behind)")
    assert verdict("follower-stopped", 3).may_restart  # its own lag takes no vote away
    assert all(verdict("follower-back", n).may_restart for n in (1, 2, 3))


def test_the_roller_reads_the_admin_api_without_a_directory():
    for name in ANSWERED:
        rec = recorded(name)
        text, admin = parse_replication(rec.replication), from_admin(rec.admin)
        for n in rec.directories:
            a = quorum_verdict(admin, n, None)
            assert a.may_restart == quorum_verdict(text, n, None).may_restart, (name, n)
            if any(r.node == n and r.voter and r.directory == rec.directories[n]
                   for r in admin.replicas):  # its seat is its volume's: the same decision
                assert a.action == quorum_verdict(admin, n, rec.directories[n]).action
    stopped = quorum_verdict(from_admin(recorded("follower-stopped").admin), 1, None)
    assert not stopped.may_restart and stopped.lagging[0].node == 3


def test_a_voter_stopped_seconds_ago_is_still_within_max_lag():
    """The limit of a rule in records: an idle quorum appends about two records a second, so
    a voter stopped 17 s before (its last fetch) is 35 behind and counts as caught up until
    about a minute later. The roller waits for every pod to be Ready first, and a stopped
    broker's pod is not."""
    v = verdict("follower-just-stopped", 1)
    assert v.may_restart and verdict("follower-just-stopped", 3).lag == 35


def test_without_a_leader_nothing_restarts():
    q = parse_replication(recorded("three-voters").replication)
    headless = Describe(tuple(r for r in q.replicas if r.status != LEADER), None)
    v = quorum_verdict(headless, 2, None)
    assert not v.may_restart and v.waiting_for == "the controller quorum to have a leader"
    answer = json.loads(json.dumps(recorded("three-voters").admin))
    answer["topics"][0]["partitions"][0]["leader_id"] = -1
    assert from_admin(answer).leader is None
    answer["topics"][0]["partitions"][0]["error"] = "NOT_LEADER_OR_FOLLOWER"
    with pytest.raises(QuorumParseError, match="NOT_LEADER_OR_FOLLOWER"):
        from_admin(answer)


def test_no_majority_is_no_answer_at_all():
    """Two of three stopped: the tool and the Admin API both time out; the join sidecar and
    the roller read a failed call as "not reachable" and wait."""
    d = DATA / "majority-stopped"
    assert "TimeoutException" in (d / "replication.failed.txt").read_text()
    assert "timed out" in (d / "admin.failed.txt").read_text()


# --- properties -------------------------------------------------------------------------

DIRS = ("dirA", "dirB", "dirC")
rows = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(DIRS),
                          st.sampled_from([0, 1, MAX_LAG - 1, MAX_LAG, MAX_LAG + 1, 5000]),
                          st.sampled_from([FOLLOWER, OBSERVER])), max_size=7)


def describe_of(leader: int | None, table: list[tuple[int, str, int, str]]) -> Describe:
    head = [Replica(leader, "dirL", 9000, 0, LEADER)] if leader is not None else []
    return Describe(tuple(head + [Replica(n, d, 9000 - lag, lag, s) for n, d, lag, s in table
                                  if n != leader]), leader)


@settings(max_examples=300, deadline=None)
@given(leader=st.one_of(st.none(), st.integers(0, 3)), table=rows, node=st.integers(0, 3),
       directory=st.sampled_from(DIRS), max_lag=st.sampled_from([0, MAX_LAG]))
def test_verdict_properties(leader, table, node, directory, max_lag):
    q = describe_of(leader, table)
    v = quorum_verdict(q, node, directory, max_lag)
    mine = [r for r in q.replicas if r.node == node]
    # Safety of the join: never ADD while this node holds any seat (Kafka: DUPLICATE_VOTER),
    # never REMOVE a seat of this directory or of another node, never READY unless a voter
    # with this directory within max_lag.
    if v.action == ADD:
        assert not any(r.voter for r in mine) and v.lag is not None and v.lag <= max_lag
    if v.action == REMOVE:
        assert any(r.voter and r.directory == v.old_directory != directory for r in mine)
        assert not any(r.voter and r.directory == directory for r in mine)
    if v.action == READY:
        assert any(r.voter and r.directory == directory and r.lag <= max_lag for r in mine)
    # Rows of other nodes change nothing of this node's action.
    alone = Describe(tuple(r for r in q.replicas if r.node == node), q.leader)
    assert quorum_verdict(alone, node, directory, max_lag).action == v.action
    # The roller: no restart without a leader or with another voter behind.
    others_behind = [r for r in q.voters if r.node != node and r.lag > max_lag]
    assert v.may_restart == (q.leader is not None and not others_behind)


def test_the_local_cluster_counts_voters_from_describe_status(monkeypatch):
    """hanzo_stream/local/kafka.py quorum_status (scale and add_controller wait on it) reads
    the same parse: the ghost row of a removed seat is an observer, not a voter."""
    from hanzo_stream.local import kafka

    monkeypatch.setattr(kafka, "_quorum_tool",
                        lambda *_a, **_k: recorded("old-seat-removed").status)
    assert kafka.quorum_status(None, "") == {"voters": [1, 2], "observers": [3, 3]}
    monkeypatch.setattr(kafka, "_quorum_tool", lambda *_a, **_k: "no such output\n")
    with pytest.raises(kafka.BrokerFailed, match="describe --status"):
        kafka.quorum_status(None, "")
