"""llm-metrics per-record cost, in process: how many llm_usage records one consumer can count.

Three sides on the same records (the demo's llm.usage.completed events, ~500 bytes), in
alternating rounds so drift on a shared machine hits all of them:
- `count only`: LlmUsage.observe on already-parsed events (the counters, dedupe, histogram);
- `parse + count`: json.loads with Decimal (cost_usd's decimal text) + observe;
- `handle`: what the job does per record (MetricsConsumer.handle): the client library's
  validation (same verdict as the Spark jobs), the Decimal parse, and the count.
The broker is not involved (confluent-kafka consumes ~260k msg/s per process, far above
these), so this is the job's own ceiling. Writes the "llm-metrics" section of docs/benchmarks.md.

    python bench/llm_metrics.py [--events 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_section  # noqa: E402

from hanzo_stream.jobs.consumer import MetricsConsumer  # noqa: E402
from hanzo_stream.jobs.llm_metrics import LlmUsage, Settings  # noqa: E402
from hanzo_stream.jobs.spec import load_spec  # noqa: E402
from hanzo_stream.local.demo import llm_usage  # noqa: E402
from hanzo_stream.registry import load_registry  # noqa: E402
from hanzo_stream.schemas.store import load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class Msg:
    __slots__ = ("_v", "_o")

    def __init__(self, value: bytes, offset: int):
        self._v, self._o = value, offset

    def topic(self):
        return "llm_usage"

    def partition(self):
        return 0

    def offset(self):
        return self._o

    def value(self):
        return self._v

    def key(self):
        return b"team"

    def timestamp(self):
        return 1, 1_767_225_600_000 + self._o  # CreateTime, one record a millisecond

    def error(self):
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = random.Random(7)
    values = [json.dumps(llm_usage(rng, datetime.now(UTC))).encode() for _ in range(args.events)]
    parsed = [json.loads(v, parse_float=Decimal) for v in values]
    registry = load_registry(ROOT / "topics.yaml")
    home = Path(tempfile.mkdtemp(prefix="bench-llm-"))
    spec = load_spec("llm-metrics", registry, ROOT / "consumers", home)
    schemas = load(ROOT / "schemas")

    def count_only() -> None:
        u = LlmUsage(Settings.of(spec))
        for i, e in enumerate(parsed):
            u.observe(e, i % 8)

    def parse_count() -> None:
        u = LlmUsage(Settings.of(spec))
        for i, v in enumerate(values):
            u.observe(json.loads(v, parse_float=Decimal), i % 8)

    def handle() -> None:
        job = MetricsConsumer(spec, registry, schemas, None, consumer=object(), kafka_out=object())
        for i, v in enumerate(values):
            job.handle(Msg(v, i))

    sides = {"count only": count_only, "parse + count": parse_count,
             "handle (validate + parse + count)": handle}
    rates: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(args.rounds):
        for name, fn in sides.items():
            t = time.perf_counter()
            fn()
            rates[name].append(args.events / (time.perf_counter() - t))
    med = {k: statistics.median(v) for k, v in rates.items()}
    base = med["handle (validate + parse + count)"]
    rows = "\n".join(f"| {k} | {v:,.0f} | {v / base:.2f}x |" for k, v in med.items())
    body = (f"`python bench/llm_metrics.py --events {args.events} --rounds {args.rounds}`: "
            f"{args.events:,} demo llm.usage.completed records (~{len(values[0])} bytes), "
            "in process, median of the rounds.\n\n"
            "| path | records/s | vs handle |\n|---|---|---|\n" + rows + "\n\n"
            "`handle` is the job's per-record work: the client library's validation and the "
            "exact Decimal parse of cost_usd take most of it, the counting itself little. One "
            "consumer counts that many records a second; the registry's 2 replicas share "
            "llm_usage's 8 partitions, and more replicas (up to 8) scale it out.\n")
    print(body)
    write_section("llm-metrics", body)


if __name__ == "__main__":
    main()
