"""Numbers the docs quote, checked against what they count, so a new topic, group, principal
or job cannot leave a page behind."""

from __future__ import annotations

import re
from pathlib import Path

from hanzo_stream.registry import load_registry
from infra.spark import discover
from tests.integration.acl_probe import CLUSTER_OPS, GROUP_OPS, TOPIC_OPS

ROOT = Path(__file__).resolve().parents[2]
REG = load_registry(ROOT / "topics.yaml")


def doc(name: str) -> str:
    return (ROOT / "docs" / name).read_text()


def number(text: str, pattern: str) -> int:
    m = re.search(pattern, text)
    assert m, f"docs no longer say {pattern!r}: update this test with the page"
    return int(m.group(1).replace(",", ""))


def test_the_acl_matrix_page_counts_what_the_matrix_test_asks():
    text = doc("security.md")
    principals, topics, groups = len(REG.principals), len(REG.topics), len(REG.groups)
    # + the platform's own, one with no grants, one undeclared SCRAM user, admin
    rows = principals + len(REG.platform) + 3
    columns = topics * len(TOPIC_OPS) + (groups + 1) * len(GROUP_OPS) + len(CLUSTER_OPS)
    assert number(text, r"rows \((\d+)\)") == rows
    assert number(text, r"the registry's (\d+) principals") == principals
    assert number(text, r"and the platform's (\d+)") == len(REG.platform)
    assert number(text, r"\| (\d+) topics x READ") == topics
    assert number(text, r"(\d+) groups \(the registry's") == groups + 1
    assert number(text, r"the registry's (\d+) and one it does not declare") == groups
    assert number(text, r"That is ([\d,]+) cells") == rows * columns
    assert number(text, r"cells \((\d+) rows") == rows
    assert number(text, r"rows x (\d+) columns\)") == columns


def test_the_deploy_page_lists_every_spark_job():
    jobs = sorted(j.name for j in discover(ROOT, REG))
    row = next(ln for ln in doc("deploy.md").splitlines() if "per Spark job of `consumers/*.yaml`" in ln)
    listed = row.rsplit("|", 2)[-2].split("(")[0]
    assert sorted(j.strip() for j in listed.split(",")) == jobs


def test_the_reconciler_page_quotes_the_measured_plan_time():
    measured = re.search(r"plan, converged \| median ([\d.]+) s", doc("benchmarks.md"))
    assert measured, "benchmarks.md has no converged plan time"
    said = re.search(r"plan in\s+about ([\d.]+) s", doc("reconciler.md"))
    assert said and abs(float(said.group(1)) - float(measured.group(1))) <= 0.5, (
        said and said.group(0), measured.group(0))


def test_the_lag_runbook_tells_spark_jobs_from_plain_consumers_as_the_specs_do():
    """On-call reads "0 members" by this paragraph: a Spark job always shows none."""
    from hanzo_stream.jobs.spec import list_specs, load_spec

    text = " ".join(doc("runbooks/consumer-lag.md").split())
    spark = re.search(r"Spark jobs \(([^)]*)\) read by assignment", text)
    plain = re.search(r"For the plain consumers \(([^)]*)\) 0 members", text)
    assert spark and plain, "consumer-lag.md no longer lists the jobs: update this test with it"
    names = {m: sorted(re.findall(r"`([\w-]+)`", m.group(1))) for m in (spark, plain)}
    specs = {n: load_spec(n, REG, ROOT / "consumers").runtime for n in list_specs(ROOT / "consumers")}
    assert names[spark] == sorted(n for n, r in specs.items() if r == "spark")
    # the plain ones: every spec that is not Spark, and groups of ours with no spec (the
    # dead-letter monitor); all of them groups of the registry
    assert {n for n, r in specs.items() if r != "spark"} <= set(names[plain])
    assert set(names[plain]) <= {g.name for g in REG.groups} - set(names[spark])
