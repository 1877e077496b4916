"""llm-metrics without a broker: exact counters and buckets, the /metrics text Prometheus
parses, dedupe by record time (window, cap, re-read after a restart), the checkpoint's round
trip and order, and the spec's `metrics:` and `dedupe_window` checks."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hanzo_stream.jobs import consumer
from hanzo_stream.jobs.llm_metrics import OTHER, LlmUsage, Settings
from hanzo_stream.jobs.spec import SpecInvalid, load_spec

ROOT = Path(__file__).resolve().parents[2]
CONSUMERS = ROOT / "consumers"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms: Kafka record timestamps of the tests
HOUR_MS = 3_600_000


def event(i: int, model="zen-72b", provider="together", latency=None, cost="0.0038", cache=False,
          **data) -> dict:
    d = {"request_id": f"r{i}", "model": model, "provider": provider, "prompt_tokens": 100 + i,
         "completion_tokens": 10 * i, "total_tokens": 100 + 11 * i, "cost_usd": Decimal(cost),
         "cache_hit": cache, **data}
    if latency is not None:
        d["latency_ms"] = latency
    return {"id": f"evt-{i}", "data": d}


def samples(usage: LlmUsage) -> dict[tuple, float]:
    """What Prometheus would ingest: the exposition text parsed by prometheus_client's parser."""
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry()
    reg.register(consumer.Published(usage))
    out = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out[(s.name, *sorted(s.labels.items()))] = s.value
    return out


@pytest.fixture
def settings(registry, tmp_path):
    return Settings.of(load_spec("llm-metrics", registry, CONSUMERS, tmp_path))


def test_counters_and_histogram_buckets_are_exact(settings):
    u = LlmUsage(settings)
    # latency on a bucket bound counts in that bucket (le is inclusive); 250 ms = 0.25 s exactly
    lat = [250, 251, 999, 1000, 1001, 120000, 120001, None]
    for i, ms in enumerate(lat):
        u.observe(event(i, latency=ms, cost=("0.1", "0.2", "0.7")[i % 3], cache=i == 2))
    u.observe(event(100, model="claude-sonnet-4", provider="anthropic", latency=5000, cost="3.8e-05"))
    s = samples(u)
    zen = (("model", "zen-72b"), ("provider", "together"))
    assert s[("hanzo_llm_requests_total", *zen)] == 8
    assert s[("hanzo_llm_cache_hits_total", *zen)] == 1
    assert s[("hanzo_llm_tokens_total", ("kind", "prompt"), *zen)] == sum(100 + i for i in range(8))
    assert s[("hanzo_llm_tokens_total", ("kind", "completion"), *zen)] == sum(10 * i for i in range(8))
    exact = sum(Decimal(("0.1", "0.2", "0.7")[i % 3]) for i in range(8))
    assert exact == Decimal("2.3") and s[("hanzo_llm_cost_usd_total", *zen)] == float(exact)
    assert sum((0.1, 0.2, 0.7)[i % 3] for i in range(8)) != float(exact)  # what floats would say
    buckets = {dict(k[1:])["le"]: v for k, v in s.items() if k[0] == "hanzo_llm_latency_seconds_bucket"
               and dict(k[1:])["model"] == "zen-72b"}
    assert buckets == {"0.25": 1, "0.5": 2, "1.0": 4, "2.5": 5, "5.0": 5, "10.0": 5, "20.0": 5,
                       "30.0": 5, "60.0": 5, "120.0": 6, "+Inf": 7}
    assert s[("hanzo_llm_latency_seconds_count", *zen)] == 7  # one event had no latency_ms
    assert s[("hanzo_llm_latency_seconds_sum", *zen)] == sum(ms for ms in lat if ms) / 1000
    claude = (("model", "claude-sonnet-4"), ("provider", "anthropic"))
    assert s[("hanzo_llm_cost_usd_total", *claude)] == 3.8e-05
    assert s[("hanzo_llm_latency_seconds_bucket", ("le", "2.5"), *claude)] == 0
    assert s[("hanzo_llm_latency_seconds_bucket", ("le", "5.0"), *claude)] == 1
    assert s[("hanzo_llm_metrics_events_total", ("outcome", "counted"))] == 9


def test_the_spec_sets_a_dedupe_window_by_time(settings):
    assert settings.dedupe_window_seconds == 3600  # consumers/llm-metrics.yaml: 1h


def test_a_retry_counts_once_within_the_window_and_again_after_it(settings):
    u = LlmUsage(settings)
    assert u.observe(event(1), 0, T0) == "counted"
    assert u.observe(event(2), 0, T0 + HOUR_MS) == "counted"
    assert u.observe(event(1), 0, T0 + HOUR_MS) == "duplicate"  # written exactly one window later
    assert u.observe(event(3), 0, T0 + HOUR_MS + 1) == "counted"  # the window moves past evt-1 ...
    assert u.observe(event(1), 0, T0 + HOUR_MS + 1) == "counted"  # ... so it is forgotten
    assert u.observe(event(2), 1, T0 + HOUR_MS + 1) == "counted"  # another partition has its own ids
    assert u.outcomes == {"counted": 5, "duplicate": 1, "dead_lettered": 0}


def test_the_window_is_the_newest_time_seen_not_the_arrival_order(settings):
    u = LlmUsage(settings)
    u.observe(event(1), 0, T0 + 2 * HOUR_MS)
    assert u.observe(event(2), 0, T0) == "counted"  # written before the window: not remembered
    assert u.observe(event(2), 0, T0 + 2 * HOUR_MS) == "counted"
    assert u.observe(event(3), 0) == "counted"  # no record timestamp: the partition's newest time
    assert u.observe(event(3), 0, T0 + 3 * HOUR_MS) == "duplicate"
    assert u.remembered() == 3


def test_the_cap_forgets_the_oldest_ids_first_and_says_so(settings):
    import dataclasses

    u = LlmUsage(dataclasses.replace(settings, dedupe_max_ids=3))
    for i in (1, 2, 3, 4):
        assert u.observe(event(i), 0, T0 + i) == "counted"  # 4 pushes out 1, the oldest
    assert u.observe(event(2), 0, T0 + 5) == "duplicate"
    assert u.observe(event(1), 0, T0 + 6) == "counted"  # forgotten before its hour: counted again
    assert u.evicted == 2 and u.remembered() == 3  # 1, then 2 (pushed out by 1's second copy)
    u.seen(0, "relearned", T0 + 7, relearn=True)  # re-reading after a restart: counted back then
    assert u.evicted == 2
    s = samples(u)
    assert s[("hanzo_llm_dedupe_evicted_total",)] == 2
    again = LlmUsage(settings)
    again.restore(json.loads(json.dumps(u.to_json())))
    assert samples(again)[("hanzo_llm_dedupe_evicted_total",)] == 2  # a counter: no reset on restart


def test_label_cardinality_is_capped(settings):
    u = LlmUsage(Settings(max_series=2))
    for i, m in enumerate(("a", "b", "c", "d", "a")):
        u.observe(event(i, model=m))
    assert {k: s.requests for k, s in u.series.items()} == {("a", "together"): 2, ("b", "together"): 1,
                                                          (OTHER, OTHER): 2}


def test_state_round_trips_and_changed_buckets_restart_only_the_histogram(settings):
    u = LlmUsage(settings)
    for i in range(5):
        u.observe(event(i, latency=300 * i, cost="0.000001"))
    u.dead_lettered(2)
    doc = json.loads(json.dumps(u.to_json()))  # what the state file holds
    again = LlmUsage(settings)
    again.restore(doc)
    assert samples(again) == samples(u)
    other = LlmUsage(Settings(latency_buckets=(Decimal("1"), Decimal("2"))))
    other.restore(doc)
    (s,) = other.series.values()
    assert (s.requests, s.cost_usd, s.latency_count, s.latency_buckets) == (5, Decimal("0.000005"), 0, [0, 0])


@pytest.mark.parametrize("change, message", [
    ({"latency_buckets": [1, 0.5]}, "latency_buckets: increasing positive seconds"),
    ({"latency_buckets": []}, "latency_buckets"),
    ({"max_series": 0}, "max_series: a positive integer"),
    ({"alerts": {"latency_p95_seconds": -1}}, "alerts.latency_p95_seconds: a positive number"),
    ({"alerts": {"p99": 3}}, "alerts.p99: unknown key"),
    ({"colour": "red"}, "metrics.colour: unknown key"),
    ({"dedupe_max_ids": 0}, "dedupe_max_ids: a positive integer"),
])
def test_metrics_block_problems_name_the_field(registry, tmp_path, change, message):
    doc = yaml.safe_load((CONSUMERS / "llm-metrics.yaml").read_text())
    doc["metrics"] = {**doc["metrics"], **change}
    doc["job"] = str(ROOT / doc["job"])
    d = tmp_path / "consumers"
    d.mkdir()
    (d / "llm-metrics.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecInvalid, match=message):
        Settings.of(load_spec("llm-metrics", registry, d, tmp_path))


def _spec_file(tmp_path: Path, edit) -> Path:
    doc = yaml.safe_load((CONSUMERS / "llm-metrics.yaml").read_text())
    doc["job"] = str(ROOT / doc["job"])
    edit(doc)
    d = tmp_path / "consumers"
    d.mkdir()
    (d / "llm-metrics.yaml").write_text(yaml.safe_dump(doc))
    return d


def test_an_old_spec_with_a_record_count_window_is_told_where_it_moved(registry, tmp_path):
    d = _spec_file(tmp_path, lambda doc: doc["metrics"].update(dedupe_window=2000))
    with pytest.raises(SpecInvalid) as e:
        Settings.of(load_spec("llm-metrics", registry, d, tmp_path))
    assert e.value.problems == [f"{d / 'llm-metrics.yaml'}: metrics.dedupe_window: moved to top-level "
                                "dedupe_window, a duration such as 1h"]


@pytest.mark.parametrize("window, seconds", [(None, 3600), ("15m", 900), ("2h", 7200)])
def test_the_dedupe_window_is_a_duration_defaulting_to_an_hour(registry, tmp_path, window, seconds):
    def edit(doc):
        doc.pop("dedupe_window")
        if window:
            doc["dedupe_window"] = window

    d = _spec_file(tmp_path, edit)
    assert Settings.of(load_spec("llm-metrics", registry, d, tmp_path)).dedupe_window_seconds == seconds


def test_a_dedupe_window_under_a_second_is_refused(registry, tmp_path):
    d = _spec_file(tmp_path, lambda doc: doc.update(dedupe_window="0s"))
    with pytest.raises(SpecInvalid, match=r"llm-metrics.yaml: dedupe_window: a duration of at least 1s"):
        Settings.of(load_spec("llm-metrics", registry, d, tmp_path))


def test_a_partition_resumes_at_the_further_of_checkpoint_and_commit():
    assert consumer.start_from(None, None) is None  # neither: the earliest retained offset
    assert consumer.start_from(40, -1001) == 40  # crash after the state write, before the commit
    assert consumer.start_from(40, 55) == 55  # another replica went further while we were away
    assert consumer.start_from(None, 7) == 7


class FakeMsg:
    """A record written at `ts` (ms, CreateTime); by default one a millisecond from T0."""

    def __init__(self, topic, partition, offset, value, key=b"team", ts=None):
        self._t, self._p, self._o, self._v, self._k = topic, partition, offset, value, key
        self._ts = T0 + offset if ts is None else ts

    def timestamp(self):
        return 1, self._ts  # confluent_kafka.TIMESTAMP_CREATE_TIME

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def value(self):
        return self._v

    def key(self):
        return self._k

    def error(self):
        return None


class Recorder:
    """The fake consumer and KafkaOut of one job, logging the order of side effects."""

    def __init__(self, log):
        self.log = log
        self.metadata: dict[tuple[str, int], str] = {}  # of the last commit, per partition

    def flush_or_raise(self):
        self.log.append("flush")

    def dead_letter(self, rejected, stage, failed_at):
        self.log.append(("dead_letter", rejected[0].error_class, rejected[0].offset, stage))

    def commit(self, offsets, asynchronous):
        self.log.append(("commit", {(tp.topic, tp.partition): tp.offset for tp in offsets}))
        self.metadata.update({(tp.topic, tp.partition): tp.metadata for tp in offsets})


def test_checkpoint_acknowledges_dead_letters_then_writes_state_then_commits(registry, tmp_path):
    from hanzo_stream.schemas.store import load

    spec = load_spec("llm-metrics", registry, CONSUMERS, tmp_path)
    log: list = []
    rec = Recorder(log)
    job = consumer.MetricsConsumer(spec, registry, load(ROOT / "schemas"), None, consumer=rec, kafka_out=rec)
    job.assigned = {("llm_usage", 3)}
    std = (ROOT / "schemas/examples/llm.usage.completed/valid/standard.json").read_bytes()
    job.handle(FakeMsg("llm_usage", 3, 10, std))
    job.handle(FakeMsg("llm_usage", 3, 11, b"{not json"))
    state = Path(spec.checkpoint) / consumer.STATE_FILE
    real_save = job.state.save

    def save(*a):
        log.append("state")
        real_save(*a)

    job.state.save = save
    assert samples(job.usage.snapshot()) != samples(job.published.current)  # not shown before the checkpoint
    assert job.checkpoint() == {("llm_usage", 3): 12}
    assert log == [("dead_letter", "json.malformed", 11, "job:llm-metrics"), "flush", "state",
                   ("commit", {("llm_usage", 3): 12})]
    assert samples(job.published.current) == samples(job.usage)
    doc = json.loads(state.read_text())
    assert doc["offsets"] == {"llm_usage": {"3": 12}}
    assert doc["newest_ms"] == {"llm_usage": {"3": T0 + 10}}  # the valid record's time
    assert rec.metadata == {("llm_usage", 3): f"newest_ms={T0 + 10}"}  # ... also for the next owner
    assert doc["metrics"]["series"][0]["cost_usd"] == "0.0038"  # the event's decimal text
    assert doc["metrics"]["outcomes"] == {"counted": 1, "duplicate": 0, "dead_lettered": 1}
    # A restart continues the same counters from the same offsets.
    again = consumer.MetricsConsumer(spec, registry, load(ROOT / "schemas"), None, consumer=rec,
                                     kafka_out=rec)
    assert again.positions == {("llm_usage", 3): 12}
    assert samples(again.published.current) == samples(job.usage)


def test_metrics_are_served_over_http_on_a_free_port(settings):
    u = LlmUsage(settings)
    u.observe(event(1, latency=400))
    server, url = consumer.serve(consumer.Published(u), "127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert 'hanzo_llm_latency_seconds_bucket{le="0.5",model="zen-72b",provider="together"} 1.0' in text
    finally:
        server.shutdown()


def test_scrape_target_file_is_prometheus_file_sd(tmp_path):
    f = consumer.write_target(str(tmp_path / "targets"), "llm-metrics", "http://127.0.0.1:9464")
    assert json.loads(f.read_text()) == [{"targets": ["127.0.0.1:9464"],
                                          "labels": {"consumergroup": "llm-metrics"}}]


# ---------------------------------------------------------------- alerts from the spec

def _promtool(*args) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool")
    assert exe, "promtool missing: apt-get install prometheus"
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=120)


def _write(tmp_path: Path, s: Settings) -> tuple[Path, Path]:
    from hanzo_stream.monitoring import llm_alerts

    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "tests").mkdir(exist_ok=True)
    rules = tmp_path / "rules" / llm_alerts.GENERATED_FILE.name
    rules.write_text(llm_alerts.render(s))
    test = tmp_path / "tests" / "llm-alerts.test.yaml"
    test.write_text(llm_alerts.render_tests(s))
    return rules, test


def test_alert_thresholds_come_from_the_spec_and_promtool_proves_them(settings, tmp_path):
    import dataclasses

    from hanzo_stream.monitoring import llm_alerts

    assert llm_alerts.settings(ROOT) == settings  # monitoring/ is generated from the spec
    custom = dataclasses.replace(settings, alerts=dataclasses.replace(
        settings.alerts, latency_p95_seconds=4, latency_for="3m", cost_usd_per_hour=7.5, cost_for="20m"))
    rules, test = _write(tmp_path, custom)
    res = _promtool("test", "rules", test)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = yaml.safe_load(rules.read_text())["groups"][0]["rules"]
    assert [(r["alert"], r["expr"].rsplit(" ", 1)[-1], r["for"]) for r in doc] == [
        ("LlmLatencyP95High", "4", "3m"), ("LlmCostSpike", "7.5", "20m")]


@pytest.mark.parametrize("mutation", [("> 30\n", "> 60\n"), ("rate(hanzo_llm_cost_usd_total[5m])) * 3600",
                                                              "rate(hanzo_llm_cost_usd_total[5m]))"),
                                      ("for: 10m", "for: 0m")])
def test_promtool_catches_rules_that_ignore_the_spec(settings, tmp_path, mutation):
    rules, test = _write(tmp_path, settings)
    text = rules.read_text()
    assert mutation[0] in text
    rules.write_text(text.replace(*mutation))
    res = _promtool("test", "rules", test)
    assert res.returncode != 0, "the generated promtool test is vacuous"


class FakeGroup(Recorder):
    """The consumer side of a (re)assignment: one partition whose records were written at
    `times` (ms, by offset; default 100 records from T0), nothing committed unless `commits`
    says (partition -> (offset, metadata)). offsets_for_times answers as Kafka does."""

    def __init__(self, log, times=None, commits=None):
        super().__init__(log)
        self.times = [T0 + i for i in range(100)] if times is None else times
        self.commits = commits or {}

    def committed(self, partitions, timeout):
        from confluent_kafka import TopicPartition

        return [TopicPartition(tp.topic, tp.partition, *self.commits.get(tp.partition, (-1001, "")))
                for tp in partitions]

    def get_watermark_offsets(self, tp, timeout):
        return 0, len(self.times)

    def offsets_for_times(self, partitions, timeout):
        """The first offset written at or after each time; -1 (the end) when none is."""
        from confluent_kafka import TopicPartition

        assert all(tp.offset >= 0 for tp in partitions)  # -1 and -2 mean latest and earliest
        return [TopicPartition(tp.topic, tp.partition,
                               next((o for o, t in enumerate(self.times) if t >= tp.offset), -1))
                for tp in partitions]

    def assign(self, partitions):
        self.log.append(("assign", [(tp.partition, tp.offset) for tp in partitions]))


def _values(n: int) -> list[bytes]:
    std = json.loads((ROOT / "schemas/examples/llm.usage.completed/valid/standard.json").read_text())
    return [json.dumps(std | {"id": f"evt-{i}"}).encode() for i in range(n)]


def _job(spec, registry, group):
    from hanzo_stream.schemas.store import load

    return consumer.MetricsConsumer(spec, registry, load(ROOT / "schemas"), None, consumer=group,
                                    kafka_out=Recorder(group.log))


def test_a_retry_5000_records_after_its_original_counts_once(registry, tmp_path):
    spec = load_spec("llm-metrics", registry, CONSUMERS, tmp_path)
    values = _values(5000)
    job = _job(spec, registry, FakeGroup([]))
    for i, v in enumerate([*values, values[0]]):  # 10 records/s: 5,000 records are 500 s
        job.handle(FakeMsg("llm_usage", 3, i, v, ts=T0 + 100 * i))
    assert job.usage.outcomes == {"counted": 5000, "duplicate": 1, "dead_lettered": 0}


def test_a_retry_of_an_event_counted_before_a_restart_still_counts_once(registry, tmp_path):
    from confluent_kafka import TopicPartition

    spec = load_spec("llm-metrics", registry, CONSUMERS, tmp_path)
    values = _values(4)
    log: list = []
    first = _job(spec, registry, FakeGroup(log))
    first.on_assign(first.consumer, [TopicPartition("llm_usage", 3)])
    for i in range(3):
        first.handle(FakeMsg("llm_usage", 3, i, values[i]))
    first.checkpoint()
    assert first.usage.outcomes["counted"] == 3

    again = _job(spec, registry, FakeGroup(log))
    again.on_assign(again.consumer, [TopicPartition("llm_usage", 3)])
    assert log[-1] == ("assign", [(3, 0)])  # re-reads the window before its position 3
    assert again.positions[("llm_usage", 3)] == 3
    for i in range(3):  # what the first one counted: remembered, not counted again
        again.handle(FakeMsg("llm_usage", 3, i, values[i]))
    assert again.usage.outcomes == {"counted": 3, "duplicate": 0, "dead_lettered": 0}
    again.handle(FakeMsg("llm_usage", 3, 3, values[1]))  # a producer retry of offset 1
    again.handle(FakeMsg("llm_usage", 3, 4, values[3]))
    assert again.usage.outcomes == {"counted": 4, "duplicate": 1, "dead_lettered": 0}
    assert again.positions[("llm_usage", 3)] == 5


def _before_and_after_a_restart(registry, tmp_path, restart):
    """10 records written at T0, then 5,000 one a second from T0 + 3 h; counted and
    checkpointed by one member, then `restart(log, first)` assigns the partition to a new one:
    where its re-read starts, and what retries of offsets 1409 (written exactly an hour before
    the newest record, 3,601 records before the resume point) and 1408 count as."""
    from confluent_kafka import TopicPartition

    spec = load_spec("llm-metrics", registry, CONSUMERS, tmp_path)
    times = [T0 + i for i in range(10)] + [T0 + 3 * HOUR_MS + 1000 * i for i in range(5000)]
    values = _values(len(times))
    log: list = []
    first = _job(spec, registry, FakeGroup(log, times))
    first.on_assign(first.consumer, [TopicPartition("llm_usage", 3)])
    for i, v in enumerate(values):
        first.handle(FakeMsg("llm_usage", 3, i, v, ts=times[i]))
    first.checkpoint()
    assert first.usage.outcomes["counted"] == 5010

    again = restart(log, first)
    again.on_assign(again.consumer, [TopicPartition("llm_usage", 3)])
    (_, [(_, start)]) = log[-1]
    before = dict(again.usage.outcomes)
    for i in range(start, len(times)):  # the re-read, not counted
        again.handle(FakeMsg("llm_usage", 3, i, values[i], ts=times[i]))
    assert again.usage.outcomes == before
    again.handle(FakeMsg("llm_usage", 3, 5010, values[1409], ts=times[-1]))
    again.handle(FakeMsg("llm_usage", 3, 5011, values[1408], ts=times[-1]))
    return start, {k: v - before[k] for k, v in again.usage.outcomes.items()}


def test_a_restart_re_reads_the_window_by_time_from_its_checkpoint(registry, tmp_path):
    def restarted(log, first):
        return _job(first.spec, registry, FakeGroup(log, first.consumer.times))

    start, outcomes = _before_and_after_a_restart(registry, tmp_path, restarted)
    assert start == 1409  # the first record written within the hour before the newest one
    assert outcomes == {"counted": 1, "duplicate": 1, "dead_lettered": 0}  # 1409 a retry; 1408 older


def test_the_member_taking_a_partition_over_re_reads_by_the_commits_time(registry, tmp_path):
    def other_member(log, first):
        spec = load_spec("llm-metrics", registry, CONSUMERS, tmp_path / "other")  # no state file
        (meta,) = first.consumer.metadata.values()
        return _job(spec, registry, FakeGroup(log, first.consumer.times, {3: (5010, meta)}))

    start, outcomes = _before_and_after_a_restart(registry, tmp_path, other_member)
    assert start == 1409
    assert outcomes == {"counted": 1, "duplicate": 1, "dead_lettered": 0}


def test_a_commit_without_a_time_re_reads_from_the_earliest_offset(registry, tmp_path):
    def old_version(log, first):
        spec = load_spec("llm-metrics", registry, CONSUMERS, tmp_path / "old")
        return _job(spec, registry, FakeGroup(log, first.consumer.times, {3: (5010, "")}))

    start, outcomes = _before_and_after_a_restart(registry, tmp_path, old_version)
    assert start == 0  # all of it; the window still ends up the hour before the newest record
    assert outcomes == {"counted": 1, "duplicate": 1, "dead_lettered": 0}


@pytest.mark.parametrize("at, newest, expect", [
    (50, T0 + 49, 0),  # the window reaches past the earliest record
    (50, T0 + 49 + HOUR_MS, 49),
    (50, T0 + 60 + HOUR_MS, 50),  # the first record within the hour is past the position
    (50, T0 + 100 + HOUR_MS, 50),  # no record within the hour at all: nothing to re-read
    (50, None, 0),  # time unknown: from the earliest
    (0, T0, 0),  # nothing before the position
])
def test_where_the_re_read_starts(at, newest, expect):
    from confluent_kafka import TopicPartition

    group = FakeGroup([])
    assert consumer.relearn_from(group, TopicPartition("llm_usage", 3), at, 0, newest, HOUR_MS) == expect
    times = [T0 + HOUR_MS * i for i in range(10)]  # one record an hour
    assert consumer.relearn_from(FakeGroup([], times), TopicPartition("llm_usage", 3), 9, 0, times[8],
                                 HOUR_MS) == 7
