"""`apply --plan`'s guard, in reconcile.run where every caller of apply gets it: a reviewed
plan runs only while the cluster is as it was read and the registry decides the same, and a
file that is not a saved plan is refused with the reason."""

from __future__ import annotations

import pytest

from hanzo_stream.reconcile import run
from hanzo_stream.reconcile.changes import CreateTopic, Diff, Move, RaiseReplication
from hanzo_stream.reconcile.plan import Options, Plan
from hanzo_stream.reconcile.run import StalePlan, apply, check_reviewed


def create(name: str) -> CreateTopic:
    return CreateTopic(name, Diff(None, 4), Diff(None, None), {})


def raise_rf(copied: int, running: bool) -> RaiseReplication:
    return RaiseReplication("llm_usage", Diff(1, 3), Diff(1, 2),
                            (Move(0, Diff((1,), (1, 2, 3)), bytes=copied, running=running),), 50_000_000)


def test_the_same_decisions_on_the_same_cluster_pass_though_moves_progressed():
    reviewed = Plan([create("a"), raise_rf(0, False)], [], [], "fp1")
    fresh = Plan([create("a"), raise_rf(123_456, True)], [], [], "fp1")  # a move started meanwhile
    check_reviewed(reviewed, fresh)


def test_a_changed_cluster_refuses():
    with pytest.raises(StalePlan, match="the cluster changed since this plan was made"):
        check_reviewed(Plan([create("a")], [], [], "fp1"), Plan([create("a")], [], [], "fp2"))


@pytest.mark.parametrize("now", [[create("b")], [create("a"), create("b")], []])
def test_other_decisions_refuse(now):
    with pytest.raises(StalePlan, match="no longer gives the plan that was reviewed"):
        check_reviewed(Plan([create("a")], [], [], "fp1"), Plan(now, [], [], "fp1"))


class Untouchable:
    """An admin whose any use would be a change made from a stale review."""

    def __getattr__(self, name):
        raise AssertionError(f"the cluster was touched ({name}) with a stale plan")


def test_apply_itself_refuses_before_it_touches_the_cluster():
    with pytest.raises(StalePlan):
        apply(Untouchable(), None, Plan([create("b")], [], [], "fp1"), {}, None,
              reviewed=Plan([create("a")], [], [], "fp1"))


REVIEWED = Plan([create("a")], [], [], "fp1").to_json()


@pytest.mark.parametrize(("saved", "says"), [
    (REVIEWED.replace('"fp1"', '"fp0"'), "the cluster changed since this plan was made"),
    (REVIEWED.replace('"after": 4', '"after": 64'), "no longer gives the plan that was reviewed"),
    ('{"format": "hanzo-stream-plan/2", "fingerprint": "fp1"}', "not a plan `plan --out` wrote"),
    ('["a list"]', "not a plan this hanzo-stream can apply"),
    ('{"format": "hanzo-stream-plan/2", ', "Expecting property name"),
])
def test_a_caller_other_than_the_cli_is_refused_a_stale_or_forged_plan(monkeypatch, saved, says):
    """reconcile() with the JSON of a saved plan that is stale (another fingerprint), edited
    after review (another change under the same fingerprint) or not a plan at all: refused,
    naming the file, before the admin is used."""
    assert saved != REVIEWED
    monkeypatch.setattr(run, "plan", lambda admin, registry, opts: Plan([create("a")], [], [], "fp1"))
    with pytest.raises(StalePlan, match=says) as refused:
        run.reconcile(Untouchable(), None, {}, Options(), reviewed=saved, where="reviewed.json")
    assert "reviewed.json" in str(refused.value)


def test_the_reviewed_plan_runs_through_reconcile(monkeypatch):
    """The same decisions on the same cluster: reconcile goes on to apply the fresh plan."""
    fresh = Plan([create("a")], [], [], "fp1")
    ran = []
    monkeypatch.setattr(run, "plan", lambda admin, registry, opts: fresh)
    monkeypatch.setattr(run, "execute", lambda admin, p, *_: ran.append(p) or run.Result())
    monkeypatch.setattr(run, "await_visible", lambda *_: True)
    p, result = run.reconcile(Untouchable(), None, {}, Options(), reviewed=REVIEWED)
    assert ran == [fresh] and p is fresh and result.ok
