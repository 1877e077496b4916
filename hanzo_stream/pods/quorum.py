"""The controller quorum's safety decisions: may this node join, is it back, may it restart.

Every broker is a KRaft voter (combined mode), so restarting one takes a controller away,
and a quorum of three with one voter still replaying its log and another restarting has no
majority: no metadata change commits, no partition leader moves. Strimzi's KafkaQuorumCheck
asks the same before its roller takes a controller. The facts are DescribeQuorum's, in one
of three shapes: the replication table and the Admin API's answer read into one `Describe`,
the status (which has no lag) into a `Status`:

- `kafka-metadata-quorum describe --replication` (parse_replication): what the join
  sidecar reads (infra/broker.py join_script);
- `describe --status` (parse_status): voters and observers with their directory ids, no
  lag; what the local cluster reads (hanzo_stream/local/kafka.py quorum_status);
- the Admin API's DescribeQuorum answer as kafka-python returns it (from_admin): what the
  roller reads (hanzo_stream/pods/roller.py).

`quorum_verdict(describe, node, directory, max_lag)` decides, for `node` whose metadata log
directory id is `directory`: the join sidecar's next action (READY: a voter with this
directory that has caught up; ADD: an observer that has caught up; REMOVE: this node id holds
a seat with another directory id, a volume this pod lost, and this one has caught up; WAIT
otherwise, with why), and the roller's (`may_restart`: a leader, and no other voter more than
`max_lag` records behind it). tests/unit/test_quorum.py holds both against the outputs of
real brokers (tests/unit/data/quorum/); tests/unit/test_infra_growth.py holds the join
sidecar's sh to the same answers (the broker image it runs in has no Python, see
infra/broker.py join_script).

Pure: text and dicts in, a verdict out.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

LEADER, FOLLOWER, OBSERVER = "Leader", "Follower", "Observer"
# How many records behind the leader's log end offset a replica may be and still count as
# caught up: the join sidecar's readiness and add/remove (HANZO_JOIN_MAX_LAG overrides it in
# a pod), and the roller's check of the other voters (--max-lag). An idle quorum appends a
# record every 500 ms (metadata.max.idle.interval.ms) and a live follower stays 0-2 behind;
# a stopped one passes 100 within a minute, a restarted one replaying its log is far above.
MAX_LAG = 100
READY, ADD, REMOVE, WAIT = "ready", "add", "remove", "wait"
COLUMNS = ("NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
           "LastCaughtUpTimestamp", "Status")


class QuorumParseError(ValueError):
    """The text is not what `kafka-metadata-quorum describe` prints."""


@dataclass(frozen=True)
class Replica:
    """One row of `describe --replication`: a voter (Leader, Follower) or an Observer."""
    node: int
    directory: str  # the metadata log directory id, base64url as Kafka prints it
    log_end_offset: int
    lag: int  # the leader's log end offset minus this one's
    status: str  # LEADER, FOLLOWER or OBSERVER
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1

    @property
    def voter(self) -> bool:
        return self.status in (LEADER, FOLLOWER)


@dataclass(frozen=True)
class Describe:
    """The quorum as its leader reports it; `leader` None: there is none (an election, or
    no majority), and then no lag is known."""
    replicas: tuple[Replica, ...]
    leader: int | None
    epoch: int | None = None
    high_watermark: int | None = None

    @property
    def voters(self) -> tuple[Replica, ...]:
        return tuple(r for r in self.replicas if r.voter)

    @property
    def observers(self) -> tuple[Replica, ...]:
        return tuple(r for r in self.replicas if not r.voter)


@dataclass(frozen=True)
class Member:
    """A voter or observer of `describe --status`: no offsets there."""
    node: int
    directory: str
    endpoints: tuple[str, ...] = ()


@dataclass(frozen=True)
class Status:
    """`describe --status`."""
    cluster_id: str
    leader: int | None
    epoch: int
    high_watermark: int
    max_follower_lag: int
    max_follower_lag_ms: int
    voters: tuple[Member, ...]
    observers: tuple[Member, ...]


def _fields(line: str) -> list[str]:
    # The tool separates columns with a tab and pads them with spaces; a table typed by
    # hand (or piped through column -t) has spaces only. awk's default splitting does both.
    return [f.strip() for f in line.split("\t")] if "\t" in line else line.split()


def parse_replication(text: str) -> Describe:
    """`describe --replication` (without --human-readable). Columns are found by their
    header. Lines that are not rows (a blank line, a stray log line) are skipped, as the
    join sidecar's awk skips them; a missing header or column is an error."""
    lines = [line for line in text.splitlines() if line.strip()]
    head = next((i for i, line in enumerate(lines) if _fields(line)[:1] == ["NodeId"]), None)
    if head is None:
        raise QuorumParseError("no `NodeId DirectoryId ... Status` header: not the output of "
                               "`kafka-metadata-quorum describe --replication`")
    names = [f for f in _fields(lines[head]) if f]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise QuorumParseError(f"describe --replication without the column(s) {', '.join(missing)}")
    at = {c: names.index(c) for c in COLUMNS}
    rows = []
    for line in lines[head + 1:]:
        f = [x for x in _fields(line) if x]
        try:
            rows.append(Replica(int(f[at["NodeId"]]), f[at["DirectoryId"]],
                                int(f[at["LogEndOffset"]]), int(f[at["Lag"]]), f[at["Status"]],
                                int(f[at["LastFetchTimestamp"]]),
                                int(f[at["LastCaughtUpTimestamp"]])))
        except (IndexError, ValueError):
            continue
    leader = next((r.node for r in rows if r.status == LEADER), None)
    return Describe(tuple(rows), leader)


def parse_status(text: str) -> Status:
    """`describe --status`: `Key: value` lines, the members as JSON lists."""
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            kv[key.strip()] = value.strip()
    try:
        def members(key: str) -> tuple[Member, ...]:
            return tuple(Member(int(m["id"]), m.get("directoryId", ""),
                                tuple(m.get("endpoints", ()))) for m in json.loads(kv[key]))
        leader = int(kv["LeaderId"])
        return Status(kv["ClusterId"], leader if leader >= 0 else None, int(kv["LeaderEpoch"]),
                      int(kv["HighWatermark"]), int(kv["MaxFollowerLag"]),
                      int(kv["MaxFollowerLagTimeMs"]), members("CurrentVoters"),
                      members("CurrentObservers"))
    except (KeyError, ValueError, TypeError) as e:
        raise QuorumParseError(f"not the output of `kafka-metadata-quorum describe --status`: "
                               f"{type(e).__name__} {e}") from None


def kafka_uuid(value: object) -> str:
    """A directory id as Kafka prints it (base64url of its 16 bytes, no padding), from what a
    client hands over: a uuid.UUID, its hyphenated text (kafka-python), or Kafka's own text."""
    if isinstance(value, uuid.UUID):
        raw = value.bytes
    else:
        text = str(value)
        try:
            raw = uuid.UUID(text).bytes
        except ValueError:
            return text
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def from_admin(answer: Mapping) -> Describe:
    """The Admin API's DescribeQuorum answer as kafka-python's describe_metadata_quorum()
    returns it (DescribeQuorum v2: directory ids). Rows as the tool prints them: the leader,
    the other voters, the observers; lag against the leader's log end offset."""
    part = answer["topics"][0]["partitions"][0]
    if part.get("error"):
        raise QuorumParseError(f"DescribeQuorum failed: {part['error']}")
    leader_id = int(part["leader_id"])
    voters = list(part.get("current_voters", ()))
    observers = list(part.get("observers", ()))
    top = next((v for v in voters if int(v["replica_id"]) == leader_id), None)

    def row(r: Mapping, status: str) -> Replica:
        end = int(r["log_end_offset"])
        lag = int(top["log_end_offset"]) - end if top is not None else -1
        return Replica(int(r["replica_id"]), kafka_uuid(r.get("replica_directory_id", "")), end,
                       lag, status, int(r.get("last_fetch_timestamp", -1)),
                       int(r.get("last_caught_up_timestamp", -1)))
    rows = ([row(top, LEADER)] if top is not None else []) + [
        row(v, FOLLOWER) for v in voters if v is not top] + [row(o, OBSERVER) for o in observers]
    return Describe(tuple(rows), leader_id if top is not None else None,
                    int(part.get("leader_epoch", -1)), int(part.get("high_watermark", -1)))


@dataclass(frozen=True)
class Verdict:
    """What `node` may do. `action` is the join sidecar's (READY, ADD, REMOVE, WAIT);
    `seat` is where the node stands (voter, behind, stale, observer, absent: the join
    script's own words); `lagging`: the other voters more than max_lag behind."""
    action: str
    seat: str
    why: str
    lag: int | None = None  # this node's: as a voter with `directory`, else as an observer
    old_directory: str = ""  # REMOVE: the seat of the lost volume
    leader: int | None = None
    lagging: tuple[Replica, ...] = field(default=())

    @property
    def may_restart(self) -> bool:
        """The roller's question: restarting this node leaves a leader and every other voter
        caught up. (This node's own lag does not matter: stopping a voter that is behind
        takes nothing from the majority that commits.)"""
        return self.leader is not None and not self.lagging

    @property
    def waiting_for(self) -> str:
        """Why the roller must not restart it now ("" when it may)."""
        if self.leader is None:
            return "the controller quorum to have a leader"
        if self.lagging:
            behind = ", ".join(f"node {r.node} ({r.lag} records behind)" for r in self.lagging)
            return f"the other controllers to catch up with the leader: {behind}"
        return ""


def quorum_verdict(describe: Describe, node: int, directory: str | None,
                   max_lag: int = MAX_LAG) -> Verdict:
    """Where `node`, running on the volume whose directory id is `directory`, stands in the
    quorum and what it may do; `directory` None (the roller, which does not read the pod's
    volume): whichever directory its voter seat holds.

    The join decision is the join sidecar's: a voter row (Leader, Follower) of this node id
    with this directory makes it a voter (READY once its lag is at most max_lag, else
    behind); a voter row of this node id with another directory is a seat from a volume
    this pod lost (only this pod runs this node id), removed once this volume has caught up
    as an observer; an Observer row of this node id and this directory is added once caught
    up; no row: not fetching yet. Rows of other nodes never decide this node's action, nor do
    Observer rows of this node id with another directory: the leader lists a seat it removed
    (or a lost volume that fetched as an observer) as an observer until it has been silent
    for 5 minutes (LeaderState.OBSERVER_SESSION_TIMEOUT_MS), its lag growing
    (data/quorum/old-seat-removed)."""
    mine = [r for r in describe.replicas if r.node == node]
    seats = [r for r in mine if r.voter]
    own = [r for r in seats if directory is None or r.directory == directory]
    other = [r for r in seats if directory is not None and r.directory != directory]
    observing = [r for r in mine if not r.voter and (directory is None or r.directory == directory)]
    lag = observing[-1].lag if observing else None
    lagging = tuple(r for r in describe.voters if r.node != node and r.lag > max_lag)
    common = {"leader": describe.leader, "lagging": lagging}
    if own:
        v = own[-1]
        if v.lag <= max_lag:
            return Verdict(READY, "voter", f"node {node} (directory {v.directory}) is a voter",
                           v.lag, **common)
        return Verdict(WAIT, "behind", f"node {node} is a voter {v.lag} records behind: "
                       "catching up", v.lag, **common)
    if other:
        old = other[-1].directory
        if lag is not None and lag <= max_lag:
            return Verdict(REMOVE, "stale", f"node {node}'s seat holds directory {old}, a "
                           f"volume this pod lost; this volume ({directory}) has caught up: "
                           "removing the old seat, then adding this one", lag, old, **common)
        return Verdict(WAIT, "stale", f"node {node}'s seat holds directory {old}, a volume this "
                       f"pod lost; this volume ({directory}) catches up first (lag "
                       f"{'-' if lag is None else lag})", lag, old, **common)
    if lag is not None:
        if lag <= max_lag:
            return Verdict(ADD, "observer", f"node {node} is an observer that has caught up "
                           f"(lag {lag}): adding it as a voter", lag, **common)
        return Verdict(WAIT, "observer", f"observer, lag {lag}: catching up", lag, **common)
    return Verdict(WAIT, "absent", f"node {node} is not fetching from the quorum yet", **common)
