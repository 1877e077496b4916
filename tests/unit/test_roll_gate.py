"""The roll gate's verdicts (hanzo_stream/pods/roll_gate.py) on modelled cluster metadata; the
same gate against real brokers is in tests/integration/test_failover.py."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanzo_stream.pods.roll_gate import (
    ALIVE,
    EVERYONE_GOES,
    IN_SYNC,
    RECONNECT_AFTER,
    SAFE,
    Partition,
    being_deleted,
    judge,
    run,
    statefulset_reader,
    topic_min_isr,
)

BROKERS = range(5)


def p(topic: str, replicas: tuple[int, ...], isr: tuple[int, ...], n: int = 0) -> Partition:
    return Partition(topic, n, replicas, isr)


def test_a_broker_out_of_an_isr_is_not_in_sync_and_holds_nothing():
    parts = [p("a", (0, 1, 2), (1, 2)), p("a", (1, 2, 0), (1, 2, 0), 1)]
    v = judge(0, parts, {"a": 2})
    assert (v.in_sync, v.behind) == (False, ("a-0",))
    assert v.safe_to_stop  # a-1 keeps 2 of 3 without it


def test_the_last_replica_above_min_isr_holds_the_stop():
    parts = [p("a", (0, 1, 2), (0, 1)), p("b", (0, 1, 2), (0, 1, 2))]
    v = judge(0, parts, {"a": 2, "b": 2})
    assert v.in_sync and not v.safe_to_stop and v.holding == ("a-0",)
    assert "a-0 would fall under min ISR" in v.describe()
    behind = judge(2, parts, {"a": 2, "b": 2})  # out of a's ISR: stopping it costs a nothing
    assert (behind.in_sync, behind.safe_to_stop) == (False, True)


def test_partitions_that_waiting_cannot_help_never_hold_a_stop():
    """RF 1, or RF equal to min ISR: any restart makes them refuse writes, however long the
    roll waits; the gate must not hold the roll forever for them."""
    parts = [p("single", (0,), (0,)), p("tight", (0, 1), (0, 1))]
    assert judge(0, parts, {"single": 1, "tight": 2}).safe_to_stop


def test_a_topic_without_its_own_min_isr_uses_the_default():
    parts = [p("a", (0, 1, 2), (0, 1))]
    assert judge(0, parts, {}).safe_to_stop  # default 1: one left is enough
    assert not judge(0, parts, {}, default_min_isr=2).safe_to_stop


partitions = st.lists(
    st.tuples(st.sampled_from("abc"), st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4,
                                               unique=True), st.data()),
    max_size=12)


@settings(max_examples=300, deadline=None)
@given(partitions, st.fixed_dictionaries({t: st.integers(1, 3) for t in "abc"}), st.data())
def test_stopping_a_broker_the_gate_allows_never_breaks_min_isr(raw, min_isr, data):
    """Whatever the cluster looks like: if the gate says broker b may stop, then with b gone
    from every ISR, no partition that had its min ISR (and whose RF is above it) loses it."""
    parts = []
    for i, (topic, replicas, d) in enumerate(raw):
        isr = d.draw(st.lists(st.sampled_from(replicas), unique=True))
        parts.append(Partition(topic, i, tuple(replicas), tuple(isr)))
    b = data.draw(st.sampled_from(BROKERS))
    if not judge(b, parts, min_isr).safe_to_stop:
        return
    for q in parts:
        need = min_isr[q.topic]
        if len(q.replicas) > need and len(q.isr) >= need:
            assert len([r for r in q.isr if r != b]) >= need, q


def test_a_broker_without_replicas_asks_for_no_configs():
    """A pod just added hosts nothing yet: the client refuses an empty describe_configs, and
    a gate that failed on it kept the new brokers unready, so the growth never finished."""
    class Admin:
        def describe_configs(self, resources):
            raise AssertionError("called with nothing to describe")

    assert topic_min_isr(Admin(), set()) == {}
    assert judge(1, [Partition("a", 0, (0,), (0,))], {}).in_sync


class Admin:
    """Metadata of one partition that broker 0 keeps at its min ISR (2 of 3 in sync)."""

    def list_topics(self, timeout):
        part = SimpleNamespace(replicas=[0, 1, 2], isrs=[0, 1])
        return SimpleNamespace(topics={"a": SimpleNamespace(error=None, partitions={0: part})})

    def describe_configs(self, resources):
        done = Future()
        done.set_result({"min.insync.replicas": SimpleNamespace(value="2")})
        return {r: done for r in resources}


ALIVE_HELD = "in sync; must not stop: a-0 would fall under min ISR\n"


def gate_files(tmp_path, statefulset, rounds: int = 2) -> tuple[bool, str]:
    run(0, tmp_path, Admin(), interval=0.01, rounds=rounds, statefulset=statefulset)
    return (tmp_path / SAFE).exists(), (tmp_path / ALIVE).read_text()


def test_a_held_stop_is_released_only_when_the_statefulset_is_being_deleted(tmp_path):
    """`pulumi destroy` stops every broker at once: holding one back only makes it outlive
    the quorum its controlled shutdown needs (a destroy took 340 s instead of 57)."""
    live = {"metadata": {"name": "kafka"}}
    assert gate_files(tmp_path, lambda: live) == (False, ALIVE_HELD)
    assert gate_files(tmp_path, None)[0] is False  # no reader: held, as before
    deleting = {"metadata": {"name": "kafka", "deletionTimestamp": "2026-11-27T18:00:00Z"}}
    safe, said = gate_files(tmp_path, lambda: deleting)
    assert safe and "the StatefulSet is being deleted" in said
    assert gate_files(tmp_path, lambda: None)[0]  # already gone (kubectl's background delete)

    def forbidden():
        raise PermissionError("403 Forbidden")
    safe, said = gate_files(tmp_path, forbidden)
    assert not safe and "cannot read the StatefulSet: 403 Forbidden" in said
    answers = iter([live, deleting, live])  # once seen deleted, it stays released
    assert gate_files(tmp_path, lambda: next(answers), rounds=3)[0]


def test_a_client_that_stopped_trusting_the_brokers_is_made_anew(tmp_path):
    """After a CA rollover's new certificate the sidecar's first client (it read the old
    ca.crt) fails every read; the gate makes a new one rather than keep its broker unready."""

    class Untrusting(Admin):
        def list_topics(self, timeout):
            raise RuntimeError("SSL handshake failed: certificate verify failed")

    made = []

    def connect():
        made.append(Admin())
        return made[-1]

    run(0, tmp_path, Untrusting(), interval=0.01, rounds=RECONNECT_AFTER - 1, connect=connect)
    assert made == [] and not (tmp_path / IN_SYNC).exists()  # a blip does not cost a client
    run(0, tmp_path, Untrusting(), interval=0.01, rounds=RECONNECT_AFTER + 1, connect=connect)
    assert len(made) == 1 and (tmp_path / IN_SYNC).exists()  # the new client reads the cluster


def test_a_deleted_statefulset_releases_the_stop_before_the_metadata_read(tmp_path):
    """While its peers stop, a metadata read can take seconds: the release must not wait for
    it (CI saw a 341 s destroy with the StatefulSet read after the cluster's metadata)."""
    seen_when_asked = []

    class SlowAdmin(Admin):
        def list_topics(self, timeout):
            seen_when_asked.append((tmp_path / SAFE).exists())
            return super().list_topics(timeout)

    deleting = {"metadata": {"name": "kafka", "deletionTimestamp": "2026-11-27T18:00:00Z"}}
    live = {"metadata": {"name": "kafka"}}
    run(0, tmp_path, SlowAdmin(), interval=0.01, rounds=1, statefulset=lambda: live)
    assert not (tmp_path / EVERYONE_GOES).exists()  # a roll: the broker's shell never kills
    run(0, tmp_path, SlowAdmin(), interval=0.01, rounds=1, statefulset=lambda: deleting)
    assert seen_when_asked == [False, True]  # already released when the cluster was asked
    assert (tmp_path / EVERYONE_GOES).exists()  # and the broker's shell told (infra/broker.py)
    assert "the StatefulSet is being deleted" in (tmp_path / ALIVE).read_text()


@pytest.fixture
def api(tmp_path):
    """A real HTTPS endpoint on 127.0.0.1 that answers as the API server would, and the
    projected service-account files a pod would have."""
    from hanzo_stream.local.tls import make_tls

    tls = make_tls(tmp_path / "tls", hosts=("127.0.0.1",))
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "ca.crt").write_bytes(tls.ca_pem.read_bytes())
    (sa / "namespace").write_text("hanzo\n")
    (sa / "token").write_text("token-1\n")
    seen: list[tuple[str, str]] = []
    answer = {"code": 200, "body": {}}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers["Authorization"]))
            body = json.dumps(answer["body"]).encode()
            self.send_response(answer["code"])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls.keystore_pem)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1",
           "KUBERNETES_SERVICE_PORT": str(server.server_address[1])}
    yield SimpleNamespace(reader=lambda: statefulset_reader("kafka", sa, env), sa=sa,
                          seen=seen, answer=answer)
    server.shutdown()
    server.server_close()


def test_the_reader_asks_the_api_server_for_its_own_statefulset(api):
    read = api.reader()
    api.answer.update(code=200, body={"metadata": {"name": "kafka"}})
    assert not being_deleted(read())
    api.answer.update(body={"metadata": {"name": "kafka", "deletionTimestamp": "2026-11-27T18:00:00Z"}})
    assert being_deleted(read())
    (api.sa / "token").write_text("token-2\n")  # the kubelet rotated it
    api.answer.update(code=404, body={"kind": "Status", "reason": "NotFound"})
    assert read() is None and being_deleted(None)
    assert api.seen == [("/apis/apps/v1/namespaces/hanzo/statefulsets/kafka", "Bearer token-1")] * 2 \
        + [("/apis/apps/v1/namespaces/hanzo/statefulsets/kafka", "Bearer token-2")]
    api.answer.update(code=403, body={"kind": "Status", "reason": "Forbidden"})
    with pytest.raises(urllib.error.HTTPError, match="403"):
        read()  # a missing Role is an error to report, never "deleted"


def test_a_pod_without_a_token_has_no_reader(api):
    (api.sa / "token").unlink()
    assert api.reader() is None
