"""The program's resources, one Pulumi component per concern (as in pulumi/examples'
kubernetes-py-guestbook): each registers manifests that infra/program.py has already
rendered and the policy has checked; none renders anything itself.

The flat program registered every resource at the stack's root. Under a component a URN
carries the component's type, and a new URN is, to the engine, a new resource and the old
one deleted: the StatefulSet, and every broker with it. So every child is aliased to its
URN at the root (tests/unit/test_infra_urns.py holds the URNs of the flat program).
Each dependency is the one the flat program wired by hand, resource by resource: a
component as a dependency stands for all its children, and only the Reconciler is used so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from . import k8s, storage

TYPE = "hanzo-stream:infra:{}"
AT_ROOT = [pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)]  # where the flat program had it


@dataclass(frozen=True)
class Gate:
    """Resolves once every guard has passed (storage, quorum, CA rollover: infra/program.py);
    every Kubernetes object waits for it, so a refused update changes nothing."""

    ready: pulumi.Output

    def after(self, *deps: pulumi.Resource, **opts: Any) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(depends_on=self.ready.apply(lambda _: list(deps)), **opts)


class _Component(pulumi.ComponentResource):
    def __init__(self, name: str) -> None:
        super().__init__(TYPE.format(type(self).__name__), name)

    def _child(self, opts: pulumi.ResourceOptions) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
            parent=self, aliases=AT_ROOT))

    def apply(self, m: dict, opts: pulumi.ResourceOptions, name: str | None = None
              ) -> pulumi.Resource:
        return k8s.apply(m, self._child(opts), name=name)

    def apply_all(self, ms: list[dict], opts: pulumi.ResourceOptions) -> list[pulumi.Resource]:
        return [self.apply(m, opts) for m in ms]


class NetworkPolicies(_Component):
    """Registered before any pod is: the deny policy exists before the first pod does."""

    def __init__(self, name: str, policies: list[dict], gate: Gate,
                 ns: list[pulumi.Resource]) -> None:
        super().__init__(name)
        self.apply_all(policies, gate.after(*ns))
        self.register_outputs({})


@dataclass
class ClusterManifests:
    """The brokers and what they need. `secrets` holds every Secret of the stack (the Spark
    users' and Alertmanager's too): the brokers have always waited for all of them."""

    secrets: list[dict]
    objects: list[dict]  # service account, services, PDB, JMX rules, roll gate RBAC
    statefulset: dict
    storage_patches: list[dict]
    quorum_formed: dict
    rollout_minutes: int
    roller: list[dict] = field(default_factory=list)  # RBAC and the restart CronJob
    roll_job: dict | None = None
    roll_job_name: str = ""


class KafkaCluster(_Component):
    """Secrets, the brokers' StatefulSet, its claims' sizes, the quorum's record, the roller."""

    def __init__(self, name: str, m: ClusterManifests, gate: Gate,
                 ns: list[pulumi.Resource]) -> None:
        super().__init__(name)
        self._m, self._gate = m, gate
        in_ns = gate.after(*ns)
        self.secrets = self.apply_all(m.secrets, in_ns)
        objects = self.apply_all(m.objects, in_ns)
        # A roll restarts one broker at a time and waits for it to be back in sync (the roll
        # gate): the provider's default 10 minutes for the whole rollout is too short for 3+.
        self._rollout = pulumi.CustomTimeouts(create=f"{m.rollout_minutes}m",
                                              update=f"{m.rollout_minutes}m")
        self.brokers = self.apply(m.statefulset, gate.after(
            *ns, *self.secrets, *objects, ignore_changes=storage.IGNORE_ON_STATEFULSET,
            custom_timeouts=self._rollout))
        # The claims exist once the StatefulSet is ready. `destroy` leaves each patch's size
        # on its claim, which the namespace keeps: a patch managing the required storage
        # request cannot be deleted (pulumi destroy failed on it on the real cluster).
        for p in m.storage_patches:
            k8s.patch(p, self._child(gate.after(self.brokers, retain_on_delete=True)))
        self.apply(m.quorum_formed, gate.after(self.brokers))  # from now on, blank volumes join
        self._roller = self.apply_all(m.roller, in_ns)
        self.register_outputs({})

    def roll(self, reconciler: pulumi.Resource) -> None:
        """The roll Job, after the registry is applied: a stack grown from one broker restarts
        its first broker only once its topics are replicated to the new ones."""
        if self._m.roll_job is not None:
            self.apply(self._m.roll_job, self._gate.after(
                self.brokers, *self._roller, reconciler, custom_timeouts=self._rollout),
                name=self._m.roll_job_name)


class _AfterBrokers(_Component):
    """Manifests that wait for the brokers to be ready and every Secret to exist."""

    def __init__(self, name: str, manifests: list[dict], gate: Gate, cluster: KafkaCluster
                 ) -> None:
        super().__init__(name)
        self.apply_all(manifests, gate.after(cluster.brokers, *cluster.secrets))
        self.register_outputs({})


class Reconciler(_AfterBrokers):
    """The registry's ConfigMap and the Job that applies it, once the brokers are ready."""


class SchemaRegistry(_AfterBrokers):
    """Beside the brokers, once they are ready."""


@dataclass
class MonitoringManifests:
    services: list[dict]  # exporter, dead-letter monitor, Alertmanager: after the brokers
    operators: list[dict]  # PodMonitors, ServiceMonitors, PrometheusRule
    dashboards: list[dict]  # Grafana's ConfigMaps, in the monitoring namespace
    consumers: list[dict]  # the consumer jobs' Deployments: after the reconciler


class Monitoring(_Component):
    def __init__(self, name: str, m: MonitoringManifests, gate: Gate,
                 ns: list[pulumi.Resource], cluster: KafkaCluster, reconciler: Reconciler
                 ) -> None:
        super().__init__(name)
        self.apply_all(m.services, gate.after(cluster.brokers, *cluster.secrets))
        self.apply_all(m.operators, gate.after(*ns))
        self.apply_all(m.dashboards, gate.after())
        self.apply_all(m.consumers, gate.after(reconciler))
        self.register_outputs({})


class SparkJobs(_Component):
    """After the reconciler: topics, ACLs and SCRAM users exist."""

    def __init__(self, name: str, rbac: list[dict], apps: list[dict], gate: Gate,
                 ns: list[pulumi.Resource], reconciler: Reconciler) -> None:
        super().__init__(name)
        roles = self.apply_all(rbac, gate.after(*ns))
        self.apply_all(apps, gate.after(reconciler, *roles))
        self.register_outputs({})
