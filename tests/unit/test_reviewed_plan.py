"""`apply --plan`'s guard, in reconcile.run where every caller of apply gets it: a reviewed
plan runs only while the cluster is as it was read and the registry decides the same."""

from __future__ import annotations

import pytest

from hanzo_stream.reconcile.changes import CreateTopic, Diff, Move, RaiseReplication
from hanzo_stream.reconcile.plan import Plan
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


def test_apply_itself_refuses_before_it_touches_the_cluster():
    class Untouchable:  # any call would be a change made from a stale review
        def __getattr__(self, name):
            raise AssertionError(f"apply called the admin's {name} with a stale plan")

    with pytest.raises(StalePlan):
        apply(Untouchable(), None, Plan([create("b")], [], [], "fp1"), {}, None,
              reviewed=Plan([create("a")], [], [], "fp1"))
