"""The lag exporter's arithmetic and exposition format (no cluster needed)."""

from __future__ import annotations

import re

from hanzo_stream.monitoring.lag_exporter import GroupState, PartitionState, Snapshot, lag, render


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


SNAP = Snapshot(
    brokers={1: "127.0.0.1:9093", 2: "127.0.0.1:9094"},
    partitions=(
        PartitionState("llm_usage", 0, 1, (1, 2), (1, 2), 0, 100),
        PartitionState("llm_usage", 1, 1, (2, 1), (1,), 10, 50),
        PartitionState("dead_letter", 0, 2, (2,), (2,), 0, None),
    ),
    groups=(
        GroupState("billing-agg", 2, {("llm_usage", 0): 40, ("llm_usage", 1): 55}),
        GroupState("fresh", 0, {("llm_usage", 0): -1001}),
        GroupState("gone", 0, {("deleted_topic", 0): 5}),
    ),
)


def test_lag_is_log_end_minus_commit_never_negative_unknown_without_commit() -> None:
    assert lag(100, 40) == 60
    assert lag(50, 55) == 0  # committed after the log end was read
    assert lag(100, -1001) is None  # OFFSET_INVALID: no commit yet
    assert lag(None, 3) is None


def test_kafka_exporter_names_and_labels() -> None:
    s = _samples(render(SNAP))
    assert s['kafka_consumergroup_lag{consumergroup="billing-agg",partition="0",topic="llm_usage"}'] == 60
    assert s['kafka_consumergroup_lag{consumergroup="billing-agg",partition="1",topic="llm_usage"}'] == 0
    assert s['kafka_consumergroup_lag_sum{consumergroup="billing-agg",topic="llm_usage"}'] == 60
    assert s['kafka_consumergroup_current_offset_sum{consumergroup="billing-agg",topic="llm_usage"}'] == 95
    assert s['kafka_consumergroup_members{consumergroup="billing-agg"}'] == 2
    assert s['kafka_topic_partition_current_offset{partition="0",topic="llm_usage"}'] == 100
    assert s['kafka_topic_partition_oldest_offset{partition="1",topic="llm_usage"}'] == 10
    assert s['kafka_topic_partitions{topic="llm_usage"}'] == 2
    assert s['kafka_topic_partition_under_replicated_partition{partition="1",topic="llm_usage"}'] == 1
    assert s['kafka_topic_partition_under_replicated_partition{partition="0",topic="llm_usage"}'] == 0
    assert s['kafka_topic_partition_leader_is_preferred{partition="1",topic="llm_usage"}'] == 0
    assert s["kafka_brokers"] == 2


def test_unknowns_are_left_out_not_invented() -> None:
    text = render(SNAP)
    assert not re.search(r'kafka_consumergroup_lag\{consumergroup="fresh"', text)
    assert 'kafka_topic_partition_current_offset{partition="0",topic="dead_letter"}' not in text
    assert "deleted_topic" not in text
    assert 'kafka_consumergroup_members{consumergroup="fresh"} 0' in text


def test_exposition_format_is_parseable() -> None:
    text = render(SNAP)
    families = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    assert len(families) == len({f for f, _ in families})  # one TYPE line per family
    sample = re.compile(r'[a-z_]+(\{([a-z_]+="[^"]*",?)*\})? -?[0-9.e+]+')
    for line in text.splitlines():
        assert line.startswith("#") or sample.fullmatch(line), line


def test_label_values_are_escaped() -> None:
    snap = Snapshot({}, (PartitionState('we"ird\\topic', 0, 1, (1,), (1,), 0, 1),), ())
    assert 'topic="we\\"ird\\\\topic"' in render(snap)


class _FakeCollector:
    def __init__(self, fail: bool) -> None:
        self.fail, self.calls = fail, 0

    def collect(self) -> Snapshot:
        self.calls += 1
        if self.fail:
            raise RuntimeError("KafkaError: all brokers down")
        return SNAP


def _get(collector: _FakeCollector, path: str = "/metrics", min_interval: float = 60) -> tuple[int, str]:
    import threading
    import urllib.error
    import urllib.request
    from http.server import ThreadingHTTPServer

    from hanzo_stream.monitoring.lag_exporter import Exporter, _handler

    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Exporter(collector, min_interval)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                first = (r.status, r.read().decode())
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()
            return first
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
    finally:
        server.shutdown()
        server.server_close()


def test_unreadable_cluster_answers_503_so_up_is_zero() -> None:
    status, body = _get(_FakeCollector(fail=True))
    assert status == 503 and "all brokers down" in body


def test_metrics_are_served_and_collections_are_reused_within_min_interval() -> None:
    fake = _FakeCollector(fail=False)
    status, body = _get(fake)
    assert status == 200 and "kafka_consumergroup_lag{" in body
    assert fake.calls == 1  # two scrapes, one collection


def test_healthz_does_not_touch_the_cluster() -> None:
    fake = _FakeCollector(fail=True)
    assert _get(fake, "/healthz")[0] == 200 and fake.calls == 0
