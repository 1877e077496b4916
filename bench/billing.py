"""billing-agg at its production batch size: fixed per-batch cost and per-row cost, separately.

    python bench/billing.py [--events 800000] [--sweep-events 200000] [--sizes 20000,50000,200000]
                            [--hours 6] [--no-doc]

Defaults: 800,000 events give the production size (200,000) a warm-up batch and three full
batches after it; the smaller sizes read only the first 200,000 (ten and four batches), since
their many batches would otherwise dominate the run.

One run, on its own local broker (SASL_SSL, ACLs, the registry applied by the reconciler):
1. produce --events llm.usage.completed events into llm_usage, event times rising evenly over
   --hours hours (so windows close as the watermark passes them), keeping the exact per
   (team, org, hour) totals that were produced; the first --sweep-events first, the rest later;
2. run billing-agg `--once` from a fresh checkpoint at each max_offsets_per_trigger of --sizes
   (consumers/billing-agg.yaml's 200,000 is production), one after the other (sizes below
   production once the first --sweep-events are in, the rest over all events), plus one more run
   at the production size with RocksDB changelog checkpointing the other way round from the
   spec's own setting;
3. after each run, read what it wrote to billing_events (as admin) and assert every window the
   final watermark closed carries exactly the produced totals (request_count, token sums,
   cost_usd, cost_micros), no window twice with different totals and no window still open;
4. from the query progress (HANZO_STREAM_JOB_METRICS), every batch after the first
   (warm-up) gives (records, triggerExecution seconds); a least-squares line over all batches
   of all sizes splits batch time into a fixed per-batch cost and a per-row cost.
Writes the "## Billing" section of docs/benchmarks.md (unless --no-doc).
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pipeline import _apply_registry, _records, read_metrics, uuid7  # noqa: E402

from hanzo_stream.client.envelope import iso_ms  # noqa: E402
from hanzo_stream.client.producer import producer_config  # noqa: E402
from hanzo_stream.jobs import process as jobs  # noqa: E402
from hanzo_stream.local import credentials, kafka  # noqa: E402
from hanzo_stream.reconcile.secrets import env_name  # noqa: E402
from hanzo_stream.registry import load_registry  # noqa: E402

JOB, LLM, OUT = "billing-agg", "llm_usage", "billing_events"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
HOUR_MS = 3_600_000
BASE_MS = int(datetime(2026, 1, 5, tzinfo=UTC).timestamp() * 1000)  # hour-aligned event-time origin
TARGET = 25_000
PARTS = ("addBatch", "walCommit", "commitOffsets", "queryPlanning", "latestOffset", "getBatch")


# ---------------------------------------------------------------- the events and their totals



def event(i: int, n_events: int, hours: float) -> tuple[str, str, tuple[str, str, int], tuple]:
    """Event i: (key, JSON, its window (team, org, hour start ms), its figures).

    cost_usd has nine decimals, so summing it exactly and rounding half-up to micro-dollars
    is what the check tests, not a float's luck."""
    team, org = f"team-{i % 64}", f"org-{i % 16}"
    ms = BASE_MS + int(i * hours * HOUR_MS / n_events)  # rising: no event is late
    n = i % 97
    prompt, completion = 100 + n, 10 * n
    cost = Decimal(1_234_567 * n + i % 1000) / Decimal(10**9)
    value = (f'{{"schema":"hanzo.stream.v1","id":"{uuid7()}","type":"llm.usage.completed",'
             f'"source":"bench","timestamp":"{iso_ms(ms)}","team_id":"{team}","org_id":"{org}",'
             f'"data":{{"request_id":"req-{i}","model":"zen-1","provider":"hanzo",'
             f'"prompt_tokens":{prompt},"completion_tokens":{completion},'
             f'"total_tokens":{prompt + completion},"cost_usd":{cost}}}}}')
    return team, value, (team, org, ms - ms % HOUR_MS), (prompt, completion, prompt + completion, cost)


@dataclass
class Totals:
    request_count: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: Decimal = field(default_factory=Decimal)

    def add(self, p: int, c: int, t: int, cost: Decimal) -> None:
        self.request_count += 1
        self.prompt_tokens += p
        self.completion_tokens += c
        self.total_tokens += t
        self.cost_usd += cost

    def expected(self) -> dict:
        micros = int(self.cost_usd.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP) * 1_000_000)
        return {"request_count": self.request_count, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "total_tokens": self.total_tokens,
                "cost_usd": self.cost_usd, "cost_micros": micros}


def produce(conf: dict, first: int, end: int, n_events: int, hours: float,
            totals: dict[tuple[str, str, int], Totals]) -> None:
    """Events first..end-1 of n_events into llm_usage, their figures added to `totals`."""
    from confluent_kafka import Producer

    p = Producer(producer_config(conf, queue_buffering_max_kbytes=262144, linger_ms=20))
    errors: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    for i in range(first, end):
        key, value, window, figures = event(i, n_events, hours)
        totals.setdefault(window, Totals()).add(*figures)
        while True:
            try:
                p.produce(LLM, key=key, value=value, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(120) or errors:
        raise RuntimeError(f"producing failed: {len(errors)} errors, e.g. {errors[:3]}")


# ---------------------------------------------------------------- billing_events

def end_offsets(conf: dict) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(conf | {"group.id": "bench-billing-reader", "enable.auto.commit": False})
    try:
        parts = sorted(c.list_topics(OUT, timeout=10).topics[OUT].partitions)
        return {p: c.get_watermark_offsets(TopicPartition(OUT, p), timeout=10)[1] for p in parts}
    finally:
        c.close()


def read_output(conf: dict, start: dict[int, int], end: dict[int, int]) -> list[dict]:
    """billing_events records in [start, end) per partition: what one run wrote."""
    from confluent_kafka import Consumer, TopicPartition

    want = {p: e for p, e in end.items() if e > start.get(p, 0)}
    if not want:
        return []
    c = Consumer(conf | {"group.id": "bench-billing-reader", "enable.auto.commit": False})
    out: list[dict] = []
    try:
        c.assign([TopicPartition(OUT, p, start.get(p, 0)) for p in want])
        pos = dict(start)
        deadline = time.monotonic() + 120
        while any(pos.get(p, 0) < e for p, e in want.items()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not read {OUT} to its end: at {pos}, end {want}")
            for m in c.consume(1000, 1.0):
                if m.error():
                    raise RuntimeError(f"reading {OUT}: {m.error()}")
                pos[m.partition()] = m.offset() + 1
                if m.offset() < want.get(m.partition(), 0):
                    out.append(json.loads(m.value(), parse_float=Decimal))
    finally:
        c.close()
    return out


def check_exact(emitted: list[dict], totals: dict[tuple[str, str, int], Totals],
                watermark_ms: int) -> tuple[int, int]:
    """Every window the final watermark closed, emitted with exactly the produced totals; no
    window with two different totals; none still open. (closed windows, records read)."""
    seen: dict[tuple[str, str, int], dict] = {}
    problems = []
    for e in emitted:
        d = e["data"]
        start = int(datetime.strptime(d["window_start"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000)
        key = (d["team_id"], d["org_id"], start)
        got = {k: d[k] for k in ("request_count", "prompt_tokens", "completion_tokens",
                                 "total_tokens", "cost_usd", "cost_micros")}
        if key in seen and seen[key] != got:
            problems.append(f"{key}: emitted twice with different totals {seen[key]} / {got}")
        seen[key] = got
    closed = {k for k in totals if k[2] + HOUR_MS <= watermark_ms}
    for k in sorted(closed):
        want = totals[k].expected()
        if k not in seen:
            problems.append(f"{k}: closed (end <= watermark {iso_ms(watermark_ms)}) but never emitted")
        elif seen[k] != want:
            problems.append(f"{k}: emitted {seen[k]}, produced {want}")
    for k in sorted(set(seen) - closed):
        problems.append(f"{k}: emitted but its window is "
                        f"{'still open' if k in totals else 'not one that was produced'}")
    if problems:
        raise AssertionError(f"billing_events is not exact ({len(problems)} problems):\n"
                             + "\n".join(problems[:20]))
    if not closed:
        raise AssertionError(f"no window closed (final watermark {iso_ms(watermark_ms)}): nothing checked")
    return len(closed), len(emitted)


# ---------------------------------------------------------------- one --once run

@dataclass
class Run:
    label: str
    size: int
    changelog: bool
    batches: list[tuple[int, float]]  # (records, triggerExecution s), warm-up left out
    parts: dict[str, float]  # durationMs parts, seconds, warm-up left out
    state: dict[str, float]  # state-store timings (ms, summed over operators and tasks)
    warmup: tuple[int, float]
    wall_s: float
    windows: int
    records_out: int
    read: int

    @property
    def rows(self) -> int:
        return sum(r for r, _ in self.batches)

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.batches)

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def spec_dir(home: Path, label: str, size: int, changelog: bool) -> Path:
    """A copy of consumers/ whose billing-agg reads `size` records a batch, changelog on/off."""
    import yaml

    d = home / f"consumers-{label}"
    d.mkdir(exist_ok=True)
    doc = yaml.safe_load((ROOT / "consumers" / f"{JOB}.yaml").read_text())
    doc |= {"job": str(ROOT / doc["job"]), "max_offsets_per_trigger": size,
            "spark_conf": (doc.get("spark_conf") or {}) | {CHANGELOG: str(changelog).lower()}}
    (d / f"{JOB}.yaml").write_text(yaml.safe_dump(doc))
    return d


def state_timings(progress: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for op in progress.get("stateOperators", []):
        for k in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs"):
            out[k] = out.get(k, 0) + op.get(k, 0)
        for k, v in (op.get("customMetrics") or {}).items():
            if "Latency" in k or k.endswith("TimeMs"):
                out[k] = out.get(k, 0) + v
    return out


def run_once(home: Path, env: dict, admin_conf: dict, label: str, size: int, changelog: bool,
             totals: dict, started: list) -> Run:
    specs = spec_dir(home, label, size, changelog)
    job_home = home / f"run-{label}"
    metrics = home / f"{label}.jsonl"
    before = end_offsets(admin_conf)
    t0 = time.monotonic()
    jobs.start(JOB, job_home, env, once=True, registry=ROOT / "topics.yaml", consumers=specs,
               cwd=ROOT, extra_env={"HANZO_STREAM_JOB_METRICS": str(metrics)})
    started.append(job_home)
    if not jobs.wait(JOB, job_home, 3600):
        raise RuntimeError(f"{label}: billing-agg did not finish")
    started.remove(job_home)
    wall = time.monotonic() - t0
    st = jobs.status(JOB, job_home)
    if st["state"] != "exited":
        raise RuntimeError(f"{label}: billing-agg {st}: {jobs.log_file(JOB, job_home).read_text()[-3000:]}")
    ms = read_metrics(metrics)
    if any(m["kind"] == "late_mismatch" for m in ms):
        raise AssertionError(f"{label}: late rows dead-lettered != Spark's dropped count")
    progress = [m["progress"] for m in ms if m["kind"] == "progress"]
    first = next((i for i, p in enumerate(progress) if _records(p) > 0), None)
    if first is None:
        raise RuntimeError(f"{label}: no batch read anything")
    warm = progress[first]
    batches, parts, state = [], {}, {}
    for p in progress[first + 1:]:
        rows = _records(p)
        if rows == 0:  # a no-data batch (the watermark moving on): not a read
            continue
        batches.append((rows, p["durationMs"].get("triggerExecution", 0) / 1000))
        for k, v in p["durationMs"].items():
            parts[k] = parts.get(k, 0) + v / 1000
        for k, v in state_timings(p).items():
            state[k] = state.get(k, 0) + v
    watermark = max((p.get("eventTime", {}).get("watermark") for p in progress
                     if p.get("eventTime", {}).get("watermark")), default=None)
    if watermark is None:
        raise AssertionError(f"{label}: the query reported no watermark")
    wm_ms = int(datetime.strptime(watermark, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000)
    read = sum(_records(p) for p in progress)
    produced = sum(t.request_count for t in totals.values())
    if read != produced:
        raise AssertionError(f"{label}: the job read {read:,} records, {produced:,} were produced")
    emitted = read_output(admin_conf, before, end_offsets(admin_conf))
    windows, n_out = check_exact(emitted, totals, wm_ms)
    run = Run(label, size, changelog, batches, parts, state,
              (_records(warm), warm["durationMs"].get("triggerExecution", 0) / 1000), wall,
              windows, n_out, read)
    print(f"{label}: {len(batches)} batches after warm-up, {run.rows:,} events in {run.seconds:.1f} s "
          f"= {run.rate:,.0f} ev/s; {windows} closed windows exact (watermark {watermark}); "
          f"wall {wall:.0f} s", flush=True)
    return run


# ---------------------------------------------------------------- report

def fit(runs: list[Run]) -> tuple[float, float, int]:
    """(fixed s, per-row s, batches) of batch_seconds = fixed + per_row * rows."""
    import numpy as np

    pts = [b for r in runs for b in r.batches]
    if len({rows for rows, _ in pts}) < 2:
        return float("nan"), float("nan"), len(pts)
    per_row, fixed = np.polyfit([r for r, _ in pts], [s for _, s in pts], 1)
    return float(fixed), float(per_row), len(pts)


def report(args, n_events: int, sweep: list[Run], other: Run, prod: int,
           spec_changelog: bool) -> str:
    fixed, per_row, n_pts = fit(sweep)
    cmd = (f"python bench/billing.py --events {n_events} --sweep-events {args.sweep_events} "
           f"--sizes {','.join(str(r.size) for r in sweep)} --hours {args.hours:g}")
    lines = [
        f"`{cmd}`: one local broker (SASL_SSL, TLS 1.3, ACLs), {n_events:,} llm.usage.completed "
        f"events into {LLM} (8 partitions) over {args.hours:g} hours of event time, and "
        f"billing-agg `--once` (local[2]) from a fresh checkpoint at each max_offsets_per_trigger, "
        f"one after the other, on the same 2 cores. Production is {prod:,} "
        f"(consumers/{JOB}.yaml). Sizes below {other.size:,} read the first "
        f"{min(args.sweep_events, n_events):,} events (produced first), the rest read all of them. "
        "Each batch after the first (warm-up: connections, code "
        "generation, a cold JIT) counts: records from its offsets, time = triggerExecution. "
        f"Target from issue 11: {TARGET:,} ev/s at the production size, totals exact.",
        "",
        "| max_offsets_per_trigger | events read | batches after warm-up | their events | "
        "seconds in them | events/s | warm-up batch | closed windows exact |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sweep:
        size = f"**{r.size:,} (production)**" if r.size == prod else f"{r.size:,}"
        rate = f"**{r.rate:,.0f} ({r.rate / TARGET:.2f}x target)**" if r.size == prod else f"{r.rate:,.0f}"
        lines.append(f"| {size} | {r.read:,} | {len(r.batches)} | {r.rows:,} | {r.seconds:.1f} | {rate} | "
                     f"{r.warmup[0]:,} in {r.warmup[1]:.1f} s | {r.windows} "
                     f"({r.records_out} records read back) |")
    lines += [
        "",
        f"Least-squares fit over all {n_pts} batches of all sizes, batch seconds = fixed + "
        f"per-row x records: **fixed per-batch cost {fixed:.2f} s, per-row cost "
        f"{per_row * 1e6:.1f} µs/event** (a ceiling of {1 / per_row if per_row > 0 else float('inf'):,.0f} "
        f"ev/s were batches free; at {prod:,} a batch would take {fixed + per_row * prod:.1f} s, "
        f"{prod / (fixed + per_row * prod) if fixed + per_row * prod > 0 else 0:,.0f} ev/s).",
    ]
    prod_run = next((r for r in sweep if r.size == other.size), None)
    if prod_run is not None:
        on, off = (prod_run, other) if prod_run.changelog else (other, prod_run)
        lines += [
            "",
            f"RocksDB changelog checkpointing at {other.size:,} (`{CHANGELOG}`, through the spec copy's "
            f"`spark_conf`; the spec itself has it {'on' if spec_changelog else 'off'}):",
            "",
            "| changelog checkpointing | batches | events/s | state commit (commitTimeMs, summed "
            "over tasks) |",
            "|---|---|---|---|",
            *(f"| {name} | {len(r.batches)} | {r.rate:,.0f} | {r.state.get('commitTimeMs', 0) / 1000:.1f} s |"
              for name, r in (("on", on), ("off", off))),
            "",
            f"on / off: **{on.rate / off.rate if off.rate else 0:.2f}x**.",
        ]
    if prod_run is not None and prod_run.seconds:  # the production size, or the largest run
        total = prod_run.seconds
        shares = sorted(((k, v) for k, v in prod_run.parts.items() if k != "triggerExecution"),
                        key=lambda kv: -kv[1])
        state = prod_run.state
        lines += [
            "",
            f"Where a production-size batch's time goes ({prod_run.label}, durationMs over its "
            f"{len(prod_run.batches)} batches after warm-up, {total:.1f} s): "
            + ", ".join(f"{k} {v / total * 100:.0f}%" for k, v in shares if v / total >= 0.005) + ".",
            "State store (stateOperators, both operators: the dedup by id and the window "
            "aggregate; milliseconds summed over their tasks, which run 2 at a time): "
            + (", ".join(f"{k} {v / 1000:.1f} s" for k, v in sorted(state.items(), key=lambda kv: -kv[1])
                         if v >= 1) or "none reported") + ".",
            "",
            _sentence(prod_run, fixed, per_row, prod),
        ]
    return "\n".join(lines)


def _sentence(r: Run, fixed: float, per_row: float, prod: int) -> str:
    add = r.parts.get("addBatch", 0) / r.seconds if r.seconds else 0
    batch = fixed + per_row * prod
    fixed_share = fixed / batch if batch > 0 else 0
    return (f"Where the time goes: at {prod:,} records a batch the fixed cost is "
            f"{fixed_share * 100:.0f}% of a batch and the per-row cost the rest, and "
            f"{add * 100:.0f}% of batch time is addBatch (reading llm_usage, parsing, the dedup and "
            "window state, collecting the windows to the driver), so the rate at the production "
            f"size is set by the per-row cost ({per_row * 1e6:.1f} µs/event), not by per-batch "
            "overhead." if fixed_share < 0.5 else
            f"Where the time goes: at {prod:,} records a batch the fixed per-batch cost is still "
            f"{fixed_share * 100:.0f}% of a batch ({add * 100:.0f}% of batch time is addBatch), so "
            "larger batches, not faster rows, would raise the rate.")


# ---------------------------------------------------------------- main

def job_settings() -> tuple[int, bool]:
    """The job's production batch size and whether it runs with changelog checkpointing, from
    its spec and session settings (the spec's spark_conf included), read once."""
    from hanzo_stream.jobs.spark import session_conf
    from hanzo_stream.jobs.spec import load_spec

    with tempfile.TemporaryDirectory() as home:
        spec = load_spec(JOB, load_registry(ROOT / "topics.yaml"), ROOT / "consumers", Path(home))
        changelog = session_conf(spec, env={}).get(CHANGELOG, "false") == "true"
    return int(spec.max_offsets_per_trigger or 0), changelog


def main() -> None:
    prod, spec_changelog = job_settings()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=800_000, help="llm.usage events to produce")
    ap.add_argument("--sizes", default=f"20000,50000,{prod}",
                    help="max_offsets_per_trigger values, comma separated")
    ap.add_argument("--sweep-events", type=int, default=200_000,
                    help="events the sizes below production read (the first ones produced)")
    ap.add_argument("--hours", type=float, default=6, help="hours of event time the events span")
    ap.add_argument("--no-doc", action="store_true", help="print only; leave docs/ alone")
    ap.add_argument("--keep", action="store_true", help="keep the run's state directory")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    home = Path(tempfile.mkdtemp(prefix="hs-bench-billing-"))
    registry = load_registry(ROOT / "topics.yaml")
    creds = credentials.of_home(home, registry.principal_names())
    t_all = time.monotonic()
    cluster = kafka.start(home / "kafka", creds, heap_mb=1024)
    started: list[Path] = []
    try:
        _apply_registry(cluster, creds, registry)
        admin_conf = cluster.connection("admin", creds.admin).confluent()
        env = {"HANZO_STREAM_BOOTSTRAP": cluster.bootstrap,
               "HANZO_STREAM_SECURITY_PROTOCOL": "SASL_SSL",
               "HANZO_STREAM_SASL_MECHANISM": "SCRAM-SHA-512",
               "HANZO_STREAM_CA_FILE": cluster.ca_file,
               env_name("billing-aggregator"): creds.password("billing-aggregator")}
        conf = cluster.connection("llm-gateway", creds.password("llm-gateway")).confluent()
        totals: dict[tuple[str, str, int], Totals] = {}
        # Changelog checkpointing the other way round, at the production size (or, when
        # --sizes leaves it out, the largest size run).
        at = prod if prod in sizes else max(sizes)
        flip = not spec_changelog
        # Phase 1: sizes below the production size read the first --sweep-events events (their
        # many batches would otherwise dominate the run); phase 2: the rest of the events, with
        # event times rising on, then the production-size runs read everything.
        runs: dict[tuple[int, bool], Run] = {}
        produced = 0
        for end, phase in ((min(args.sweep_events, args.events), [s for s in sizes if s < at]),
                           (args.events, [s for s in sizes if s >= at])):
            if end > produced:
                t0 = time.monotonic()
                produce(conf, produced, end, args.events, args.hours, totals)
                print(f"produced events {produced:,}..{end - 1:,} in {time.monotonic() - t0:.1f} s "
                      f"({len(totals)} team/org/hour windows so far)", flush=True)
                produced = end
            for s in phase:
                runs[s, spec_changelog] = run_once(home, env, admin_conf, f"{s}", s, spec_changelog,
                                                   copy.deepcopy(totals), started)
        runs[at, flip] = run_once(home, env, admin_conf, f"{at}-changelog-{'on' if flip else 'off'}",
                                  at, flip, copy.deepcopy(totals), started)
        sweep = [runs[s, spec_changelog] for s in sizes]
        other = runs[at, flip]
    finally:
        for h in started:
            jobs.stop(JOB, h)
        kafka.stop(home / "kafka")

    text = report(args, args.events, sweep, other, prod, spec_changelog)
    print(text)
    print(f"\n(whole run {time.monotonic() - t_all:.0f} s)")
    if not args.no_doc:
        from report import write_section

        write_section("Billing", text)
    if args.keep:
        print(f"state kept in {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
