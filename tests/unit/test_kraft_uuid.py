"""Kafka Uuids (cluster and directory ids) never start with "-": the brokers' `kafka-storage
format --cluster-id ID` reads such an id as an option and fails, and the pod crash-loops (a
local dev stack drew one on 2026-12-02: 1 in 64 namespaces would). A derived id that was
fine before stays what it was, so no running stack's volumes change cluster."""

from __future__ import annotations

import base64
import uuid

from hanzo_stream.core.broker_config import kraft_uuid
from hanzo_stream.local.kafka import random_uuid
from infra.program import derived_cluster_id


def old_derivation(uid: str) -> str:  # what stacks were created with before the fix
    raw = uuid.uuid5(uuid.NAMESPACE_URL, f"hanzo-stream:kraft:{uid}").bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def uids(n: int) -> list[str]:
    return [str(uuid.UUID(int=i * 7919 + 1)) for i in range(n)]


def test_a_namespace_whose_id_started_with_a_dash_gets_a_stable_other_one():
    dashed = [u for u in uids(2000) if old_derivation(u).startswith("-")]
    assert dashed, "no such namespace among 2,000 (expected ~31): the derivation changed"
    for u in dashed:
        cid = derived_cluster_id(u)
        assert not cid.startswith("-") and cid == derived_cluster_id(u)
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16  # still a Kafka Uuid


def test_every_other_namespace_keeps_the_id_its_volumes_were_formatted_with():
    for u in uids(500):
        if not old_derivation(u).startswith("-"):
            assert derived_cluster_id(u) == old_derivation(u)


def test_random_ids_and_a_constant_candidate():
    assert not any(random_uuid().startswith("-") for _ in range(5000))
    dash = base64.urlsafe_b64decode("-" + "A" * 21 + "==")  # 16 bytes whose text starts with "-"
    try:
        kraft_uuid(lambda _: dash)
    except ValueError as e:
        assert "do not vary" in str(e)
    else:
        raise AssertionError("a candidate that never varies must not loop forever")
