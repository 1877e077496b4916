"""A CA rollover in three `pulumi up`s (docs/runbooks/ca-rollover.md): trust the next CA
beside the current one, issue the brokers' certificate from it, retire the old one. Rendered
under Pulumi's mocks with what the last deployment's outputs say; the same steps on the real
cluster, under load, are tests/integration/test_kube_3_growth.py's."""

from __future__ import annotations

import json

import pytest
from cryptography import x509

from infra.settings import SettingsError, parse
from infra.tls import TRUST_ANNOTATION

from .infra_helpers import RenderFailed, by_type, obj, of_kind, render, secret_data


def last(generation: int | None, trust: list[int] | None, deployed: bool = True) -> tuple:
    """What the stack's last successful `pulumi up` exported (None: a stack from before
    rollovers, which exported neither)."""
    outputs = {"caCertPem": "-----BEGIN CERTIFICATE-----..." if deployed else None}
    if generation is not None:
        outputs |= {"caGeneration": generation, "caTrust": trust}
    return (("last-deployment", json.dumps({"outputs": outputs})),)


def step(generation: int, trust: list[int], before: tuple) -> dict:
    return render("prod", (("caGeneration", str(generation)), ("caTrust", json.dumps(trust))),
                  (), before)


def cas(out: dict) -> dict[str, dict]:
    return {r["name"]: r for r in by_type(out, "pulumi-python:dynamic:CertificateAuthority")}


def bundle(out: dict) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(secret_data(out, "kafka-tls")["ca.crt"].encode())


def issuer_of_leaf(out: dict) -> x509.Certificate:
    """The CA the brokers' certificate verifies against, out of the trust bundle."""
    leaf, chained = x509.load_pem_x509_certificates(secret_data(out, "kafka-tls")["tls.crt"].encode())
    (issuer,) = [ca for ca in bundle(out) if ca.subject == leaf.issuer]
    leaf.verify_directly_issued_by(issuer)
    assert chained == issuer  # the chain the brokers serve ends at the issuing CA
    return issuer


def client_trust(out: dict) -> dict[str, str | None]:
    """The trust-bundle digest on each client Deployment's pods (the brokers' excluded)."""
    return {d["metadata"]["name"]: d["spec"]["template"].get("metadata", {})
            .get("annotations", {}).get(TRUST_ANNOTATION) for d in of_kind(out, "Deployment")}


def broker_template(out: dict) -> dict:
    return obj(out, "StatefulSet", "kafka")["spec"]["template"]


def test_each_step_of_a_rollover_changes_what_it_should_and_restarts_no_broker():
    before = render("prod", (), (), last(1, [1]))
    trust_both = step(1, [1, 2], last(1, [1]))
    issue_next = step(2, [1, 2], last(1, [1, 2]))
    retire_old = step(2, [2], last(2, [1, 2]))

    # 1. Both CAs in the bundle, oldest first; the certificate still from generation 1.
    assert list(cas(trust_both)) == ["kafka-ca", "kafka-ca-2"]
    first, second = bundle(trust_both)
    assert first.subject != second.subject  # one name per CA: chains build by name first
    assert issuer_of_leaf(trust_both) == first
    # Only the issuing CA is protected: the up that retires the other must be able to delete it.
    assert {n: r["protect"] for n, r in cas(trust_both).items()} == {"kafka-ca": True, "kafka-ca-2": False}
    # 2. The certificate from generation 2, both still trusted.
    one, two = bundle(issue_next)
    assert issuer_of_leaf(issue_next) == two
    assert {n: r["protect"] for n, r in cas(issue_next).items()} == {"kafka-ca": False, "kafka-ca-2": True}
    # 3. Generation 1 gone from the program (and so from state), the bundle one CA.
    assert list(cas(retire_old)) == ["kafka-ca-2"] and len(bundle(retire_old)) == 1
    assert issuer_of_leaf(retire_old) == bundle(retire_old)[0]

    for out, (g, trust) in ((trust_both, (1, [1, 2])), (issue_next, (2, [1, 2])),
                            (retire_old, (2, [2]))):
        assert out["outputs"]["caCertPem"]["value"] == secret_data(out, "kafka-tls")["ca.crt"]
        # what the next up's guard compares with
        assert (out["outputs"]["caGeneration"]["value"], out["outputs"]["caTrust"]["value"]) == (g, trust)
        # The brokers reload: their pods never change (each render issues new keys, the same names).
        assert broker_template(out) == broker_template(before)
        # Clients read ca.crt at start: every one that mounts it restarts with a new bundle.
        digests = client_trust(out)
        assert {"kafka-exporter", "schema-registry", "analytics-ingest"} <= digests.keys()
        assert None not in digests.values() and len(set(digests.values())) == 1
        assert set(digests.values()) != set(client_trust(before).values())


@pytest.mark.parametrize(("generation", "trust", "before", "refusal"), [
    (2, [2], last(1, [1]), r"caGeneration is 2 but the last `pulumi up` gave clients the CA "
                           r"generations \[1\] only.*Nothing was changed. Trust it first"),
    (2, [1, 2], last(1, [1]), r"caGeneration is 2 but .*generations \[1\] only"),
    (2, [2], last(None, None), r"generations \[1\] only"),  # a stack from before rollovers
    (2, [1, 2], last(2, [2]), r"caTrust names generation 1, which the last `pulumi up` had "
                              r"retired.*Roll forward to generation 3"),
])
def test_a_skipped_step_is_refused_before_anything_changes(generation, trust, before, refusal):
    with pytest.raises(RenderFailed, match=refusal):
        step(generation, trust, before)


def test_a_new_stack_may_start_at_any_generation():
    out = step(3, [3], last(None, None, deployed=False))
    assert list(cas(out)) == ["kafka-ca-3"] and out["outputs"]["caGeneration"]["value"] == 3


def test_an_aborted_rollover_goes_back_to_the_old_issuer():
    out = step(1, [1, 2], last(2, [1, 2]))
    assert issuer_of_leaf(out) == bundle(out)[0]


@pytest.mark.parametrize(("values", "message"), [
    ({"caGeneration": 2, "caTrust": [1]}, r"caTrust \[1\] leaves out caGeneration 2"),
    ({"caGeneration": 2, "caTrust": [2, 4]}, r"two neighbouring generations at most"),
    ({"caGeneration": 2, "caTrust": [1, 2, 3]}, r"two neighbouring generations at most"),
    ({"caGeneration": 0}, r"caGeneration is 0: CA generations count from 1"),
    ({"caTrust": ["one"]}, r"must list CA generations"),
    ({"tlsMode": "cert-manager", "certManagerIssuer": "ca", "caGeneration": 2},
     r"with cert-manager the issuer owns the CA"),
])
def test_settings_that_cannot_be_a_rollover_are_refused(values, message):
    with pytest.raises(SettingsError, match=message):
        parse(values)
