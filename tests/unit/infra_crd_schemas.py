"""Small JSON Schemas for the custom resources kubernetes-validate has no schema for.

They hold the fields these operators require and the types we rely on, taken from the
CRDs (Prometheus operator monitoring.coreos.com/v1, Kubeflow Spark operator
sparkoperator.k8s.io/v1beta2, cert-manager.io/v1); unknown top-level fields are refused
so a typo cannot pass.
"""

from __future__ import annotations

_STR = {"type": "string"}
_STR_MAP = {"type": "object", "additionalProperties": _STR}
_META = {"type": "object", "required": ["name", "namespace"],
         "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
                        "namespace": _STR, "labels": _STR_MAP, "annotations": _STR_MAP}}
_SELECTOR = {"type": "object", "properties": {"matchLabels": _STR_MAP}, "required": ["matchLabels"]}
_DURATION = {"type": "string", "pattern": r"^(\d+(ms|s|m|h|d|w|y))+$"}


def _cr(api_version: str, kind: str, spec: dict) -> dict:
    return {
        "type": "object", "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": {"const": api_version}, "kind": {"const": kind},
                       "metadata": _META, "spec": spec},
    }


_ENDPOINT = {"type": "object", "required": ["port"], "additionalProperties": False,
             "properties": {"port": _STR, "interval": _DURATION, "path": _STR}}
_NS_SELECTOR = {"type": "object", "properties": {"matchNames": {"type": "array", "items": _STR}}}

_RULE = {
    "type": "object", "additionalProperties": False,
    "properties": {"alert": _STR, "record": _STR, "expr": {"type": ["string", "integer"]},
                   "for": _DURATION, "keep_firing_for": _DURATION, "labels": _STR_MAP,
                   "annotations": _STR_MAP},
    "required": ["expr"],
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
}

_SPARK_POD = {
    "type": "object",
    "properties": {"cores": {"type": "integer", "minimum": 1}, "memory": _STR,
                   "instances": {"type": "integer", "minimum": 1}, "serviceAccount": _STR,
                   "labels": _STR_MAP, "env": {"type": "array", "items": {
                       "type": "object", "required": ["name"]}},
                   "volumeMounts": {"type": "array"}, "securityContext": {"type": "object"}},
}

SCHEMAS = {
    ("monitoring.coreos.com/v1", "PodMonitor"): _cr("monitoring.coreos.com/v1", "PodMonitor", {
        "type": "object", "required": ["selector", "podMetricsEndpoints"],
        "properties": {"selector": _SELECTOR, "namespaceSelector": _NS_SELECTOR,
                       "podMetricsEndpoints": {"type": "array", "minItems": 1,
                                               "items": _ENDPOINT}}}),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _cr(
        "monitoring.coreos.com/v1", "ServiceMonitor", {
            "type": "object", "required": ["selector", "endpoints"],
            "properties": {"selector": _SELECTOR, "namespaceSelector": _NS_SELECTOR,
                           "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT}}}),
    ("monitoring.coreos.com/v1", "PrometheusRule"): _cr(
        "monitoring.coreos.com/v1", "PrometheusRule", {
            "type": "object", "required": ["groups"],
            "properties": {"groups": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["name", "rules"],
                "properties": {"name": _STR, "interval": _DURATION,
                               "rules": {"type": "array", "items": _RULE}}}}}}),
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"): _cr(
        "sparkoperator.k8s.io/v1beta2", "SparkApplication", {
            "type": "object",
            "required": ["type", "mode", "image", "mainApplicationFile", "sparkVersion",
                         "driver", "executor"],
            "properties": {
                "type": {"enum": ["Java", "Scala", "Python", "R"]},
                "pythonVersion": {"enum": ["2", "3"]},
                "mode": {"enum": ["cluster", "client", "in-cluster-client"]},
                "image": _STR, "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                "mainApplicationFile": {"type": "string", "pattern": "^(local|s3a|https?)://"},
                "sparkVersion": _STR,
                "restartPolicy": {"type": "object", "required": ["type"], "properties": {
                    "type": {"enum": ["Never", "Always", "OnFailure"]},
                    "onFailureRetryInterval": {"type": "integer"},
                    "onSubmissionFailureRetryInterval": {"type": "integer"}}},
                "deps": {"type": "object", "properties": {
                    "jars": {"type": "array", "items": _STR},
                    "packages": {"type": "array", "items": _STR}}},
                "sparkConf": _STR_MAP, "arguments": {"type": "array", "items": _STR},
                "driver": _SPARK_POD, "executor": _SPARK_POD,
                "volumes": {"type": "array"}},
            "additionalProperties": False}),
    ("cert-manager.io/v1", "Certificate"): _cr("cert-manager.io/v1", "Certificate", {
        "type": "object", "required": ["secretName", "issuerRef"],
        "properties": {
            "secretName": _STR, "commonName": _STR,
            "dnsNames": {"type": "array", "items": _STR, "minItems": 1},
            "duration": _DURATION, "renewBefore": _DURATION,
            "issuerRef": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "minLength": 1},
                "kind": {"enum": ["Issuer", "ClusterIssuer"]}, "group": _STR}},
            "privateKey": {"type": "object", "properties": {
                "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]}, "size": {"type": "integer"},
                "encoding": {"enum": ["PKCS1", "PKCS8"]},
                "rotationPolicy": {"enum": ["Never", "Always"]}}},
            "usages": {"type": "array", "items": _STR}},
        "additionalProperties": False}),
}
