"""validate is the apply handlers in their validate-only mode: the same requests, each with
validate_only, none of those that cannot validate, and the brokers' answers sorted into
"rejected" and "not judged" (denied)."""

from __future__ import annotations

from concurrent.futures import Future

from confluent_kafka import KafkaError, KafkaException

from hanzo_stream.reconcile import Plan, execute, validate
from hanzo_stream.reconcile.changes import (
    AlterTopicConfigs,
    CreateAcl,
    CreateScramUser,
    CreateTopic,
    DeleteTopic,
    Diff,
    Move,
    RaiseReplication,
    SetUserQuotas,
)
from hanzo_stream.registry.model import Acl


def answer(error: KafkaError | None) -> Future:
    f: Future = Future()
    f.set_exception(KafkaException(error)) if error else f.set_result(None)
    return f


class Broker:
    """Records each request; refuses topic `bad`, denies topic `secret`."""

    VERDICT = {"bad": KafkaError(KafkaError.INVALID_CONFIG, "bad value"),
               "secret": KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied")}

    def __init__(self) -> None:
        self.requests: list[tuple[str, bool]] = []

    def _sent(self, name: str, kw: dict) -> None:
        self.requests.append((name, kw.get("validate_only", False)))

    def create_topics(self, topics, **kw):
        self._sent("create_topics", kw)
        return {t.topic: answer(self.VERDICT.get(t.topic)) for t in topics}

    def incremental_alter_configs(self, resources, **kw):
        self._sent("incremental_alter_configs", kw)
        return {r: answer(self.VERDICT.get(r.name)) for r in resources}

    def alter_user_quotas(self, wanted, validate_only=False):
        self._sent("alter_user_quotas", {"validate_only": validate_only})
        return dict.fromkeys(wanted)

    def create_acls(self, bindings, **kw):
        self._sent("create_acls", kw)
        return {b: answer(None) for b in bindings}

    def alter_user_scram_credentials(self, upserts, **kw):
        self._sent("alter_user_scram_credentials", kw)
        return {u.user: answer(None) for u in upserts}

    def delete_topics(self, names, **kw):
        self._sent("delete_topics", kw)
        return {n: answer(None) for n in names}


PLAN = Plan([CreateTopic(n, Diff(None, 1), Diff(None, None), {}) for n in ("bad", "fine", "secret")]
            + [AlterTopicConfigs("fine", {"retention.ms": Diff("1", "2")}),
               CreateAcl(Acl("User:a", "TOPIC", "fine", "LITERAL", "READ")), CreateScramUser("a"),
               SetUserQuotas("a", {"producer_byte_rate": Diff(None, 1024.0)}), DeleteTopic("old", 1)],
            [], [], "")


def test_validate_sends_what_apply_sends_with_validate_only_and_nothing_that_cannot_validate():
    judged, applied = Broker(), Broker()
    validate(judged, PLAN)
    execute(applied, PLAN, {"a": "pw"})
    validating = {n for n, _ in applied.requests} - {"create_acls", "alter_user_scram_credentials",
                                                     "delete_topics"}
    assert judged.requests == [(n, True) for n, _ in applied.requests if n in validating]
    assert not any(v for _, v in applied.requests)


def test_rejections_are_problems_and_denials_are_not_judged():
    problems, unjudged = validate(Broker(), PLAN)
    assert problems == ["broker rejects topic.create topic bad: 1 partitions, RF default, : bad value"]
    assert unjudged == ["topic.create topic secret: 1 partitions, RF default, "]


def test_a_raise_whose_every_throttle_is_refused_fails_each_topic_and_moves_nothing():
    """The throttle goes first; refused for every topic, the apply reports each one failed
    (it used to crash on the empty list) and sends no broker rate and no reassignment."""
    raise_bad = RaiseReplication("bad", Diff(1, 3), Diff(1, 2),
                                 (Move(0, Diff((1,), (1, 2, 3)), 1024),), throttle=10_000_000)
    broker = Broker()
    result = execute(broker, Plan([raise_bad], [], [], ""), {})
    assert [(c.topic, why.split(":")[0]) for c, why in result.failed] == [("bad", "setting the throttle")]
    assert broker.requests == [("incremental_alter_configs", False)]
