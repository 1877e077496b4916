"""Certificates change under live acks=all traffic without a broker restart: a renewal from the
same CA, then a CA rollover through a two-CA trust bundle, on three real brokers that keep
their pids. The cluster is the test's own: it holds its CA's key to issue the renewals."""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import threading
import time
import uuid
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hanzo_stream.core.broker_config import broker_config
from hanzo_stream.local import credentials, kafka
from hanzo_stream.pods import tls_reload

from .conftest import Cluster

HOSTS = ("localhost", "127.0.0.1")
LISTENERS = ("client", "internal", "controller")  # Kafka reloads every listener whose file changed
PEM = serialization.Encoding.PEM


def _name(cn: str) -> x509.Name:  # the local platform's subject (local/tls.py)
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Hanzo Stream local"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str):
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _keystore(ca, hosts=HOSTS, cn: str = "kafka") -> bytes:
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    sans = [x509.IPAddress(ipaddress.ip_address(h)) if h[0].isdigit() else x509.DNSName(h)
            for h in hosts]
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            + cert.public_bytes(PEM) + ca_cert.public_bytes(PEM))


@pytest.fixture(scope="module")
def own_ca_cluster(tmp_path_factory, registry):
    home = tmp_path_factory.mktemp("tls-reload")
    ca1 = _ca("Hanzo Stream local CA")
    tls = home / "tls"
    tls.mkdir()
    (tls / "ca.pem").write_bytes(ca1[1].public_bytes(PEM))
    tls_reload.install(tls / "broker-keystore.pem", _keystore(ca1))  # make_tls keeps these
    creds = credentials.of_home(home, registry.principal_names())
    local = kafka.start(home / "kafka", creds, brokers=3)
    try:
        yield Cluster(local.bootstrap, local.ca_file, creds, 3, home, local), ca1, tls
    finally:
        kafka.stop(home / "kafka")


def _served(cluster: Cluster, listener: str) -> list[str]:
    return [tls_reload.served("127.0.0.1", n[f"{listener}_port"]) for n in cluster.local.nodes]


def _addresses(cluster: Cluster, *listeners: str) -> list[tuple[str, int]]:
    return [("127.0.0.1", n[f"{x}_port"]) for n in cluster.local.nodes
            for x in listeners or ("client", "internal")]


def _reload_all(cluster: Cluster, tls: Path) -> None:
    admin = cluster.admin_client()
    for n in cluster.local.nodes:
        settings = kafka.settings_for(cluster.local, n["node_id"], tls)
        tls_reload.reload(admin, n["node_id"], tls_reload.reload_configs(broker_config(settings)))


def test_renewal_and_ca_rollover_under_acks_all_load_restart_nothing(own_ca_cluster):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import NewTopic

    cluster, ca1, tls = own_ca_cluster
    assert cluster.home is not None and cluster.local is not None
    topic = f"tls-reload-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin_client()
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    pids = [n["pid"] for n in cluster.local.nodes]
    ca2 = _ca("Hanzo Stream local CA 2")
    bundle = ca1[1].public_bytes(PEM) + ca2[1].public_bytes(PEM)
    client_ca = tls / "client-bundle.pem"  # step 0 of a rollover: clients trust both CAs
    client_ca.write_bytes(bundle)

    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer({**cluster.admin.confluent(), "ssl.ca.location": str(client_ca),
                      "acks": "all", "enable.idempotence": True, "linger.ms": 5})

        def done(err, msg):
            (errors.append(str(err)) if err else acked.append(msg.value()))

        for i in range(60_000):  # bounded: ~10 min at most
            if stop.is_set():
                break
            p.produce(topic, str(i).encode(), key=str(i % 7).encode(), on_delivery=done)
            p.poll(0)
            time.sleep(0.01)
        if left := p.flush(60):
            errors.append(f"{left} never acknowledged")

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    ca2_file = tls / "ca2.pem"
    ca2_file.write_bytes(ca2[1].public_bytes(PEM))
    timings = {}
    try:
        time.sleep(2)
        before = _served(cluster, "client")

        # 1. Renewal: a new key and certificate from the same CA, same names. No restart.
        renewed = _keystore(ca1)
        tls_reload.check((tls / "broker-keystore.pem").read_bytes(), renewed,
                         (tls / "ca.pem").read_bytes())
        tls_reload.install(tls / "broker-keystore.pem", renewed)
        t0 = time.monotonic()
        _reload_all(cluster, tls)
        want = tls_reload.fingerprint(renewed)
        assert want not in before
        assert not tls_reload.until_served(_addresses(cluster, *LISTENERS), want)
        timings["renewal"] = time.monotonic() - t0
        assert [n["pid"] for n in kafka.LocalCluster.load(cluster.home / "kafka").nodes] == pids

        # 2. CA rollover, step 1: every broker trusts both CAs. No restart.
        tls_reload.install(tls / "ca.pem", bundle)
        _reload_all(cluster, tls)
        time.sleep(tls_reload.TRUST_SETTLE_SECONDS)

        # 3. Step 2: serve certificates of the new CA. No restart.
        rolled = _keystore(ca2)
        tls_reload.check(renewed, rolled, bundle)
        tls_reload.install(tls / "broker-keystore.pem", rolled)
        t0 = time.monotonic()
        _reload_all(cluster, tls)
        want = tls_reload.fingerprint(rolled)  # verified against CA 2 alone:
        assert not tls_reload.until_served(_addresses(cluster, *LISTENERS), want, str(ca2_file))
        timings["new CA"] = time.monotonic() - t0
        time.sleep(3)  # replication, the quorum and acks=all keep going over the new chain
        assert [n["pid"] for n in kafka.LocalCluster.load(cluster.home / "kafka").nodes] == pids

        # 4. Once every client trusts the new CA: the old one leaves the bundle. No restart.
        tls_reload.install(tls / "ca.pem", ca2[1].public_bytes(PEM))
        _reload_all(cluster, tls)
        time.sleep(tls_reload.TRUST_SETTLE_SECONDS)
    finally:
        stop.set()
        writer.join(120)

    assert not errors, errors[:5]
    assert kafka.running(cluster.home / "kafka") == {1, 2, 3}
    logs = "".join(p.read_text() for p in cluster.local.log_files())
    assert "Validation of dynamic config update" not in logs
    # Brokers and controllers as clients of each other: no failed handshake at any step.
    assert not re.search(r"Connection to node .* failed authentication", logs)
    # Every acknowledged record is there, read with CA 2's trust alone.
    c = Consumer({**cluster.admin.confluent(), "ssl.ca.location": str(ca2_file),
                  "group.id": f"tls-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(seen) < len(acked) and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            if not m.error():
                seen.add(m.value())
    c.close()
    print(f"\ntls, 0 restarts: renewal served everywhere {timings['renewal']:.1f} s after the "
          f"reload; new CA's certificate {timings['new CA']:.1f} s after it; "
          f"{len(acked)} acks=all writes acknowledged, {len(errors)} errors, "
          f"{len(set(acked) - seen)} of them missing")
    assert set(acked) <= seen and len(acked) > 300
