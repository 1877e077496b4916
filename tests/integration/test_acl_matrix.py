"""Least privilege, proven as a full matrix against the real broker.

Every principal x every topic x every topic operation, every group x READ/DESCRIBE/DELETE,
and the cluster operations: what the broker allows (tests/integration/acl_probe.py asks it)
must equal what Registry.acls() grants, plus the standard's own rule that every producer may
write dead_letter, evaluated by Kafka's rules (hanzo_stream/registry/access.py). Besides the
registry's principals the rows hold one declared in the registry with no grants, one the
registry does not know (a SCRAM user someone created by hand), and the super user `admin`
as the control row, for which every probe must answer "allowed" (a probe that can only say
"denied" would make a strict-looking matrix out of nothing).
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from hanzo_stream.core import dead_letter
from hanzo_stream.core.broker_config import BrokerSettings
from hanzo_stream.registry import Registry, load_registry
from hanzo_stream.registry.access import allows, may_write_somewhere
from hanzo_stream.registry.model import Acl

from . import acl_probe
from .acl_probe import CLUSTER, CLUSTER_OPS, GROUP_OPS, NEW_TOPIC, TOPIC_OPS, Answers, Target
from .conftest import Cluster, apply_registry, wait_for, wait_until_logged_in

pytestmark = pytest.mark.integration

NO_GRANTS = "acl-matrix-no-grants"  # declared in the registry, granted nothing
STRANGER = "acl-matrix-stranger"  # a SCRAM user the registry does not declare
FOREIGN_GROUP = "acl-matrix-foreign-group"  # a group the registry does not declare
SUPER_USER = BrokerSettings.admin_principal  # broker_config's super.users


def standard_grants(reg: Registry) -> set[Acl]:
    """The standard: every authenticated producer may write dead_letter."""
    return {Acl(f"User:{p}", "TOPIC", dead_letter.TOPIC, "LITERAL", "WRITE")
            for p in reg.principal_names()}


def expected(reg: Registry, who: str, rtype: str, name: str, op: str) -> bool:
    if who == SUPER_USER:
        return True
    acls = reg.acls() | standard_grants(reg)
    if (rtype, op) == ("CLUSTER", "IDEMPOTENT_WRITE"):
        return may_write_somewhere(acls, who)
    if (rtype, op) == ("CLUSTER", "CREATE"):  # CreateTopics: CREATE on the cluster or the name
        return allows(acls, who, rtype, name, op) or allows(acls, who, "TOPIC", NEW_TOPIC, op)
    return allows(acls, who, rtype, name, op)


def cells(reg: Registry, principals: list[str], groups: list[str]) -> list[acl_probe.Cell]:
    out: list[acl_probe.Cell] = []
    for who in principals:
        out += [(who, "TOPIC", t.name, op) for t in reg.topics for op in TOPIC_OPS]
        out += [(who, "GROUP", g, op) for g in groups for op in GROUP_OPS]
        out += [(who, "CLUSTER", CLUSTER, op) for op in CLUSTER_OPS]
    return out


def extended_registry(reg: Registry, tmp: Path) -> Registry:
    """topics.yaml plus one principal it declares and grants nothing (as a team would add it)."""
    doc = yaml.safe_load(Path(reg.path).read_text())
    doc["principals"].append({"name": NO_GRANTS, "description": "ACL matrix: declared, no grants."})
    path = tmp / "topics.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_registry(path)


@pytest.fixture(scope="module")
def matrix(hip_cluster: Cluster, registry: Registry, tmp_path_factory):
    """Apply the registry (with NO_GRANTS), add STRANGER by hand, probe every principal."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    reg = extended_registry(registry, tmp_path_factory.mktemp("acl-matrix"))
    extra = {NO_GRANTS: secrets.token_urlsafe(24), STRANGER: secrets.token_urlsafe(24)}
    apply_registry(hip_cluster, reg, {NO_GRANTS: extra[NO_GRANTS]})
    admin = hip_cluster.admin_client()
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    for f in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(STRANGER, info, extra[STRANGER].encode())]).values():
        f.result(timeout=30)
    conns = {p: hip_cluster.as_(p) for p in registry.principal_names()}
    conns |= {p: replace(hip_cluster.admin, username=p, password=pw) for p, pw in extra.items()}
    conns[SUPER_USER] = hip_cluster.admin
    try:
        wait_until_logged_in([conns[NO_GRANTS], conns[STRANGER]])
        # A fresh broker creates __consumer_offsets (50 partitions) on the first group request;
        # let that happen once, not under thirteen principals' concurrent probes.
        wait_for(lambda: admin.describe_consumer_groups([FOREIGN_GROUP], request_timeout=10)[
            FOREIGN_GROUP].result(timeout=15), 180, "the group coordinator")
        md = admin.list_topics(timeout=30)
        target = Target(
            topics={t.name: len(md.topics[t.name].partitions) for t in reg.topics},
            groups=(*sorted(g.name for g in reg.groups), FOREIGN_GROUP),
            broker_id=str(min(md.brokers)),
            retention_ms={t.name: t.managed_configs()["retention.ms"] for t in reg.topics})
        answers, t0 = Answers(), time.monotonic()
        own = {w: next((g.name for g in reg.groups if g.principal == w), None) for w in conns}
        # One thread per principal (the clients wait on the network, not the CPU). Everyone
        # produces first (the admin row writes every topic), so every fetch finds a record.
        with ThreadPoolExecutor(len(conns)) as pool:
            list(pool.map(lambda w: acl_probe.produce(conns[w], w, target, answers), conns))
            list(pool.map(lambda w: acl_probe.probe(conns[w], w, target, answers, own[w]), conns))
        print(f"\nprobed {len(conns)} principals in {time.monotonic() - t0:.1f}s")
        yield reg, sorted(conns), target, answers
    finally:
        for f in admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion(p, ScramMechanism.SCRAM_SHA_512) for p in extra]).values():
            f.result(timeout=30)


def mismatches(reg: Registry, answers: Answers, all_cells: list) -> list[str]:
    out = []
    for cell in all_cells:
        want = expected(reg, *cell)
        for source, got in answers.by_cell.get(cell, []):
            if got != want:
                who, rtype, name, op = cell
                out.append(f"{who} {op} on {rtype.lower()} {name}: broker says "
                           f"{'allowed' if got else 'denied'} ({source}), registry says "
                           f"{'allowed' if want else 'denied'}")
    return out


def test_the_broker_allows_exactly_what_the_registry_grants(matrix):
    reg, principals, target, answers = matrix
    all_cells = cells(reg, principals, list(target.groups))
    unanswered = [c for c in all_cells if not answers.by_cell.get(c)]
    wrong = mismatches(reg, answers, all_cells)
    sources = sorted({s for a in answers.by_cell.values() for s, _ in a})
    print(f"\nACL matrix: {len(principals)} principals x ({len(target.topics)} topics x "
          f"{len(TOPIC_OPS)} ops + {len(target.groups)} groups x {len(GROUP_OPS)} ops + cluster x "
          f"{len(CLUSTER_OPS)} ops) = {len(all_cells)} cells; {answers.count} broker answers from "
          f"{len(sources)} kinds of request; unanswered: {len(unanswered)}; mismatches: {len(wrong)}")
    for who in principals:
        granted = sorted(f"{op} {n}" for (w, _, n, op) in all_cells if w == who
                         and answers.by_cell.get((w, _, n, op)) and all(
                             v for _, v in answers.by_cell[(w, _, n, op)]))
        print(f"  {who}: {len(granted)} allowed" + ("" if who == SUPER_USER else f": {', '.join(granted)}"))
    assert not unanswered, unanswered[:20]
    assert not wrong, "\n".join(wrong)


def allowed_by_broker(answers: Answers, who: str) -> set[tuple[str, str, str]]:
    return {(r, n, op) for (w, r, n, op), said in answers.by_cell.items()
            if w == who and any(v for _, v in said)}


@pytest.mark.parametrize("who", [NO_GRANTS, STRANGER])
def test_a_principal_without_grants_may_only_dead_letter(matrix, who):
    """Declared but granted nothing, or not declared at all: only the standard's
    dead_letter rule (User:*) applies."""
    reg, principals, target, answers = matrix
    got = allowed_by_broker(answers, who)
    want = {(r, n, op) for (w, r, n, op) in cells(reg, [who], list(target.groups))
            if expected(reg, w, r, n, op)}
    assert got == want
    wildcard_topics = {t.name for t in reg.topics if "*" in t.producers}
    assert {n for r, n, _ in got if r == "TOPIC"} == wildcard_topics == {dead_letter.TOPIC}
    assert (who in reg.principal_names()) == (who == NO_GRANTS)


def test_every_probe_can_say_both_allowed_and_denied(matrix):
    """Each kind of request answered "allowed" somewhere (the admin row at least) and
    "denied" somewhere, so none of them is a probe that cannot tell."""
    _, _, _, answers = matrix
    said: dict[str, set[bool]] = {}
    for answered in answers.by_cell.values():
        for source, allowed in answered:
            said.setdefault(source, set()).add(allowed)
    one_sided = {s: v for s, v in said.items() if v != {True, False}}
    # Every principal may write dead_letter, so InitProducerId is never refused here; and
    # "implied" only ever records refusals.
    assert set(one_sided) <= {"produce (InitProducerId)", "implied"}, one_sided
