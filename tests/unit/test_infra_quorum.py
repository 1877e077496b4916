"""The quorum guard (infra/quorum.py): `brokers` below what the last deployment ran is
refused before any Kubernetes object changes; growing is allowed. "The last deployment" is
what the mocks are told the state holds."""

from __future__ import annotations

import json

import pytest

from .infra_helpers import RenderFailed, registered, render


def last(brokers: int, size: str = "10Gi") -> tuple[str, str]:
    return ("last-deployment", json.dumps({"outputs": {"brokers": float(brokers),
                                                       "storageSize": size}}))


@pytest.mark.parametrize(("was", "now", "lost"), [(3, 1, " (no majority left)"), (5, 3, "")])
def test_fewer_brokers_than_the_quorum_has_voters_is_refused(was, now, lost):
    sets = (("brokers", str(now)), ("initialControllers", "1"))
    with pytest.raises(RenderFailed) as why:
        render("dev", sets, (), (last(was),))
    want = (f"hanzo-stream:brokers is {now} but the cluster runs {was}: its controller quorum has "
            f"{was} voters and {was - now} would vanish without leaving it{lost}. Nothing was "
            f"changed. The program does not shrink a cluster: set it back with `pulumi config set "
            f"brokers {was}`")
    assert want in str(why.value)


def test_growing_and_staying_are_allowed_and_every_object_waits_for_the_guard():
    grown = render("dev", (("brokers", "3"), ("initialControllers", "1")), (), (last(1),))
    assert grown["outputs"]["brokers"] == {"value": 3, "secret": False}  # for the next up
    same = render("prod", (), (), (last(3, "50Gi"),))
    assert all("last-deployment" in r["dependencies"] for r in registered(same))


def test_a_shrink_done_by_hand_is_accepted_once_declared():
    out = render("prod", (("brokers", "3"), ("brokersRemovedByHand", "3")), (), (last(5, "50Gi"),))
    assert out["outputs"]["brokers"]["value"] == 3
    with pytest.raises(RenderFailed, match="brokers is 1 but the cluster runs 5"):  # not 3
        render("dev", (("brokers", "1"), ("brokersRemovedByHand", "3"),
                       ("initialControllers", "1")), (), (last(5),))
