"""The rendered dev and prod stacks (Pulumi mocks, no cluster): what `pulumi up` would create."""

from __future__ import annotations

import json
import re

import pytest

from hanzo_stream.core.broker_config import broker_config, jaas_config, to_server_properties
from hanzo_stream.registry import load_registry
from infra import broker
from infra.render import stack_config
from infra.settings import parse
from infra.topology import Topology

from .infra_helpers import (
    ROOT,
    RenderFailed,
    by_type,
    env_map,
    kafka_container,
    manifests,
    obj,
    of_kind,
    registered,
    render,
    resource,
    secret_data,
    stack_brokers,
)

STACKS = ["dev", "prod"]


def settings_of(stack: str):
    return parse(stack_config(stack)[0])


@pytest.fixture(params=STACKS, scope="module")
def stack(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def out(stack):
    return render(stack)


def test_replicas_and_dynamic_quorum(stack, out):
    n = stack_brokers(stack)
    assert n == {"dev": 1, "prod": 3}[stack]
    sts = obj(out, "StatefulSet", "kafka")
    assert sts["spec"]["replicas"] == n
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    env = env_map(kafka_container(out))
    assert "KAFKA_CONTROLLER_QUORUM_VOTERS" not in env
    assert env["KAFKA_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS"]["value"] == ",".join(
        f"kafka-{i}.kafka-headless.hanzo.svc.cluster.local:9095" for i in range(n))


def test_broker_env_equals_broker_config_for_every_pod(stack, out):
    """Shared env + the entrypoint's per-pod values == broker_config() of that pod."""
    s = settings_of(stack)
    top = Topology.of(s)
    flavor = broker.FLAVORS["apache"]
    shared = broker.properties_from_env(flavor, kafka_container(out)["env"])
    script = kafka_container(out)["command"][2]
    for i in range(top.brokers):
        want = broker_config(broker.broker_settings(top, i, s.brokerConfigOverrides))
        per_pod = {k: v for k, v in want.items() if k not in shared}
        assert set(per_pod) == {"node.id", "advertised.listeners"}
        assert {k: want[k] for k in shared} == shared
        case = re.search(rf"^  {i}\) (.*); set -- .* ;;$", script, re.M).group(1)
        assert case == "; ".join(
            f"export {next(iter(flavor.to_env({k: v})))}={v}" for k, v in per_pod.items())


def test_prod_replication_and_overrides(out, stack):
    shared = broker.properties_from_env(broker.FLAVORS["apache"], kafka_container(out)["env"])
    want = {"dev": ("1", "1"), "prod": ("3", "2")}[stack]
    assert (shared["default.replication.factor"], shared["min.insync.replicas"]) == want
    assert shared["offsets.topic.replication.factor"] == want[0]
    assert shared["transaction.state.log.min.isr"] == want[1]
    assert shared["unclean.leader.election.enable"] == "false"
    assert shared["auto.create.topics.enable"] == "false"
    if stack == "prod":
        assert shared["num.io.threads"] == "16"  # brokerConfigOverrides from Pulumi.prod.yaml


def test_no_plaintext_listener_anywhere(out):
    shared = broker.properties_from_env(broker.FLAVORS["apache"], kafka_container(out)["env"])
    assert shared["listener.security.protocol.map"] == (
        "CLIENT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL")
    assert shared["listeners"] == "CLIENT://0.0.0.0:9093,INTERNAL://0.0.0.0:9094,CONTROLLER://0.0.0.0:9095"
    assert shared["ssl.enabled.protocols"] == "TLSv1.3"
    text = json.dumps(manifests(out))
    # As a protocol value (":PLAINTEXT", "=SASL_PLAINTEXT", '"PLAINTEXT"'); the word in prose,
    # as in the KafkaLegacyPlaintextInUse alert text, is not a listener.
    assert not re.findall(r"(?<![A-Za-z ])PLAINTEXT(?![A-Za-z ])", text)
    assert "9092" not in text
    client = obj(out, "Service", "kafka")["spec"]["ports"]
    assert [p["port"] for p in client] == [9093]


def test_secrets_are_secret_outputs_and_refs(stack, out):
    outs = out["outputs"]
    for name in ("adminPassword", "principalPasswords", "clusterId"):
        assert outs[name]["secret"], name
    for name in ("bootstrap", "caCertPem", "brokers"):
        assert not outs[name]["secret"], name
    registry = load_registry(ROOT / "topics.yaml")
    assert set(outs["principalPasswords"]["value"]) == registry.principal_names()
    secrets = [r for r in out["resources"] if r["inputs"].get("kind") == "Secret"]
    assert secrets and all(r["secret_paths"] == ["stringData"] for r in secrets)
    env = env_map(kafka_container(out))
    assert env["CLUSTER_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "kafka-cluster-id", "key": "cluster-id"}
    assert env["HANZO_KAFKA_JAAS"]["valueFrom"]["secretKeyRef"]["name"] == "kafka-broker-jaas"
    assert all("value" not in e for e in env.values() if "JAAS" in e["name"])


def test_jaas_secret_is_broker_config_secret_half(out):
    outs = out["outputs"]
    want = to_server_properties(jaas_config(outs["adminPassword"]["value"],
                                            outs["principalPasswords"]["value"]))
    assert secret_data(out, "kafka-broker-jaas")["jaas.properties"] == want
    creds = json.loads(secret_data(out, "hanzo-stream-credentials")["credentials.json"])
    assert creds == {"admin": outs["adminPassword"]["value"],
                     "principals": outs["principalPasswords"]["value"]}
    user = secret_data(out, "kafka-user-billing-aggregator")
    assert user["username"] == "billing-aggregator" and user["mechanism"] == "SCRAM-SHA-512"
    assert user["password"] == outs["principalPasswords"]["value"]["billing-aggregator"]


def test_cluster_id_lives_as_long_as_the_namespace_that_keeps_the_volumes(stack, out):
    """Derived from the namespace's uid: the same after `pulumi destroy` and `up` (both the
    namespace and the volumes are retained), a new one with a new namespace."""
    import base64
    import uuid

    cid = out["outputs"]["clusterId"]
    assert cid["secret"] is True
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid["value"])  # a KRaft cluster id: base64url of 16 bytes
    assert secret_data(out, "kafka-cluster-id") == {"cluster-id": cid["value"]}
    uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, "hanzo"))  # what render's mock API server assigns
    assert cid["value"] == base64.urlsafe_b64encode(
        uuid.uuid5(uuid.NAMESPACE_URL, f"hanzo-stream:kraft:{uid}").bytes).decode().rstrip("=")
    assert not by_type(out, "pulumi-python:dynamic:ClusterId")  # nothing in state to lose


def test_cluster_id_can_be_pinned_to_adopt_a_running_cluster():
    out = render("dev", (("clusterId", "MkU3OEVBNTcwNTJENDM2Qk"),))
    assert out["outputs"]["clusterId"]["value"] == "MkU3OEVBNTcwNTJENDM2Qk"
    with pytest.raises(RenderFailed, match="not a KRaft cluster id"):
        render("dev", (("clusterId", "not-an-id"),))


def test_without_creating_the_namespace_its_uid_is_read_from_the_cluster():
    out = render("dev", (("createNamespace", "false"),))
    (ns,) = [r for r in out["resources"] if r["type"] == "kubernetes:core/v1:Namespace"]
    assert ns["name"] == "read-namespace-hanzo"
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", out["outputs"]["clusterId"]["value"])


def test_pdb_probes_resources_and_security(stack, out):
    n = stack_brokers(stack)
    pdb = obj(out, "PodDisruptionBudget", "kafka")
    assert pdb["spec"]["maxUnavailable"] == 1
    sts = obj(out, "StatefulSet", "kafka")
    assert pdb["spec"]["selector"] == sts["spec"]["selector"]
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["readinessProbe"]["tcpSocket"]["port"] == "client"
    assert c["livenessProbe"]["tcpSocket"]["port"] == "controller"
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 300
    assert c["resources"] == {  # prod: Pulumi.prod.yaml's production sizing
        "dev": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1000m", "memory": "2Gi"}},
        "prod": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
    }[stack]
    heap = next(e["value"] for e in c["env"] if e["name"] == "KAFKA_HEAP_OPTS")
    assert heap == {"dev": "-Xms1g -Xmx1g", "prod": "-Xms4g -Xmx4g"}[stack]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 1000  # apache/kafka's appuser
    for ctr in [*pod["initContainers"], *pod["containers"]]:
        sc = ctr["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
    anti = pod.get("affinity", {}).get("podAntiAffinity", {})
    if n >= 3:
        (term,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    else:
        assert not anti


def test_a_one_node_cluster_can_hold_three_brokers_when_anti_affinity_is_preferred():
    """The local prod stack's three brokers share one node; the required rule would leave two
    Pending forever (seen on the real node)."""
    pod = obj(render("prod", (("brokerAntiAffinity", "preferred"),)),
              "StatefulSet", "kafka")["spec"]["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    (pref,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert pref["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_volumes_keep_data(stack, out):
    sts = obj(out, "StatefulSet", "kafka")
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    size = {"dev": "10Gi", "prod": "50Gi"}[stack]
    assert claim["spec"]["resources"]["requests"]["storage"] == size
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain", "whenScaled": "Retain"}
    ctr = sts["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in ctr["volumeMounts"]}
    assert mounts["data"] == "/var/lib/kafka"
    # `pulumi destroy` must not take the retained volumes with the namespace they live in
    assert resource(out, "Namespace", "hanzo")["retain_on_delete"] is True
    patches = [r for r in out["resources"] if r["type"].endswith("PersistentVolumeClaimPatch")]
    assert patches and all(r["retain_on_delete"] is True for r in patches)  # destroy keeps sizes


def test_image_default_is_the_official_image_of_the_pinned_release(out):
    assert kafka_container(out)["image"] == "docker.io/apache/kafka:4.4.0"
    assert out["outputs"]["image"]["value"] == "docker.io/apache/kafka:4.4.0"


def test_reconciler_job_runs_apply_with_registry_after_brokers(out):
    (job,) = [j for j in of_kind(out, "Job")
              if j["metadata"]["name"].startswith("hanzo-stream-apply-")]
    from infra.reconciler import content_hash

    digest = content_hash((ROOT / "topics.yaml").read_text(), settings_of(out["stack"]))
    assert job["metadata"]["name"] == f"hanzo-stream-apply-{digest}"
    cm = obj(out, "ConfigMap", f"hanzo-stream-registry-{digest}")
    assert cm["data"]["topics.yaml"] == (ROOT / "topics.yaml").read_text()
    assert cm["immutable"] is True
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["hanzo-stream"]
    assert c["args"][0] == "apply"
    assert "--secrets-file" in c["args"]
    # The one writer of SCRAM passwords: it sets each to Pulumi's, and any password change
    # changes its template (a new Job runs), without a password in sight.
    assert c["args"][-1] == "--rotate-passwords"
    sha = job["spec"]["template"]["metadata"]["annotations"]["hanzo.ai/credentials-sha"]
    assert re.fullmatch(r"[0-9a-f]{16}", sha)
    assert not any(sha in g or g in sha for g in out["generated_secrets"])
    env = env_map(c)
    assert env["HANZO_STREAM_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
    assert env["HANZO_STREAM_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "kafka-admin"
    deps = resource(out, "Job", job["metadata"]["name"])["dependencies"]
    assert "statefulset-kafka" in deps and "secret-hanzo-stream-credentials" in deps


def test_schema_registry_on_8081_backward(stack, out):
    env = env_map(obj(out, "Deployment", "schema-registry")["spec"]["template"]["spec"]["containers"][0])
    assert env["SCHEMA_REGISTRY_SCHEMA_COMPATIBILITY_LEVEL"]["value"] == "backward"
    assert env["SCHEMA_REGISTRY_KAFKASTORE_TOPIC_REPLICATION_FACTOR"]["value"] == (
        "1" if stack == "dev" else "3")
    assert "valueFrom" in env["SCHEMA_REGISTRY_KAFKASTORE_SASL_JAAS_CONFIG"]
    assert obj(out, "Service", "schema-registry")["spec"]["ports"][0]["port"] == 8081


def test_every_workload_is_pinned_and_in_namespace(out):
    for m in manifests(out):
        if m["kind"] in ("Namespace",) or m["metadata"]["name"].startswith("grafana-dashboard-"):
            continue
        if m["kind"] == "PriorityClass":  # cluster-scoped: named after the namespace instead
            assert m["metadata"]["name"] == "hanzo-stream-hanzo-broker"
            assert obj(out, "StatefulSet", "kafka")["spec"]["template"]["spec"][
                "priorityClassName"] == m["metadata"]["name"]
            continue
        assert m["metadata"]["namespace"] == "hanzo", m["metadata"]["name"]


def test_apache_flavor_is_the_default_with_its_own_convention(out):
    c = kafka_container(out)
    env = env_map(c)
    assert "KAFKA_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS" in env and not any(
        k.startswith("KAFKA_CFG_") for k in env)
    assert env["CLUSTER_ID"]["valueFrom"]["secretKeyRef"]["name"] == "kafka-cluster-id"
    assert "/opt/kafka/bin/kafka-server-start.sh" in c["command"][2]
    assert obj(out, "StatefulSet", "kafka")["spec"]["template"]["spec"]["securityContext"][
        "runAsUser"] == 1000


def test_bitnami_flavor_runs_the_named_image_with_its_convention():
    mirror = "registry.example.com/bitnami/kafka:4.4.0"
    out = render("prod", (("imageFlavor", "bitnami"), ("image", mirror)))
    c = kafka_container(out)
    assert c["image"] == mirror
    env = env_map(c)
    assert "KAFKA_CFG_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS" in env
    assert env["KAFKA_KRAFT_CLUSTER_ID"]["valueFrom"]["secretKeyRef"]["name"] == "kafka-cluster-id"
    s = settings_of("prod")
    want = broker_config(broker.broker_settings(Topology.of(s), 0, s.brokerConfigOverrides))
    shared = broker.properties_from_env(broker.FLAVORS["bitnami"], c["env"])
    assert shared == {k: v for k, v in want.items() if k not in ("node.id", "advertised.listeners")}
    assert "/opt/bitnami/kafka/bin/kafka-server-start.sh" in c["command"][2]
    assert obj(out, "StatefulSet", "kafka")["spec"]["template"]["spec"]["securityContext"][
        "runAsUser"] == 1001


def test_image_digest_pinning():
    digest = "sha256:" + "ab" * 32
    out = render("prod", (("imageDigest", digest),))
    assert kafka_container(out)["image"] == f"docker.io/apache/kafka:4.4.0@{digest}"


def test_cert_manager_mode_issues_a_certificate_instead_of_generating_keys():
    out = render("prod", (("tlsMode", "cert-manager"), ("certManagerIssuer", "hanzo-ca")))
    (cert,) = of_kind(out, "Certificate")
    assert cert["spec"]["secretName"] == "kafka-tls"
    assert cert["spec"]["issuerRef"] == {"name": "hanzo-ca", "kind": "ClusterIssuer",
                                         "group": "cert-manager.io"}
    assert cert["spec"]["privateKey"]["encoding"] == "PKCS8"
    assert "*.kafka-headless.hanzo.svc.cluster.local" in cert["spec"]["dnsNames"]
    assert not [r for r in out["resources"] if "Certificate" in r["type"]
                and r["type"].startswith("pulumi-python:dynamic:")]
    assert not [s for s in of_kind(out, "Secret") if s["metadata"]["name"] == "kafka-tls"]
    assert out["outputs"]["caCertPem"]["value"] is None


def test_self_signed_certificate_names_every_broker_address(stack, out):
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    (ca,) = by_type(out, "pulumi-python:dynamic:CertificateAuthority")
    (broker_cert,) = by_type(out, "pulumi-python:dynamic:BrokerCertificate")
    assert ca["protect"] is (stack == "prod") and not broker_cert["protect"]
    assert ca["secret_outputs"] == broker_cert["secret_outputs"] == ["private_key_pem"]
    assert "ca_private_key_pem" in broker_cert["secret_paths"]
    tls_secret = secret_data(out, "kafka-tls")
    assert set(tls_secret) == {"tls.crt", "tls.key", "ca.crt"}
    assert tls_secret["tls.key"].startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8
    leaf, chained_ca = x509.load_pem_x509_certificates(tls_secret["tls.crt"].encode())
    root = x509.load_pem_x509_certificate(tls_secret["ca.crt"].encode())
    assert chained_ca == root and out["outputs"]["caCertPem"]["value"] == tls_secret["ca.crt"]
    leaf.verify_directly_issued_by(root)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == broker_cert["inputs"]["dns_names"]
    assert "*.kafka-headless.hanzo.svc.cluster.local" in broker_cert["inputs"]["dns_names"]
    assert "kafka.hanzo.svc.cluster.local" in broker_cert["inputs"]["dns_names"]  # the bootstrap
    key = load_pem_private_key(tls_secret["tls.key"].encode(), None)
    assert key.public_key() == leaf.public_key() and key.curve.name == "secp256r1"


def test_a_registry_edit_restarts_no_broker(tmp_path):
    """A new principal with its ACLs is the reconciler's business (a SCRAM user and ACLs in
    the metadata log): the brokers' pod template must not change, or every broker rolls."""
    for entry in ROOT.iterdir():
        if entry.name not in ("topics.yaml", ".git"):
            (tmp_path / entry.name).symlink_to(entry)
    text = (ROOT / "topics.yaml").read_text()
    new = ("principals:\n  - name: search-indexer\n"
           "    description: A service added by a pull request.\n")
    assert text.count("principals:\n") == 1
    (tmp_path / "topics.yaml").write_text(text.replace("principals:\n", new, 1))
    before, after = render("prod"), render("prod", root=tmp_path)
    assert "kafka-user-search-indexer" in {m["metadata"]["name"] for m in of_kind(after, "Secret")}

    # Each mocked render issues a new certificate, too: with the same names it is the
    # tls-reload sidecar's business, so neither change touches the template.
    assert (cert(after) != cert(before)
            and template(after) == template(before) == template(render("prod")))


def template(rendered: dict) -> dict:
    return obj(rendered, "StatefulSet", "kafka")["spec"]["template"]


def cert(rendered: dict) -> str:
    return obj(rendered, "Secret", "kafka-tls")["stringData"]["tls.crt"]


def test_a_certificate_with_new_names_restarts_the_brokers_a_renewal_does_not():
    one, named = render("prod"), render("prod", (("tlsExtraDnsNames", '["kafka.example.com"]'),))
    names = "hanzo.ai/tls-names-sha"
    assert template(one)["metadata"]["annotations"][names] != \
        template(named)["metadata"]["annotations"][names]
    sidecar = next(c for c in template(one)["spec"]["containers"] if c["name"] == "tls-reload")
    assert sidecar["command"][:3] == ["python", "-m", "hanzo_stream.pods.tls_reload"]
    assert {m["mountPath"]: m.get("readOnly", False) for m in sidecar["volumeMounts"]} == {
        "/etc/kafka/tls": True, "/opt/hanzo/run": False, "/etc/hanzo-stream/kafka-ca": True}


def test_brokers_of_a_quorum_stop_only_when_the_roll_gate_allows(tmp_path):
    """prod: the roll gate decides readiness (ISR) and the broker's preStop waits for its
    safe-to-stop verdict, bounded; dev (one broker) has nothing to wait for."""
    import os
    import subprocess
    import time

    from infra.cluster import GATE_DIR, STOP_WAIT_SECONDS

    spec = obj(render("prod"), "StatefulSet", "kafka")["spec"]["template"]["spec"]
    gate = next(c for c in spec["initContainers"] if c["name"] == "roll-gate")
    assert gate["restartPolicy"] == "Always"  # a native sidecar: outlives the broker
    assert gate["command"][:3] == ["python", "-m", "hanzo_stream.pods.roll_gate"]
    boot = env_map(gate)["HANZO_STREAM_BOOTSTRAP"]["value"].split(",")
    assert len(boot) == 3 and all(".kafka-headless." in b for b in boot)  # not the client Service
    assert spec["terminationGracePeriodSeconds"] > STOP_WAIT_SECONDS
    # The rollout waits for each broker in turn: the provider's default 10 minutes is too short.
    assert resource(render("prod"), "StatefulSet", "kafka")["update_timeout"] == "40m"
    pre = kafka_container(render("prod"))["lifecycle"]["preStop"]["exec"]["command"]
    dev = obj(render("dev"), "StatefulSet", "kafka")["spec"]["template"]["spec"]
    assert "lifecycle" not in dev["containers"][0]
    assert all(c["name"] != "roll-gate" for c in dev["initContainers"])
    assert not [r for r in of_kind(render("dev"), "Role") if r["metadata"]["name"] == "kafka-roll-gate"]

    script = pre[2].replace(GATE_DIR, str(tmp_path)).replace(f"+ {STOP_WAIT_SECONDS} ", "+ 4 ")

    def stop_takes() -> float:
        t0 = time.monotonic()
        subprocess.run([*pre[:2], script], check=True, timeout=30)
        return time.monotonic() - t0
    assert stop_takes() >= 3.5  # no verdict: waits out its bound, then lets the broker stop
    verdict = tmp_path / "safe-to-stop"
    verdict.write_text("safe\n")
    assert stop_takes() < 1.5  # a fresh verdict: at once
    os.utime(verdict, (time.time() - 60, time.time() - 60))
    assert stop_takes() >= 3.5  # a verdict the gate stopped refreshing is not trusted


def test_only_the_roll_gate_holds_a_token_and_it_may_only_read_its_statefulset():
    """A deleted StatefulSet releases every held stop (hanzo_stream/pods/roll_gate.py): the gate
    reads that one object. The broker and the quorum sidecar get no token at all."""
    from hanzo_stream.pods.in_cluster import SA_DIR
    from infra.cluster import KUBE_API_VOLUME

    out = render("prod")
    spec = obj(out, "StatefulSet", "kafka")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    holders = [c["name"] for c in spec["initContainers"] + spec["containers"]
               if any(m["name"] == KUBE_API_VOLUME for m in c.get("volumeMounts", []))]
    assert holders == ["roll-gate"]
    gate = next(c for c in spec["initContainers"] if c["name"] == "roll-gate")
    assert {"name": KUBE_API_VOLUME, "mountPath": str(SA_DIR), "readOnly": True} in gate["volumeMounts"]
    assert env_map(gate)["STATEFULSET"]["value"] == "kafka"
    (role,) = [r for r in of_kind(out, "Role") if r["metadata"]["name"] == "kafka-roll-gate"]
    assert role["rules"] == [{"apiGroups": ["apps"], "resources": ["statefulsets"],
                              "resourceNames": ["kafka"], "verbs": ["get"]}]
    (binding,) = [b for b in of_kind(out, "RoleBinding") if b["metadata"]["name"] == "kafka-roll-gate"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"],
                                    "namespace": "hanzo"}]
    assert binding["roleRef"]["name"] == "kafka-roll-gate"


def roll_jobs(rendered: dict) -> list[dict]:
    return [r for r in registered(rendered) if r["name"] == "job-kafka-roll"]


def test_admin_logs_in_from_the_reconciler_job_alone():
    """The reconciler Job and the brokers' own pods: those hold the admin's password anyway (the
    JAAS of their listeners), and tls-reload beside the broker alters its keystore with it.
    Every other pod that talks to Kafka, the roll Job and the on-call restart included, logs
    in as a principal of its own."""
    for stack in ("dev", "prod"):
        out = render(stack)
        logins = {}
        for m in manifests(out):
            pod = m.get("spec", {})
            pod = pod.get("jobTemplate", {}).get("spec", pod)  # a CronJob's Job
            for c in pod.get("template", {}).get("spec", {}).get("containers", []):
                user = env_map(c).get("HANZO_STREAM_SASL_USERNAME", {})
                ref = user.get("valueFrom", {}).get("secretKeyRef", {}).get("name")
                if ref:
                    logins.setdefault(ref, set()).add(f"{m['kind']}/{m['metadata']['name']}")
        admins = logins.get("kafka-admin", set())
        assert admins and all(w.startswith("Job/hanzo-stream-apply-") or w == "StatefulSet/kafka"
                              for w in admins), (stack, logins)
    assert any(w.startswith(("Job/kafka-roll", "CronJob/")) for w in logins["kafka-user-broker-roller"])


def test_three_brokers_roll_through_the_roller_one_broker_through_the_statefulset():
    """The roller (hanzo_stream/pods/roller.py) restarts the brokers of a 3+ broker stack, the
    active controller last: their StatefulSet is OnDelete, and the roll Job waits for it,
    as long as the rollout may take. One broker has no order to choose."""
    prod, dev = render("prod"), render("dev")
    assert obj(prod, "StatefulSet", "kafka")["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert obj(dev, "StatefulSet", "kafka")["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    assert roll_jobs(dev) == [] and not [m for m in manifests(dev)
                                         if m["metadata"]["name"] == "kafka-roller"]
    (job,) = roll_jobs(prod)
    assert "statefulset-kafka" in job["dependencies"] and "role-kafka-roller" in job["dependencies"]
    # After the reconciler: a grown stack's topics are replicated before its founder restarts.
    assert any(d.startswith("job-hanzo-stream-apply-") for d in job["dependencies"])
    assert job["create_timeout"] == "40m"
    spec = job["inputs"]["spec"]
    assert spec["activeDeadlineSeconds"] == 40 * 60
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "kafka-roller" and pod["automountServiceAccountToken"]
    (c,) = pod["containers"]
    assert c["command"][:3] == ["python", "-m", "hanzo_stream.pods.roller"]
    env = env_map(c)  # its own login, DESCRIBE on the cluster only (registry/platform.py)
    login = env["HANZO_STREAM_SASL_USERNAME"]["valueFrom"]["secretKeyRef"]["name"]
    assert login == "kafka-user-broker-roller"
    assert env["HANZO_STREAM_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"  # the reconciler made it
    (role,) = [r for r in of_kind(prod, "Role") if r["metadata"]["name"] == "kafka-roller"]
    assert role["rules"] == [
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "resourceNames": ["kafka"],
         "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"],
         "resourceNames": ["kafka-0", "kafka-1", "kafka-2"], "verbs": ["get", "delete"]}]


def test_a_new_pod_template_makes_a_new_roll_job_and_nothing_else_does():
    """The Job's name is the template's digest: a change that restarts brokers plans a new
    Job (the old one is deleted), one that does not plans none."""
    def name(*sets: tuple[str, str]) -> str:
        (job,) = roll_jobs(render("prod", sets))
        return job["inputs"]["metadata"]["name"]
    base = name()
    assert re.fullmatch(r"kafka-roll-[0-9a-f]{10}", base)
    assert name() == base
    assert name(("clientNamespaces", '["hanzo", "billing"]')) == base  # no template change
    assert name(("brokerConfigOverrides", '{"log.cleaner.backoff.ms": "16000"}')) != base


def test_on_call_restarts_every_broker_through_the_roller():
    """`kubectl rollout restart` restarts nothing on an OnDelete StatefulSet, so a 3+ broker
    stack ships a suspended CronJob whose Job is the roller with --restart-all."""
    prod = render("prod")
    (cron,) = of_kind(prod, "CronJob")
    assert cron["metadata"]["name"] == "kafka-restart" and cron["spec"]["suspend"] is True
    spec = cron["spec"]["jobTemplate"]["spec"]
    (roll,) = roll_jobs(prod)
    ran = roll["inputs"]["spec"]["template"]["spec"]["containers"][0]["command"]
    (c,) = spec["template"]["spec"]["containers"]
    assert c["command"] == [*ran, "--restart-all"]
    assert spec["template"]["spec"]["serviceAccountName"] == "kafka-roller"
    assert spec["ttlSecondsAfterFinished"] > 0
    assert of_kind(render("dev"), "CronJob") == []
