"""Growing a running stack from 1 broker to 3 (docs/runbooks/scaling-1-to-3.md).

The program records how many pods founded the controller quorum; pods above that format
with --no-initial-controllers and the join-quorum sidecar makes them voters. The sidecar's
script runs here with sh against a stand-in kafka-metadata-quorum.sh that answers
`describe --replication` from a table and records every call."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanzo_stream.core.broker_config import broker_config
from infra import broker
from infra.settings import parse
from infra.topology import Topology

from .infra_helpers import (
    RenderFailed,
    join_container,
    kafka_container,
    obj,
    parse_properties,
    render,
    resource,
    run_join,
    run_pod,
    secret_data,
)

THREE = (("brokers", "3"),)
RECORDED_ONE = (("kafka-initial-controllers", '{"result": 1}'),)
BITNAMI = (("imageFlavor", "bitnami"), ("image", "registry.example.com/bitnami/kafka:4.4.0"))
TOP = Topology("hanzo", "cluster.local", 3)


def grown(sets: tuple = ()) -> dict:
    """A dev stack created with one broker (the record says 1), now `brokers: 3`."""
    return render("dev", THREE + sets, (), RECORDED_ONE)


def record(rendered: dict) -> dict:
    return next(r for r in rendered["resources"] if r["name"] == "kafka-initial-controllers")


def format_args(rendered: dict, tmp_path) -> list[list[str]]:
    """The `kafka-storage format` quorum flags each pod's entrypoint really passes."""
    out = []
    for i in range(3):
        proc = run_pod(rendered, i, tmp_path / f"pod{i}")
        assert proc.returncode == 0, proc.stderr
        out.append((tmp_path / f"pod{i}" / "storage-args").read_text().split()[6:])
    return out


# --- the founding size and the format flags ----------------------------------------------


def test_the_founding_size_is_recorded_once_and_never_follows_brokers():
    out = render("dev", THREE)
    rec = record(out)
    assert rec["type"] == "pulumi-python:dynamic:Record"
    assert rec["inputs"] == {"value": 3}  # a new stack: every pod founds
    assert rec["ignore_changes"] == ["value"]  # later `brokers` never reach the record
    assert rec["protect"] is False  # dev; prod protects it like the cluster id
    assert record(render("prod"))["protect"] is True
    assert out["outputs"]["initialControllers"]["value"] == 3


def test_the_quorum_counts_as_formed_once_the_brokers_are_ready():
    """The brokers' entrypoint reads it (test_infra_entrypoint). Created after the
    StatefulSet is ready (every broker a voter), constant afterwards: a preview right after
    an up plans no change to it, and it is outside the pod template."""
    out = render("dev")
    cm = resource(out, "ConfigMap", "kafka-quorum")
    assert cm["inputs"]["data"] == {"formed": "true"}
    assert "statefulset-kafka" in cm["dependencies"]


def test_grown_stack_founder_stays_standalone_and_new_pods_join(tmp_path):
    out = grown()
    assert out["outputs"]["initialControllers"]["value"] == 1
    assert obj(out, "StatefulSet", "kafka")["spec"]["replicas"] == 3
    assert format_args(out, tmp_path) == [
        ["--standalone"], ["--no-initial-controllers"], ["--no-initial-controllers"]]
    # Everything else each pod runs is still broker_config() of a three-broker cluster.
    s = parse({"brokers": "3"})
    got = parse_properties((tmp_path / "pod2" / "server.properties").read_text())
    want = broker_config(broker.broker_settings(Topology.of(s), 2))
    assert {k: got[k] for k in want} == want
    assert want["default.replication.factor"] == "3"


def test_a_new_three_broker_stack_keeps_three_initial_controllers(tmp_path):
    voters = ",".join(f"{n}@{TOP.pod_host(n)}:9095:{broker.directory_id(TOP, n)}" for n in range(3))
    assert format_args(render("dev", THREE), tmp_path) == [["--initial-controllers", voters]] * 3


def test_the_setting_overrides_a_missing_record(tmp_path):
    """A stack whose state lost the record: `initialControllers 1` renders what the record
    would, and seeds a new record with it."""
    out = render("dev", THREE + (("initialControllers", "1"),))
    assert out["outputs"]["initialControllers"]["value"] == 1
    assert record(out)["inputs"] == {"value": 1}
    assert kafka_container(out)["command"] == kafka_container(grown())["command"]


def test_a_record_larger_than_the_stack_is_refused():
    with pytest.raises(RenderFailed, match="founded with 3 pods but the stack has 1 brokers"):
        render("dev", (), (), (("kafka-initial-controllers", '{"result": 3}'),))


def test_initial_voters_refuses_impossible_founding_sizes():
    assert list(broker.initial_voters(TOP, 1)) == [0]
    assert list(broker.initial_voters(TOP)) == [0, 1, 2]
    for n in (0, 2, 4):
        with pytest.raises(ValueError, match=f"founded with {n} pods"):
            broker.initial_voters(TOP, n)


# --- the join-quorum sidecar in the manifest ---------------------------------------------


def test_sidecar_only_where_a_pod_can_join():
    assert join_container(render("dev")) is None  # one broker: it founds, nobody joins
    for out in (render("prod"), grown()):
        pod = obj(out, "StatefulSet", "kafka")["spec"]["template"]["spec"]
        assert [c["name"] for c in pod["containers"]] == ["kafka", "tls-reload", "join-quorum"]
        assert {"name": "join", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}} in pod["volumes"]


@pytest.mark.parametrize(("sets", "home", "uid"), [((), "/opt/kafka", 1000),
                                                   (BITNAMI, "/opt/bitnami/kafka", 1001)],
                         ids=["apache", "bitnami"])
def test_sidecar_runs_the_images_tool_with_the_pods_own_config(sets, home, uid):
    out = grown(sets)
    c, k = join_container(out), kafka_container(out)
    assert c["image"] == k["image"]
    assert f"tool={home}/bin/kafka-metadata-quorum.sh" in c["command"][2]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["data"] == {"name": "data", "mountPath": "/var/lib/kafka", "readOnly": True}
    assert mounts["run"] == {"name": "run", "mountPath": "/opt/hanzo/run", "readOnly": True}
    assert mounts["tls"]["readOnly"] is True and "readOnly" not in mounts["join"]
    env = {e["name"]: e for e in c["env"]}
    assert env["HANZO_ADMIN_JAAS"] == {"name": "HANZO_ADMIN_JAAS", "valueFrom": {"secretKeyRef": {
        "name": "kafka-admin", "key": "sasl.jaas.config"}}}
    assert c["readinessProbe"]["exec"]["command"][-1] == "test -f /tmp/voter"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert obj(out, "StatefulSet", "kafka")["spec"]["template"]["spec"]["securityContext"][
        "runAsUser"] == uid
    # The admin password reaches the pod only through the Secret.
    password = out["outputs"]["adminPassword"]["value"]
    assert password not in json.dumps(obj(out, "StatefulSet", "kafka"))


# --- the join script, run with sh against a stand-in tool --------------------------------

REFUSED = "Request timed out waiting for leader to handle previous add voter request"

# Records each call and its command config; `describe --replication` prints quorum.<n> for
# the n-th describe if it exists, else quorum ("unreachable": fails like a refused
# connection); add-controller pops a reply ("refuse" or "ok") and, on ok, turns this node's
# Observer row into a Follower, as the leader would after committing the new voter set;
# remove-controller drops the voter row of that node and directory.
TOOL = f"REFUSED='{REFUSED}'\n" + r'''
echo "$*" >> "$OUT/calls"
cfg=""; prev=""
for a in "$@"; do [ "$prev" = "--command-config" ] && cfg="$a"; prev="$a"; done
cp "$cfg" "$OUT/command-config.last"
ls -l "$cfg" | cut -c1-10 > "$OUT/command-config.mode"
case "$*" in
  *"describe --replication"*)
    n=$(grep -c 'describe --replication' "$OUT/calls")
    f="$OUT/quorum"; [ -f "$OUT/quorum.$n" ] && f="$OUT/quorum.$n"
    [ "$(cat "$f")" = hang ] && exec /bin/sleep 60  # accepts, never answers
    if [ "$(cat "$f")" = unreachable ]; then
      echo "org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment." >&2
      exit 1
    fi
    cat "$f" ;;
  *add-controller*)
    reply=$(head -n 1 "$OUT/add-replies"); sed -i 1d "$OUT/add-replies"
    if [ "$reply" != ok ]; then
      echo "org.apache.kafka.common.errors.TimeoutException: $REFUSED" >&2
      exit 1
    fi
    id=$(sed -n 's/^node.id=//p' "$cfg")
    logdir=$(sed -n 's/^log.dirs=//p' "$cfg")  # the pod's /var/lib/kafka is $OUT/data here
    dir=$(sed -n 's/^directory.id=//p' "$OUT/data${logdir#/var/lib/kafka}/meta.properties")
    sed -i "s/^$id \(.*\) Observer$/$id \1 Follower/" "$OUT/quorum"
    echo "Added controller $id with directory id $dir and endpoints: CONTROLLER://kafka-$id:9095" ;;
  *remove-controller*)
    id=""; dir=""; prev=""
    for a in "$@"; do
      [ "$prev" = "--controller-id" ] && id="$a"; [ "$prev" = "--controller-directory-id" ] && dir="$a"
      prev="$a"
    done
    grep -q "^$id $dir .* Follower$" "$OUT/quorum" || { echo "VOTER_NOT_FOUND: $id $dir" >&2; exit 1; }
    sed -i "/^$id $dir .* Follower$/d" "$OUT/quorum"
    echo "Removed KRaft controller $id with directory id $dir" ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
'''

# Every retry pause is recorded and returns at once; the idle pause after joining (and the
# MAX_SLEEPS-th pause, so a test that never joins ends) stops the script as Kubernetes
# would: SIGTERM to the sidecar's shell.
SLEEP = '''#!/bin/sh
echo "$1" >> "$OUT/sleeps"
if [ "$1" = 3600 ] || [ "$(wc -l < "$OUT/sleeps")" -ge "${MAX_SLEEPS:-12}" ]; then
  kill -TERM "$PPID"
fi
'''

HEADER = "NodeId DirectoryId LogEndOffset Lag LastFetchTimestamp LastCaughtUpTimestamp Status"


def table(*rows: tuple[int, str, int, str]) -> str:
    """describe --replication as the tool prints it: (node id, directory id, lag, status)."""
    return "\n".join([HEADER, *(f"{i} {d} {1200 - lag} {lag} 1761000000000 1761000000000 {s}"
                                for i, d, lag, s in rows)]) + "\n"


DIR = {i: f"dir{i}AAAAAAAAAAAAAAAAAAA" for i in range(3)}
LEADER_ONLY_1_OBSERVING = table((0, DIR[0], 0, "Leader"), (1, DIR[1], 0, "Observer"),
                                (2, DIR[2], 900, "Observer"))


class Pod:
    """One broker pod's directories: run_pod's layout plus the formatted meta.properties."""

    def __init__(self, tmp, ordinal: int, rendered: dict, directory: str):
        self.tmp, self.ordinal, self.rendered = tmp, ordinal, rendered
        assert run_pod(rendered, ordinal, tmp).returncode == 0  # writes run/server.properties
        meta = tmp / "data" / "data" / "meta.properties"
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(f"version=1\ncluster.id=abc\nnode.id={ordinal}\ndirectory.id={directory}\n")
        sleep = tmp / "bin" / "sleep"
        sleep.parent.mkdir(exist_ok=True)
        sleep.write_text(SLEEP)
        sleep.chmod(0o755)
        (tmp / "add-replies").write_text("")

    def quorum(self, text: str, n: int | None = None) -> None:
        (self.tmp / ("quorum" if n is None else f"quorum.{n}")).write_text(text)

    def run(self, **env: str):
        proc = run_join(self.rendered, self.ordinal, self.tmp,
                        {"kafka-metadata-quorum.sh": TOOL}, {"HANZO_JOIN_INTERVAL": "7", **env})
        calls = (self.tmp / "calls").read_text().splitlines() if (self.tmp / "calls").exists() else []
        return proc, calls

    @property
    def ready(self) -> bool:
        return (self.tmp / "join" / "voter").exists()

    def sleeps(self) -> list[str]:
        return (self.tmp / "sleeps").read_text().split()


def adds(calls: list[str]) -> list[str]:
    return [c for c in calls if c.endswith("add-controller")]


@pytest.fixture(scope="module")
def grown_out() -> dict:
    return grown()


def test_observer_is_added_exactly_once_with_its_own_config(grown_out, tmp_path):
    pod = Pod(tmp_path, 1, grown_out, DIR[1])
    pod.quorum(LEADER_ONLY_1_OBSERVING)
    (tmp_path / "add-replies").write_text("ok\n")
    proc, calls = pod.run()
    assert proc.returncode == 0, proc.stderr  # ended by SIGTERM in its idle loop
    peers = f"{TOP.pod_host(0)}:9095,{TOP.pod_host(2)}:9095"
    cfg = str(tmp_path / "join" / "admin.properties")
    assert calls == [f"--bootstrap-controller {peers} --command-config {cfg} describe --replication",
                     f"--bootstrap-controller {peers} --command-config {cfg} add-controller",
                     f"--bootstrap-controller {peers} --command-config {cfg} describe --replication"]
    assert pod.ready
    assert f"Added controller 1 with directory id {DIR[1]}" in proc.stderr
    assert pod.sleeps() == ["7", "3600"]  # one retry pause, then idle
    # The command config: this pod's server.properties, then the admin's client login.
    server = (tmp_path / "run" / "server.properties").read_text()
    got = (tmp_path / "command-config.last").read_text()
    admin = secret_data(grown_out, "kafka-admin")["sasl.jaas.config"]
    assert got == server + f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.jaas.config={admin}\n"
    assert parse_properties(got)["node.id"] == "1"
    assert (tmp_path / "command-config.mode").read_text().strip() == "-rw-------"


def test_founding_voter_never_adds_itself(grown_out, tmp_path):
    pod = Pod(tmp_path, 0, grown_out, DIR[0])
    pod.quorum(LEADER_ONLY_1_OBSERVING)
    proc, calls = pod.run()
    assert proc.returncode == 0, proc.stderr
    assert calls and not adds(calls) and len(calls) == 1
    assert pod.ready and pod.sleeps() == ["3600"]


def test_a_voter_restarting_does_nothing_but_mark_itself_ready(grown_out, tmp_path):
    pod = Pod(tmp_path, 2, grown_out, DIR[2])
    pod.quorum(table((0, DIR[0], 0, "Leader"), (1, DIR[1], 0, "Follower"),
                     (2, DIR[2], 3, "Follower")))
    proc, calls = pod.run()
    assert proc.returncode == 0 and not adds(calls) and pod.ready


def test_a_restarted_voter_is_ready_only_once_caught_up(grown_out, tmp_path):
    """A roll must not take the next controller while this one replays the metadata log."""
    pod = Pod(tmp_path, 2, grown_out, DIR[2])
    pod.quorum(table((0, DIR[0], 0, "Leader"), (1, DIR[1], 0, "Follower"),
                     (2, DIR[2], 5000, "Follower")), 1)
    pod.quorum(table((0, DIR[0], 0, "Leader"), (1, DIR[1], 0, "Follower"),
                     (2, DIR[2], 20, "Follower")))
    proc, calls = pod.run()
    assert proc.returncode == 0 and not adds(calls), proc.stderr
    assert "node 2 is a voter 5000 records behind: catching up" in proc.stderr
    assert pod.ready and pod.sleeps() == ["7", "3600"]


def test_a_call_that_never_answers_is_cut_and_retried(grown_out, tmp_path):
    pod = Pod(tmp_path, 0, grown_out, DIR[0])
    pod.quorum("hang", 1)
    pod.quorum(LEADER_ONLY_1_OBSERVING)
    proc, calls = pod.run(HANZO_JOIN_CALL_TIMEOUT="1")
    assert proc.returncode == 0, proc.stderr
    assert "quorum not reachable yet: no answer in 1s" in proc.stderr
    assert len(calls) == 2 and pod.ready


def test_a_refused_add_is_retried_after_a_fresh_describe(grown_out, tmp_path):
    """Two pods join at once: Kafka takes one voter change at a time and refuses the other."""
    pod = Pod(tmp_path, 1, grown_out, DIR[1])
    pod.quorum(LEADER_ONLY_1_OBSERVING)
    (tmp_path / "add-replies").write_text("refuse\nok\n")
    proc, calls = pod.run()
    assert proc.returncode == 0, proc.stderr
    assert [c.rsplit(" ", 1)[-1] for c in calls] == [
        "--replication", "add-controller", "--replication", "add-controller", "--replication"]
    assert f"add-controller refused, retrying: org.apache.kafka.common.errors.TimeoutException: " \
           f"{REFUSED}" in proc.stderr
    assert pod.ready and pod.sleeps() == ["7", "7", "3600"]


def test_waits_for_the_quorum_and_for_the_observer_to_catch_up(grown_out, tmp_path):
    pod = Pod(tmp_path, 2, grown_out, DIR[2])
    pod.quorum("unreachable", 1)  # the leader is not up yet
    pod.quorum(table((0, DIR[0], 0, "Leader")), 2)  # up, but this node is not fetching yet
    pod.quorum(LEADER_ONLY_1_OBSERVING, 3)  # node 2 is 900 records behind
    pod.quorum(table((0, DIR[0], 0, "Leader"), (2, DIR[2], 40, "Observer")))  # caught up
    (tmp_path / "add-replies").write_text("ok\n")
    proc, calls = pod.run()
    assert proc.returncode == 0, proc.stderr
    kinds = [c.rsplit(" ", 1)[-1] for c in calls]
    assert kinds == ["--replication"] * 4 + ["add-controller", "--replication"]
    assert "quorum not reachable yet" in proc.stderr and "lag 900: catching up" in proc.stderr
    assert pod.ready


NEW_DIR = "newDirBBBBBBBBBBBBBBBB"


def test_a_seat_held_by_a_lost_volume_is_replaced_once_the_new_one_caught_up(grown_out, tmp_path):
    """Node 1 is a voter with another directory id: this pod's volume was replaced (only this
    pod runs node id 1). Adding is impossible while the old seat stands (Kafka:
    DUPLICATE_VOTER), so once the new volume has caught up as an observer the script removes
    the old seat and adds itself, as KIP-853 prescribes for a lost disk."""
    pod = Pod(tmp_path, 1, grown_out, NEW_DIR)
    pod.quorum(table((0, DIR[0], 0, "Leader"), (1, DIR[1], 0, "Follower"),
                     (2, DIR[2], 0, "Follower"), (1, NEW_DIR, 4000, "Observer")), 1)
    pod.quorum(table((0, DIR[0], 0, "Leader"), (1, DIR[1], 0, "Follower"),
                     (2, DIR[2], 0, "Follower"), (1, NEW_DIR, 3, "Observer")))
    (tmp_path / "add-replies").write_text("ok\n")
    proc, calls = pod.run()
    assert proc.returncode == 0, proc.stderr
    kinds = [c.split("admin.properties ", 1)[1] for c in calls]
    assert kinds == ["describe --replication",  # behind: nothing removed yet
                     "describe --replication",
                     f"remove-controller --controller-id 1 --controller-directory-id {DIR[1]}",
                     "describe --replication", "add-controller", "describe --replication"]
    assert "this volume (newDirBBBBBBBBBBBBBBBB) catches up first (lag 4000)" in proc.stderr
    assert f"removed the seat of directory {DIR[1]}" in proc.stderr
    assert pod.ready
    voters = [r.split()[:2] for r in (tmp_path / "quorum").read_text().splitlines()[1:]
              if r.endswith(("Leader", "Follower"))]
    assert voters == [["0", DIR[0]], ["2", DIR[2]], ["1", NEW_DIR]]


def test_a_seat_of_another_node_is_never_removed(grown_out, tmp_path):
    """Only the pod's own node id is its to replace: a stale-looking row of another node is
    that node's business (it may be restarting)."""
    pod = Pod(tmp_path, 1, grown_out, DIR[1])
    pod.quorum(table((0, DIR[0], 0, "Leader"), (2, "otherDirCCCCCCCCCCCCCC", 0, "Follower"),
                     (2, DIR[2], 0, "Observer"), (1, DIR[1], 0, "Observer")))
    (tmp_path / "add-replies").write_text("ok\n")
    proc, calls = pod.run()
    assert proc.returncode == 0 and pod.ready, proc.stderr
    assert not [c for c in calls if "remove-controller" in c]


def test_waits_for_the_broker_to_format_its_volume(grown_out, tmp_path):
    pod = Pod(tmp_path, 1, grown_out, DIR[1])
    (tmp_path / "data" / "data" / "meta.properties").unlink()
    pod.quorum(LEADER_ONLY_1_OBSERVING)
    proc, calls = pod.run(MAX_SLEEPS="2")
    assert proc.returncode == 0 and calls == [] and not pod.ready
    assert "waiting for the broker to format" in proc.stderr


def test_bitnami_image_joins_with_its_own_tool_path(tmp_path):
    out = grown(BITNAMI)
    pod = Pod(tmp_path, 1, out, DIR[1])
    pod.quorum(LEADER_ONLY_1_OBSERVING)
    (tmp_path / "add-replies").write_text("ok\n")
    proc, calls = pod.run()
    assert proc.returncode == 0, proc.stderr
    assert len(adds(calls)) == 1 and pod.ready


def test_stale_marker_from_before_a_restart_is_not_trusted(grown_out, tmp_path):
    pod = Pod(tmp_path, 1, grown_out, DIR[1])
    (tmp_path / "join").mkdir(exist_ok=True)
    (tmp_path / "join" / "voter").write_text("")
    pod.quorum("unreachable")
    proc, _ = pod.run(MAX_SLEEPS="2")
    assert proc.returncode == 0 and not pod.ready  # unready until the quorum says voter


# --- the join script decides what hanzo_stream.pods.quorum decides ----------------------------
# The sidecar runs in the broker image, which has no Python: its decision is quorum_verdict
# written again in awk and sh (infra/broker.py join_script). These hold the two together,
# over the describe outputs recorded from real brokers (tests/unit/data/quorum) and over
# generated ones.

AWK = re.compile(r"""awk -v id="\$ordinal" -v dir="\$dir" -v max="\$max_lag" '(.*?)' "\$work/out"\)""",
                 re.S)


@pytest.fixture(scope="module")
def seat_awk(grown_out) -> str:
    """The awk program of the rendered join sidecar's command: where this node stands."""
    (program,) = AWK.findall(join_container(grown_out)["command"][2])
    return program


def awk_seat(program: str, table: str, node: int, directory: str, max_lag: int, tmp) -> str:
    f = tmp / "out"
    f.write_text(table)
    return subprocess.run(["awk", "-v", f"id={node}", "-v", f"dir={directory}", "-v",
                           f"max={max_lag}", program, str(f)], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()


def seat_words(v) -> str:
    """A Verdict in the words the awk prints."""
    lag = "-" if v.lag is None else str(v.lag)
    return {"voter": "voter", "behind": f"behind {lag}", "stale": f"stale {v.old_directory} {lag}",
            "observer": f"observer {lag}", "absent": "absent"}[v.seat]


def as_pods(table: str) -> str:
    """The local cluster numbers its nodes from 1, pods from 0: node n is pod n-1."""
    out = []
    for line in table.splitlines():
        head, sep, rest = line.partition("\t")
        out.append(f"{int(head) - 1:<6}{sep}{rest}" if head.strip().isdigit() else line)
    return "\n".join(out) + "\n"


def real_tables():
    from .test_quorum import ANSWERED, recorded

    for name in ANSWERED:
        rec = recorded(name)
        for node, directory in sorted(rec.directories.items()):
            yield name, node - 1, directory, as_pods(rec.replication)


ROW_DIRS = ("dirAAAAAAAAAAAAAAAAAAA", "dirBBBBBBBBBBBBBBBBBBB", "dirCCCCCCCCCCCCCCCCCCC")
generated_rows = st.lists(st.tuples(
    st.integers(0, 3), st.sampled_from(ROW_DIRS),
    st.sampled_from([0, 1, 99, 100, 101, 5000]), st.sampled_from(["Leader", "Follower", "Observer"])),
    max_size=7)


def tool_table(rows, tabs: bool) -> str:
    """describe --replication as the tool prints it (tab-separated, padded) or spaced."""
    cells = [HEADER.split(), *([str(i), d, str(9000 - lag), str(lag), "1796655552145",
                                "1796655552145", s] for i, d, lag, s in rows)]
    if not tabs:
        return "\n".join(" ".join(c) for c in cells) + "\n"
    widths = [max(len(c[k]) for c in cells) for k in range(7)]
    return "\n".join("\t".join(x.ljust(w) for x, w in zip(c, widths, strict=True)) + "\t"
                     for c in cells) + "\n"


def test_the_scripts_seat_is_quorum_verdicts_over_every_recorded_output(seat_awk, tmp_path):
    from hanzo_stream.pods.quorum import MAX_LAG, parse_replication, quorum_verdict

    seen = set()
    for name, node, directory, table in real_tables():
        for max_lag in (MAX_LAG, 0):
            v = quorum_verdict(parse_replication(table), node, directory, max_lag)
            assert awk_seat(seat_awk, table, node, directory, max_lag, tmp_path) == seat_words(v), (
                name, node, max_lag)
            seen.add(v.seat)
    assert seen == {"voter", "behind", "stale", "observer"}


@settings(max_examples=150, deadline=None)
@given(rows=generated_rows, node=st.integers(0, 3), directory=st.sampled_from(ROW_DIRS),
       max_lag=st.sampled_from([0, 100]), tabs=st.booleans())
def test_the_scripts_seat_is_quorum_verdicts_over_generated_tables(seat_awk, tmp_path_factory,
                                                                   rows, node, directory,
                                                                   max_lag, tabs):
    from hanzo_stream.pods.quorum import parse_replication, quorum_verdict

    table = tool_table(rows, tabs)
    v = quorum_verdict(parse_replication(table), node, directory, max_lag)
    got = awk_seat(seat_awk, table, node, directory, max_lag, tmp_path_factory.mktemp("awk"))
    assert got == seat_words(v), table


def script_action(proc, calls: list[str], ready: bool) -> tuple[str, str]:
    """What one round of the join script did: (action, the directory it removed)."""
    from hanzo_stream.pods.quorum import ADD, READY, REMOVE, WAIT

    removed = [c.rsplit(" ", 1)[1] for c in calls if "remove-controller" in c]
    if ready:
        return READY, ""
    if adds(calls):
        return ADD, ""
    return (REMOVE, removed[0]) if removed else (WAIT, "")


def test_the_whole_script_acts_as_quorum_verdict_says_on_every_recorded_output(grown_out,
                                                                              tmp_path):
    """One round of the rendered script per recorded describe and node, against the stand-in
    tool printing that very output: it marks itself ready, adds, removes the seat named, or
    waits, exactly as quorum_verdict's action."""
    from hanzo_stream.pods.quorum import MAX_LAG, parse_replication, quorum_verdict

    actions = set()
    for k, (name, node, directory, table) in enumerate(real_tables()):
        pod = Pod(tmp_path / f"{k}", node, grown_out, directory)
        pod.quorum(table)
        proc, calls = pod.run(MAX_SLEEPS="1")
        assert proc.returncode == 0, proc.stderr
        v = quorum_verdict(parse_replication(table), node, directory, MAX_LAG)
        assert script_action(proc, calls, pod.ready) == (v.action, v.old_directory), (
            name, node, proc.stderr)
        actions.add(v.action)
    assert actions == {"ready", "add", "remove", "wait"}


def test_the_ghost_row_of_a_removed_seat_does_not_hold_the_add(grown_out, tmp_path):
    """Recorded: after remove-controller the leader lists the old directory as an observer
    of the same node for minutes, its lag past max_lag (108). The script adds the pod's own
    directory at once (it used to read the last Observer row of its node id, the ghost's,
    and wait up to 5 minutes with two voters left)."""
    from .test_quorum import recorded

    rec = recorded("old-seat-removed")
    pod = Pod(tmp_path, 2, grown_out, rec.directories[3])
    pod.quorum(as_pods(rec.replication))
    (tmp_path / "add-replies").write_text("ok\n")
    proc, calls = pod.run(MAX_SLEEPS="1")
    assert proc.returncode == 0 and adds(calls), proc.stderr
