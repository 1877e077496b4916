"""The controller quorum across deployments: the program grows it, never shrinks it.

Every broker is a KRaft voter (combined mode). Fewer pods than the last deployment ran
would leave their voters in the quorum, dead: 3 -> 1 loses the majority and with it the
cluster; 5 -> 3 leaves two of five voters dead, one failure from the same. So a smaller
`brokers` is refused before any Kubernetes object changes (every resource waits for the
guards, as for storageSize), compared with the `brokers` output of the stack's last
successful `pulumi up`. Shrinking is a person's job (docs/deploy.md, "Fewer brokers"),
who then says so with `brokersRemovedByHand`.
"""

from __future__ import annotations

from typing import Any

import pulumi

from .broker import FORMED_KEY, QUORUM_CONFIG_MAP
from .settings import PROJECT, SettingsError, StackSettings
from .topology import Topology, labels

OUTPUT = "brokers"  # the stack output the next `pulumi up` compares with


class QuorumShrinkRefused(SettingsError):
    """`brokers` is below what the last deployment ran; nothing was changed."""


def check(brokers: int, deployed: Any, removed_by_hand: int = 0) -> None:
    if deployed is None or brokers >= int(deployed) or brokers == removed_by_hand:
        return
    was = int(deployed)  # numbers cross the engine as floats
    lost = " (no majority left)" if brokers <= was // 2 else ""
    message = (f"{PROJECT}:brokers is {brokers} but the cluster runs {was}: its controller "
               f"quorum has {was} voters and {was - brokers} would vanish without leaving it"
               f"{lost}. Nothing was changed. The program does not shrink a cluster: set it "
               f"back with `pulumi config set brokers {was}`; to shrink by hand, see "
               f"docs/deploy.md \"Fewer brokers\".")
    pulumi.log.error(message)  # the reason first, as a plain diagnostic, then the traceback
    raise QuorumShrinkRefused(message)


def guard(s: StackSettings, last: pulumi.StackReference) -> pulumi.Output:
    """Resolves once `brokers` keeps every voter; raises QuorumShrinkRefused otherwise."""
    return last.get_output(OUTPUT).apply(
        lambda deployed: check(s.brokers, deployed, s.brokersRemovedByHand))


def formed_config_map(top: Topology) -> dict:
    """That the quorum exists, for the brokers' entrypoint (infra/broker.py format_volume).
    The program creates it only after the StatefulSet is ready, i.e. every broker is a voter:
    while it is missing (a stack's first `up`) a blank volume founds the quorum as rendered;
    once it exists a blank volume is a lost one and joins. Its content never changes, so no
    later `up` touches it, and a ConfigMap is outside the pod template: nothing restarts."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": QUORUM_CONFIG_MAP, "namespace": top.namespace,
                     "labels": labels("broker", QUORUM_CONFIG_MAP)},
        "data": {FORMED_KEY: "true"},
    }
