"""Every rendered manifest against the Kubernetes OpenAPI schema of a pinned version
(kubernetes-validate, offline, strict: unknown fields are errors), and the custom
resources against their JSON Schemas."""

from __future__ import annotations

import jsonschema
import kubernetes_validate
import pytest

from .infra_crd_schemas import SCHEMAS
from .infra_helpers import manifests, render

# The oldest minor still supported upstream (1.35 until February 2027): what the program must
# run on; the newest (versions.KUBERNETES_VERSION) is the local node's, where the stacks deploy.
KUBERNETES_VERSION = "1.35.0"

PAGING = (("pagerdutyRoutingKey", "0123456789abcdef0123456789abcdef"), ("s3AccessKey", "AKIAEXAMPLE0001"),
          ("s3SecretKey", "s3-secret-for-the-render"))
GROWN = (("kafka-initial-controllers", '{"result": 1}'),)  # what a one-broker stack recorded
VARIANTS = {
    "dev": ("dev", (), ()),
    "prod": ("prod", (), ()),
    "prod-bitnami": ("prod", (("imageFlavor", "bitnami"),
                              ("image", "registry.example.com/bitnami/kafka:4.4.0")), ()),
    "prod-cert-manager": ("prod", (("tlsMode", "cert-manager"), ("certManagerIssuer", "ca")), ()),
    # Alertmanager with its Secret, the S3 Secret with the endpoint the jobs read from it.
    "prod-paging": ("prod", (("s3Endpoint", "http://minio.hanzo:9000"),), PAGING),
    # A stack created with one broker, then `brokers: 3`: the program's record says one
    # founder, so kafka-1 and kafka-2 join (bitnami: the other image's tool path).
    "dev-grown": ("dev", (("brokers", "3"),), (), GROWN),
    "dev-grown-bitnami": ("dev", (("brokers", "3"), ("imageFlavor", "bitnami"),
                                  ("image", "registry.example.com/bitnami/kafka:4.4.0")), (), GROWN),
}


@pytest.fixture(params=list(VARIANTS), scope="module")
def rendered(request):
    return render(*VARIANTS[request.param])


def test_every_manifest_is_valid(rendered):
    seen = {"kubernetes": 0, "crd": 0}
    for m in manifests(rendered):
        key = (m["apiVersion"], m["kind"])
        if key in SCHEMAS:
            jsonschema.validate(m, SCHEMAS[key])
            seen["crd"] += 1
        else:
            try:
                kubernetes_validate.validate(m, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{m['kind']}/{m['metadata']['name']}: {e.message} at {list(e.path)}")
            seen["kubernetes"] += 1
    assert seen["kubernetes"] >= 20
    assert seen["crd"] >= 4


def test_validation_catches_a_broken_manifest(rendered):
    sts = next(m for m in manifests(rendered) if m["kind"] == "StatefulSet")
    broken = {**sts, "spec": {**sts["spec"], "replicas": "three"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
    typo = {**sts, "spec": {**sts["spec"], "replica": 3}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, KUBERNETES_VERSION, strict=True)


def test_crd_schemas_catch_a_broken_custom_resource(rendered):
    rule = next(m for m in manifests(rendered) if m["kind"] == "PrometheusRule")
    broken = {**rule, "spec": {"groups": [{"name": "x", "rules": [{"alert": "A"}]}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMAS[(rule["apiVersion"], rule["kind"])])
