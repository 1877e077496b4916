"""The roll gate's verdicts (hanzo_stream/roll_gate.py) on modelled cluster metadata; the
same gate against real brokers is in tests/integration/test_failover.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hanzo_stream.roll_gate import Partition, judge, topic_min_isr

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
