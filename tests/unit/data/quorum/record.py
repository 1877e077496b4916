"""Record what a real KRaft quorum answers, for tests/unit/test_quorum.py (README.md here).

Runs the local cluster's own code (hanzo_stream/local/kafka.py: broker_config(), SASL_SSL,
the dynamic quorum) in a temporary directory on free 127.0.0.1 ports, grows it from one
broker to three as docs/runbooks/scaling-1-to-3.md does, stops a voter, replaces a voter's
volume, and after each step saves `kafka-metadata-quorum describe --status` and
`describe --replication` (Kafka's MetadataQuorumCommand from the platform's jars) and the
Admin API's DescribeQuorum answer as the roller reads it (kafka-python), plus every node's
metadata directory id. Every wait is bounded; the brokers are stopped at the end.

    PYTHONPATH=$PWD nice -n 19 python tests/unit/data/quorum/record.py [OUT_DIR]
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hanzo_stream.artifacts import jars
from hanzo_stream.artifacts.jvm import java, jit_flags
from hanzo_stream.artifacts.versions import KAFKA_VERSION
from hanzo_stream.core.broker_config import to_server_properties
from hanzo_stream.core.secret_files import write_secret
from hanzo_stream.local import kafka
from hanzo_stream.local.credentials import Credentials

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
HEAP_MB = 256
CALL_TIMEOUT = 60


class Recorder:
    def __init__(self, home: Path, creds: Credentials):
        self.home, self.creds = home, creds

    @property
    def cluster(self) -> kafka.LocalCluster:
        c = kafka.LocalCluster.load(self.home)
        assert c is not None
        return c

    def tool(self, *args: str, own: int | None = None) -> subprocess.CompletedProcess:
        """MetadataQuorumCommand against the running nodes' controller endpoints, as admin."""
        c = self.cluster
        conn = c.connection("admin", self.creds.admin, mechanism="PLAIN")
        props = {k: v for k, v in conn.java().items() if k != "bootstrap.servers"}
        props |= {"default.api.timeout.ms": "20000", "request.timeout.ms": "10000"}
        text = (c.node_dir(own) / "server.properties").read_text() if own else ""
        cfg = self.home / ".quorum.properties"
        up = kafka.running(self.home)
        peers = ",".join(f"127.0.0.1:{n['controller_port']}" for n in c.nodes if n["node_id"] in up)
        write_secret(cfg, text + to_server_properties(props))
        try:
            return subprocess.run(
                [java(), *jit_flags(), "-Xmx128m", "-cp", jars.kafka_classpath(),
                 "org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-controller", peers,
                 "--command-config", str(cfg), *args],
                capture_output=True, text=True, timeout=CALL_TIMEOUT)
        finally:
            cfg.unlink(missing_ok=True)

    def admin_describe(self) -> dict:
        from kafka.admin import KafkaAdminClient

        c = self.cluster
        up = kafka.running(self.home)
        conn = c.connection("admin", self.creds.admin)
        cfg = conn.kafka_python() | {"bootstrap_servers": [
            f"127.0.0.1:{n['client_port']}" for n in c.nodes if n["node_id"] in up]}
        client = KafkaAdminClient(client_id="quorum-recorder", request_timeout_ms=15000, **cfg)
        try:
            return client.describe_metadata_quorum()
        finally:
            client.close()

    def directories(self) -> dict[str, str]:
        out = {}
        for n in self.cluster.nodes:
            meta = self.cluster.node_dir(n["node_id"]) / "data" / "meta.properties"
            if meta.exists():
                for line in meta.read_text().splitlines():
                    if line.startswith("directory.id="):
                        out[str(n["node_id"])] = line.split("=", 1)[1]
        return out

    def save(self, name: str, note: str, admin: bool = True) -> None:
        d = OUT / name
        d.mkdir(parents=True, exist_ok=True)
        for what in ("status", "replication"):
            run = self.tool("describe", f"--{what}")
            if run.returncode == 0:
                (d / f"{what}.txt").write_text(run.stdout)
            else:  # the first line of the failure is what a caller sees
                (d / f"{what}.failed.txt").write_text(
                    f"exit {run.returncode}\n" + "\n".join(
                        line for line in run.stderr.splitlines() if "Exception" in line
                        or "Error" in line)[:2000] + "\n")
        if admin:
            try:
                answer = self.admin_describe()
                (d / "admin.json").write_text(  # as kafka-python returns it
                    json.dumps(answer, indent=1, sort_keys=True, default=str) + "\n")
            except Exception as e:
                (d / "admin.failed.txt").write_text(f"{type(e).__name__}: {e}\n")
        (d / "scenario.json").write_text(json.dumps(
            {"note": note, "kafka": KAFKA_VERSION, "directories": self.directories(),
             "running": sorted(kafka.running(self.home))}, indent=1) + "\n")
        print(f"recorded {name}: {note}", flush=True)

    def lag_of(self, node: int) -> int | None:
        """node's Lag column as a voter (the first row of that node), None if none."""
        run = self.tool("describe", "--replication")
        for line in run.stdout.splitlines()[1:]:
            f = line.split()
            if f and f[0] == str(node) and f[-1] in ("Leader", "Follower"):
                return int(f[3])
        return None

    def until(self, what: str, check, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(2)
        raise TimeoutError(f"{what}: not in {timeout:.0f} s")

    def stop_node(self, node: int) -> None:
        c = self.cluster
        n = next(n for n in c.nodes if n["node_id"] == node)
        os.kill(n["pid"], signal.SIGTERM)
        self.until(f"node {node} to stop", lambda: node not in kafka.running(self.home), 90)
        n["pid"] = None
        c.save()

    def start_nodes(self, nodes: set[int]) -> None:
        kafka.start(self.home, self.creds, len(self.cluster.nodes), HEAP_MB, timeout=180,
                    only=nodes)


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="quorum-record-"))
    home = tmp / "kafka"
    creds = Credentials(admin=base64.urlsafe_b64encode(os.urandom(18)).decode())
    r = Recorder(home, creds)
    try:
        kafka.start(home, creds, brokers=1, heap_mb=HEAP_MB, timeout=180)
        r.save("single-voter", "one broker formatted --standalone: the only voter, the leader")

        # Grow to three as scale() does, but stop before add_controller: two observers.
        c = r.cluster
        ports = kafka.free_ports(8)
        for k, node_id in enumerate((2, 3)):
            p = ports[4 * k:4 * k + 4]
            c.nodes.append({"node_id": node_id, "host": "127.0.0.1", "client_port": p[0],
                            "internal_port": p[1], "controller_port": p[2], "pid": None})
            c.jmx_ports.append(p[3])
        c.save()
        r.start_nodes({2, 3})
        time.sleep(5)
        r.save("two-observers", "nodes 2 and 3 formatted --no-initial-controllers, started, "
               "not yet added: observers")

        kafka.add_controller(r.cluster, 2, creds.admin)
        r.save("one-observer", "node 2 added with add-controller; node 3 still an observer")
        kafka.add_controller(r.cluster, 3, creds.admin)
        time.sleep(3)
        r.save("three-voters", "nodes 1, 2, 3 voters, all caught up")

        leader_run = r.tool("describe", "--status")
        leader = int(next(line.split(":")[1] for line in leader_run.stdout.splitlines()
                          if line.startswith("LeaderId")))
        follower = max(i for i in (1, 2, 3) if i != leader)
        r.stop_node(follower)
        time.sleep(3)
        r.save("follower-just-stopped", f"node {follower}, a follower, stopped (SIGTERM) 3 s "
               "before the first describe")
        r.until(f"node {follower} to lag by more than 100 records",
                lambda: (r.lag_of(follower) or 0) > 100, 240)
        r.save("follower-stopped", f"node {follower} stopped until it lags by more than 100 records")

        r.start_nodes({follower})
        r.until(f"node {follower} to catch up", lambda: r.lag_of(follower) == 0 or
                (r.lag_of(follower) or 999) <= 2, 120)
        r.save("follower-back", f"node {follower} started again and caught up")

        # A lost volume: node `follower` comes back on an empty one, formatted as a joining
        # node (it was not a founder), with a new directory id; its old seat stays a voter.
        r.stop_node(follower)
        shutil.rmtree(r.cluster.node_dir(follower) / "data")
        r.start_nodes({follower})
        time.sleep(5)
        r.save("lost-volume", f"node {follower} restarted on an empty volume: an observer with a "
               "new directory id while its old seat is still a voter")
        old = json.loads((OUT / "follower-back" / "scenario.json").read_text())[
            "directories"][str(follower)]
        run = r.tool("remove-controller", "--controller-id", str(follower),
                     "--controller-directory-id", old)
        assert run.returncode == 0, run.stderr[-2000:]
        time.sleep(3)
        r.save("old-seat-removed", f"remove-controller of node {follower}'s old directory: two "
               "voters and the new volume as an observer")
        run = r.tool("add-controller", own=follower)
        assert run.returncode == 0, run.stderr[-2000:]
        time.sleep(3)
        r.save("new-seat-added", f"add-controller with node {follower}'s own config: three voters "
               "again, its new directory among them")

        others = [i for i in (1, 2, 3) if i != leader]
        for i in others:
            r.stop_node(i)
        time.sleep(10)
        r.save("majority-stopped", f"nodes {others} stopped: the leader {leader} alone, no majority")
    finally:
        kafka.stop(home, timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
