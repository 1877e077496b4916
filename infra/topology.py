"""Names, labels and DNS names shared by every module, so no two modules spell them apart."""

from __future__ import annotations

from dataclasses import dataclass

from hanzo_stream.core.broker_config import Node

from .settings import PORTS, StackSettings

PART_OF = "hanzo-stream"
__all__ = ["PORTS", "PART_OF", "Topology", "labels"]


def labels(component: str, name: str | None = None) -> dict[str, str]:
    """Selector-safe labels: every workload is part-of hanzo-stream with its component."""
    return {
        "app.kubernetes.io/name": name or component,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
    }


@dataclass(frozen=True)
class Topology:
    namespace: str
    cluster_domain: str
    brokers: int
    statefulset: str = "kafka"
    headless: str = "kafka-headless"
    client_service: str = "kafka"
    data_volume: str = "data"  # the StatefulSet's volumeClaimTemplate
    legacy_port: int = 0  # the LEGACY PLAINTEXT listener of a taken-over cluster; 0: none

    @staticmethod
    def of(s: StackSettings) -> Topology:
        return Topology(s.namespace, s.clusterDomain, s.brokers, statefulset=s.statefulSetName,
                        headless=s.headlessServiceName, client_service=s.clientServiceName,
                        legacy_port=s.legacyPlaintextPort)

    def pod(self, ordinal: int) -> str:
        return f"{self.statefulset}-{ordinal}"

    def claim(self, ordinal: int) -> str:
        """The PersistentVolumeClaim the StatefulSet controller makes for pod `ordinal`."""
        return f"{self.data_volume}-{self.pod(ordinal)}"

    def pod_host(self, ordinal: int) -> str:
        return f"{self.pod(ordinal)}.{self.headless}.{self.namespace}.svc.{self.cluster_domain}"

    @property
    def nodes(self) -> tuple[Node, ...]:
        """KRaft voters: node id = pod ordinal, reached through the headless service."""
        return tuple(Node(i, self.pod_host(i), PORTS["client"], PORTS["internal"],
                          PORTS["controller"]) for i in range(self.brokers))

    @property
    def bootstrap(self) -> str:
        """What in-cluster clients use: the client Service, which the certificate names."""
        return f"{self.client_service}.{self.namespace}.svc.{self.cluster_domain}:{PORTS['client']}"

    def dns_names(self, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
        """Every name a client may dial; the broker certificate carries all of them."""
        ns, d = self.namespace, self.cluster_domain
        return [
            f"*.{self.headless}.{ns}.svc.{d}",
            f"{self.headless}.{ns}.svc.{d}",
            f"{self.client_service}.{ns}.svc.{d}",
            f"{self.client_service}.{ns}.svc",
            f"{self.client_service}.{ns}",
            *extra,
        ]

    @property
    def broker_labels(self) -> dict[str, str]:
        return labels("broker", "kafka")
