"""A Confluent-compatible schema registry on 8081, BACKWARD by default.

cp-schema-registry stores schemas in the `_schemas` topic of our own cluster, over
SASL_SSL like every other client; the JAAS line with the password comes from the
principal's Secret. `_schemas` gets the cluster's replication factor.
"""

from __future__ import annotations

from hanzo_stream.core.broker_config import Replication

from . import security_context
from .credentials import mechanism, password_env
from .settings import StackSettings
from .tls import CA_FILE, CA_MOUNT, ca_volume
from .topology import Topology, labels

PORT = 8081
LABELS = labels("schema-registry", "schema-registry")


def manifests(s: StackSettings, top: Topology) -> list[dict]:
    rf = Replication.for_cluster(top.brokers).default_replication_factor
    who = s.schemaRegistryPrincipal
    env = [
        {"name": "SCHEMA_REGISTRY_HOST_NAME", "valueFrom": {"fieldRef": {
            "fieldPath": "status.podIP"}}},
        {"name": "SCHEMA_REGISTRY_LISTENERS", "value": f"http://0.0.0.0:{PORT}"},
        {"name": "SCHEMA_REGISTRY_SCHEMA_COMPATIBILITY_LEVEL",
         "value": s.schemaRegistryCompatibility.lower()},
        {"name": "SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS", "value": f"SASL_SSL://{top.bootstrap}"},
        {"name": "SCHEMA_REGISTRY_KAFKASTORE_SECURITY_PROTOCOL", "value": "SASL_SSL"},
        {"name": "SCHEMA_REGISTRY_KAFKASTORE_SASL_MECHANISM", "value": mechanism(who)},
        password_env("SCHEMA_REGISTRY_KAFKASTORE_SASL_JAAS_CONFIG", who, "sasl.jaas.config"),
        {"name": "SCHEMA_REGISTRY_KAFKASTORE_SSL_TRUSTSTORE_TYPE", "value": "PEM"},
        {"name": "SCHEMA_REGISTRY_KAFKASTORE_SSL_TRUSTSTORE_LOCATION", "value": CA_FILE},
        {"name": "SCHEMA_REGISTRY_KAFKASTORE_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM",
         "value": "https"},
        {"name": "SCHEMA_REGISTRY_KAFKASTORE_TOPIC", "value": "_schemas"},
        {"name": "SCHEMA_REGISTRY_KAFKASTORE_TOPIC_REPLICATION_FACTOR", "value": str(rf)},
        {"name": "SCHEMA_REGISTRY_HEAP_OPTS", "value": "-Xms256m -Xmx512m"},
    ]
    deploy = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "schema-registry", "namespace": top.namespace, "labels": LABELS},
        "spec": {
            "replicas": s.schemaRegistryReplicas,
            "selector": {"matchLabels": LABELS},
            "template": {"metadata": {"labels": LABELS}, "spec": {
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,  # SCHEMA_REGISTRY_PORT would clash with its config
                "securityContext": security_context.pod(1000),
                "containers": [{
                    "name": "schema-registry",
                    "image": s.schemaRegistryImage,
                    "env": env,
                    "ports": [{"name": "http", "containerPort": PORT}],
                    "readinessProbe": {"httpGet": {"path": "/subjects", "port": "http"},
                                       "periodSeconds": 10, "failureThreshold": 6},
                    "livenessProbe": {"httpGet": {"path": "/", "port": "http"},
                                      "initialDelaySeconds": 60, "periodSeconds": 30,
                                      "failureThreshold": 5},
                    "resources": {"requests": {"cpu": "100m", "memory": "512Mi"},
                                  "limits": {"cpu": "500m", "memory": "768Mi"}},
                    "securityContext": security_context.container(writable_root=True),
                    "volumeMounts": [{"name": "kafka-ca", "mountPath": CA_MOUNT,
                                      "readOnly": True}],
                }],
                "volumes": [ca_volume()],
            }},
        },
    }
    svc = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "schema-registry", "namespace": top.namespace, "labels": LABELS},
        "spec": {"selector": LABELS,
                 "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]},
    }
    return [deploy, svc]


def policy_target() -> dict:
    return {"selector": LABELS, "port": PORT}
