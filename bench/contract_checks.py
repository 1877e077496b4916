"""The contract's checks alone, on rows cached in memory: this tree against an earlier commit.

    python bench/contract_checks.py [--against REV] [--events 100000] [--runs 8] [--no-doc]

For each job topic measured (llm_usage, events_plugin_ingestion), the same generated events
(bench/billing.py's llm.usage.completed, bench/pipeline.py's 2 KB insights events) are cached
in two tasks, and `classify` (hanzo_stream/jobs/contract.py) of this tree and of REV's
contract.py (read with `git show`) are each planned once, then executed alternately --runs
times in one JVM (local[2]), each run a full pass over the rows without a shuffle
(`queryExecution().toRdd().count()`: an aggregate would reuse its finished shuffle stages).
Both must find the same number of invalid rows. Rates are medians; the ratio is the median of
per-pair ratios. Writes the "Contract checks" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

SIZES = {"llm_usage": 1.0, "events_plugin_ingestion": 0.4}  # insights events are 2 KB: fewer


def contract_at(rev: str):
    """contract.py as it was at `rev`, imported as a module of its own."""
    text = subprocess.run(["git", "show", f"{rev}:hanzo_stream/jobs/contract.py"], cwd=ROOT,
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="hs-contract-")) / "contract_at_rev.py"
    path.write_text(text.replace("from ..", "from hanzo_stream."))
    spec = importlib.util.spec_from_file_location("contract_at_rev", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  # its dataclasses look it up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def events(topic: str, n: int) -> list[tuple[bytes, bytes]]:
    import billing
    import pipeline

    if topic == "llm_usage":
        return [(e.key.encode(), e.value.encode()) for e in (billing.llm_usage(i, n, 24) for i in range(n))]
    pad = "abcdefghij" * 820
    return [(k.encode(), v.encode()) for k, v in (pipeline._insights(i, pad) for i in range(n))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", default="HEAD~1", help="the git revision to compare with")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()

    from pyspark.sql import SparkSession
    from report import write_section

    from hanzo_stream.jobs import contract as tree
    from hanzo_stream.registry import load_registry
    from hanzo_stream.schemas.store import load_schemas

    rev = subprocess.run(["git", "rev-parse", "--short", args.against], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    old = contract_at(rev)
    spark = (SparkSession.builder.master("local[2]").config("spark.driver.memory", "3g")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.ansi.enabled", "true").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.variant.allowDuplicateKeys", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    schemas, registry = load_schemas(ROOT / "schemas"), load_registry(ROOT / "topics.yaml")

    def run(q) -> float:
        t = time.perf_counter()
        q._jdf.queryExecution().toRdd().count()
        return time.perf_counter() - t

    rows = []
    for topic, share in SIZES.items():
        n = int(args.events * share)
        df = (spark.createDataFrame([(topic, i % 8, i, k, v) for i, (k, v) in enumerate(events(topic, n))],
                                    "topic string, partition int, offset long, key binary, value binary")
              .coalesce(2).localCheckpoint(eager=True))
        qs = [m.classify(m.compile_contract(schemas, registry, topic), df)
              .select("error_class", "error_message", "event") for m in (old, tree)]
        bad = [q.where("error_class is not null").count() for q in qs]
        assert bad[0] == bad[1], f"{topic}: {rev} finds {bad[0]} invalid rows, this tree {bad[1]}"
        run(qs[0]), run(qs[1])  # warm-up: code generation, the JIT
        times: list[list[float]] = [[], []]
        for i in range(args.runs):
            for j in ((0, 1) if i % 2 == 0 else (1, 0)):
                times[j].append(run(qs[j]))
        ratio = statistics.median(a / b for a, b in zip(*times, strict=True))
        rows.append((topic, n, *(n / statistics.median(t) for t in times), ratio))
        print(f"{topic}: {rev} {rows[-1][2]:,.0f} ev/s, tree {rows[-1][3]:,.0f} ev/s, {ratio:.2f}x",
              flush=True)
    spark.stop()

    body = (f"`python bench/contract_checks.py --against {args.against} --events {args.events} "
            f"--runs {args.runs}` — the contract's checks (`classify`) alone on rows cached in two "
            f"tasks (local[2]), this tree ({head} and its uncommitted changes) against {rev}'s "
            "contract.py, run alternately in one JVM; medians, the ratio the median of per-pair "
            "ratios; both found the same invalid rows.\n\n"
            f"| topic | events | {rev} events/s | this tree events/s | tree / {rev} |\n"
            "|---|---|---|---|---|\n")
    body += "".join(f"| {t} | {n:,} | {a:,.0f} | {b:,.0f} | **{r:.2f}x** |\n" for t, n, a, b, r in rows)
    print(body)
    if not args.no_doc:
        write_section("Contract checks", body)


if __name__ == "__main__":
    main()
