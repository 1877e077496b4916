"""Apply's creates in chunks the KRaft controller accepts (it refuses a request that writes
more than 10,000 metadata records: 10,000 topics in one CreateTopics failed whole)."""

from __future__ import annotations

from concurrent.futures import Future

from hanzo_stream.reconcile import Plan, execute
from hanzo_stream.reconcile.apply import MAX_RECORDS_PER_REQUEST, chunks
from hanzo_stream.reconcile.changes import CreateAcl, CreateTopic, Diff
from hanzo_stream.registry.model import Acl


class Broker:
    """Answers create_topics / create_acls like the controller, refusing an oversized request."""

    def __init__(self) -> None:
        self.requests: list[int] = []

    def _answer(self, keys: list, records: int) -> dict:
        self.requests.append(records)
        out = {}
        for k in keys:
            f: Future = Future()
            if records > 10_000:
                f.set_exception(RuntimeError("Unable to perform excessively large batch operation."))
            else:
                f.set_result(None)
            out[k] = f
        return out

    def create_topics(self, topics, request_timeout=None, validate_only=False):
        return self._answer([t.topic for t in topics],
                            sum(1 + t.num_partitions + len(t.config) for t in topics))

    def create_acls(self, bindings, request_timeout=None):
        return self._answer(list(bindings), len(bindings))


def test_chunks_keep_order_and_stay_under_the_limit():
    assert list(chunks([3, 3, 3, 9, 1], lambda n: n, limit=6)) == [[3, 3], [3], [9], [1]]
    assert list(chunks([], lambda n: n)) == []


def test_ten_thousand_topics_and_fifty_thousand_acls_apply_in_accepted_requests():
    topics = [CreateTopic(f"t{i}", Diff(None, 2), Diff(None, None),
                          {"retention.ms": Diff(None, "1"), "cleanup.policy": Diff(None, "delete")})
              for i in range(10_000)]
    acls = [CreateAcl(Acl(f"User:u{i}", "TOPIC", f"t{i % 10_000}", "LITERAL", op))
            for i, op in enumerate(["READ", "WRITE", "DESCRIBE", "CREATE", "ALTER"] * 10_000)]
    broker = Broker()
    result = execute(broker, Plan([*topics, *acls], [], [], ""), {})
    assert result.ok, result.failed[:1]
    assert len(result.applied) == 60_000
    assert max(broker.requests) <= MAX_RECORDS_PER_REQUEST
    assert len(broker.requests) == 10 + 10  # 5 records a topic, 1 an ACL: 5,000 a request
