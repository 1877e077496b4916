"""What tls_reload refuses before a broker sees a new keystore, and what it asks brokers for."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hanzo_stream.core.broker_config import BrokerSettings, Node, broker_config
from hanzo_stream.pods import tls_reload

PEM = serialization.Encoding.PEM
NOW = dt.datetime(2026, 11, 27, 12, tzinfo=dt.UTC)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str = "CA", at: dt.datetime = NOW):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(at - dt.timedelta(days=1)).not_valid_after(at + dt.timedelta(days=90))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _keystore(ca, cn="kafka", hosts=("localhost", "127.0.0.1"), days=(-1, 30), key=None,
              at: dt.datetime = NOW) -> bytes:
    ca_key, ca_cert = ca
    key = key or ec.generate_private_key(ec.SECP256R1())
    sans = [x509.IPAddress(ipaddress.ip_address(h)) if h[0].isdigit() else x509.DNSName(h)
            for h in hosts]
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(at + dt.timedelta(days=days[0]))
            .not_valid_after(at + dt.timedelta(days=days[1]))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            + cert.public_bytes(PEM) + ca_cert.public_bytes(PEM))


CA = _ca()
TRUST = CA[1].public_bytes(PEM)
CURRENT = _keystore(CA)


def test_a_renewal_with_the_same_names_from_a_trusted_ca_passes():
    new = _keystore(CA)
    got = tls_reload.check(CURRENT, new, TRUST, now=NOW)
    assert got.sans == ["127.0.0.1", "localhost"]
    assert tls_reload.fingerprint(new) != tls_reload.fingerprint(CURRENT)


@pytest.mark.parametrize(("new", "says"), [
    (b"-----BEGIN PRIVATE KEY-----\ntruncated", "not a PEM keystore"),
    (_keystore(CA, hosts=("localhost",)), "differ from the served"),
    (_keystore(CA, cn="other"), "differ from the served"),
    (_keystore(CA, days=(-60, -1)), "not now; reissue it"),
    (_keystore(CA, days=(1, 30)), "not now; reissue it"),
    (_keystore(_ca("CA 2")), "which the brokers do not trust yet"),
])
def test_what_a_broker_could_not_serve_is_refused_with_the_fix(new, says):
    with pytest.raises(tls_reload.Refused, match=says):
        tls_reload.check(CURRENT, new, TRUST, now=NOW)


def test_a_key_of_another_certificate_is_refused():
    other_key = ec.generate_private_key(ec.SECP256R1())
    good = _keystore(CA)
    wrong = other_key.private_bytes(PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()) + good[good.index(b"-----BEGIN CERT"):]
    with pytest.raises(tls_reload.Refused, match="does not belong to its first certificate"):
        tls_reload.check(CURRENT, wrong, TRUST, now=NOW)


def _verifies(keystore: bytes, trusted: bytes, tmp_path) -> bool:
    """Whether a TLS client trusting `trusted` completes a handshake with a server presenting
    `keystore` as localhost (in memory: Python's OpenSSL, as a Kafka client would judge it)."""
    (tmp_path / "served.pem").write_bytes(keystore)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "served.pem")
    client_ctx = ssl.create_default_context(cadata=trusted.decode())
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(to_client, to_server, server_hostname="localhost")
    server = server_ctx.wrap_bio(to_server, to_client, server_side=True)
    done = {client: False, server: False}
    for _ in range(10):
        for end in done:
            try:
                end.do_handshake()
                done[end] = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLCertVerificationError:
                return False
        if all(done.values()):
            return True
    raise AssertionError("the handshake never finished")


def test_a_new_ca_passes_once_the_bundle_holds_it(tmp_path):
    """A keystore from CA 2 is refused while the brokers trust CA alone and taken once the
    bundle holds both, and the verdict is a TLS client's: one trusting that bundle verifies the
    new certificate (and the old one), one trusting the old CA alone refuses it. On today's
    clock, which OpenSSL reads."""
    today = dt.datetime.now(dt.UTC)
    ca1, ca2 = _ca("CA", at=today), _ca("CA 2", at=today)
    trust, current, new = ca1[1].public_bytes(PEM), _keystore(ca1, at=today), _keystore(ca2, at=today)
    bundle = trust + ca2[1].public_bytes(PEM)
    with pytest.raises(tls_reload.Refused, match="do not trust yet"):
        tls_reload.check(current, new, trust)
    assert _verifies(current, trust, tmp_path) and not _verifies(new, trust, tmp_path)
    taken = tls_reload.check(current, new, bundle)
    assert (taken.certificate.issuer, taken.sans) == (ca2[1].subject, ["127.0.0.1", "localhost"])
    assert _verifies(new, bundle, tmp_path) and _verifies(current, bundle, tmp_path)


def test_install_replaces_the_file_whole_and_private(tmp_path):
    path = tmp_path / "broker-keystore.pem"
    path.write_bytes(CURRENT)
    new = _keystore(CA)
    tls_reload.install(path, new)
    assert path.read_bytes() == new
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["broker-keystore.pem"]  # no temp left


def test_the_reload_sends_each_listeners_unchanged_store_locations():
    cfg = broker_config(BrokerSettings(1, (Node(1, "kafka-0"),), "/data", "/run/tls/key.pem",
                                       "/run/tls/ca.pem"))
    assert tls_reload.reload_configs(cfg) == {
        "listener.name.client.ssl.keystore.location": "/run/tls/key.pem",
        "listener.name.client.ssl.truststore.location": "/run/tls/ca.pem",
        "listener.name.internal.ssl.keystore.location": "/run/tls/key.pem",
        "listener.name.internal.ssl.truststore.location": "/run/tls/ca.pem",
    }
    own = {**cfg, "listener.name.client.ssl.keystore.location": "/run/tls/client.pem"}
    assert tls_reload.reload_configs(own, ["CLIENT"])[
        "listener.name.client.ssl.keystore.location"] == "/run/tls/client.pem"


class Broker:
    """Records each reload request with the keystore file as it was when the broker got it."""

    def __init__(self, keystore, failures: int = 0):
        self.keystore, self.reloads, self.failures = keystore, [], failures

    def incremental_alter_configs(self, resources):
        from concurrent.futures import Future

        (res,) = resources
        if self.failures:
            self.failures -= 1
            raise TimeoutError  # as a future's result(timeout=) raises it
        self.reloads.append((res.name, {e.name: e.value for e in res.incremental_configs},
                             self.keystore.read_bytes()))
        done = Future()
        done.set_result(None)
        return {res: done}


def _pod(tmp_path, keystore: bytes, trust: bytes = TRUST):
    """The broker pod's files: the mounted Secret, the keystore the entrypoint wrote, its
    server.properties."""
    tls = tmp_path / "tls"
    tls.mkdir()
    key_end = keystore.index(b"-----END PRIVATE KEY-----\n") + len(b"-----END PRIVATE KEY-----\n")
    (tls / "tls.key").write_bytes(keystore[:key_end])
    (tls / "tls.crt").write_bytes(keystore[key_end:])
    (tls / "ca.crt").write_bytes(trust)
    run = tmp_path / "run"
    run.mkdir()
    (run / "keystore.pem").write_bytes(keystore)
    cfg = broker_config(BrokerSettings(2, (Node(2, "kafka-2"),), "/data", str(run / "keystore.pem"),
                                       str(tls / "ca.crt")))
    (run / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in cfg.items()))
    return tls, run / "keystore.pem", run / "server.properties"


def _renew(tls, keystore: bytes, trust: bytes | None = None) -> None:
    """What kubelet does when the Secret changes: every file of it swapped."""
    key_end = keystore.index(b"-----END PRIVATE KEY-----\n") + len(b"-----END PRIVATE KEY-----\n")
    (tls / "tls.key").write_bytes(keystore[:key_end])
    (tls / "tls.crt").write_bytes(keystore[key_end:])
    if trust is not None:
        (tls / "ca.crt").write_bytes(trust)


def test_the_sidecar_installs_a_renewal_then_asks_its_broker_to_reload(tmp_path):
    tls, keystore, props = _pod(tmp_path, CURRENT)
    broker, seen = Broker(keystore), tls_reload.Watched(TRUST)
    assert tls_reload.step(tls, keystore, props, 2, broker, seen, now=NOW) is None  # unchanged
    assert broker.reloads == []
    renewed = _keystore(CA)
    _renew(tls, renewed)
    said = tls_reload.step(tls, keystore, props, 2, broker, seen, now=NOW)
    assert said == f"reloaded: serving certificate sha256 {tls_reload.fingerprint(renewed)[:16]}"
    ((node, configs, served),) = broker.reloads
    assert (node, served) == ("2", renewed) and keystore.read_bytes() == renewed
    assert configs["listener.name.client.ssl.keystore.location"] == str(keystore)
    assert tls_reload.step(tls, keystore, props, 2, broker, seen, now=NOW) is None
    assert len(broker.reloads) == 1


def test_a_new_ca_and_its_certificate_at_once_reload_the_trust_bundle_first(tmp_path):
    tls, keystore, props = _pod(tmp_path, CURRENT)
    broker, seen = Broker(keystore), tls_reload.Watched(TRUST)
    new_ca = _ca("CA 2")
    bundle = TRUST + new_ca[1].public_bytes(PEM)
    renewed = _keystore(new_ca)
    _renew(tls, renewed, bundle)
    said = tls_reload.step(tls, keystore, props, 2, broker, seen, settle=0, now=NOW)
    assert said.startswith("reloaded: serving")
    # First the bundle alone (the keystore still the old one), then the new certificate.
    assert [served for _, _, served in broker.reloads] == [CURRENT, renewed]
    assert seen.trusted == bundle


def test_a_certificate_with_other_names_is_refused_once_and_left_to_a_roll(tmp_path):
    tls, keystore, props = _pod(tmp_path, CURRENT)
    broker, seen = Broker(keystore), tls_reload.Watched(TRUST)
    _renew(tls, _keystore(CA, hosts=("localhost", "127.0.0.1", "kafka-3")))
    said = tls_reload.step(tls, keystore, props, 2, broker, seen, now=NOW)
    assert said.startswith(f"not reloaded: {tls}/tls.crt: subject") and "rolling restart" in said
    assert tls_reload.step(tls, keystore, props, 2, broker, seen, now=NOW) is None  # said once
    assert broker.reloads == [] and keystore.read_bytes() == CURRENT


def test_the_sidecar_waits_for_the_brokers_keystore(tmp_path):
    tls, keystore, props = _pod(tmp_path, CURRENT)
    keystore.unlink()
    assert tls_reload.step(tls, keystore, props, 2, Broker(keystore), tls_reload.Watched(TRUST)) is None


def test_a_reload_that_failed_is_done_again_next_round(tmp_path):
    # Seen on the real cluster: the keystore was written, the broker's answer timed out, and
    # the file already matched the Secret, so nothing asked the broker again.
    tls, keystore, props = _pod(tmp_path, CURRENT)
    broker, seen = Broker(keystore, failures=1), tls_reload.Watched(TRUST)
    assert tls_reload.step(tls, keystore, props, 2, broker, seen, now=NOW) is None
    renewed = _keystore(CA)
    _renew(tls, renewed)
    with pytest.raises(TimeoutError):
        tls_reload.step(tls, keystore, props, 2, broker, seen, now=NOW)
    assert keystore.read_bytes() == renewed and broker.reloads == []
    assert tls_reload.step(tls, keystore, props, 2, broker, seen, now=NOW).startswith("reloaded")
    assert [served for _, _, served in broker.reloads] == [renewed]


def test_the_watch_loop_makes_a_new_client_after_a_failure(tmp_path):
    tls, keystore, props = _pod(tmp_path, CURRENT)
    _renew(tls, renewed := _keystore(CA))
    clients = [Broker(keystore, failures=1), Broker(keystore)]
    made = iter(clients)
    tls_reload.watch(tls, keystore, props, 2, lambda: next(made), every=0, rounds=2, now=NOW)
    assert clients[0].reloads == [] and [s for _, _, s in clients[1].reloads] == [renewed]


def test_a_sigterm_during_a_round_ends_the_watch_before_its_next_sleep(tmp_path, monkeypatch):
    """Asked while the admin client was being made, the stop waits for a safe point: the round
    finishes (the renewal is still served) and the watch returns instead of sleeping."""
    monkeypatch.setattr(tls_reload, "_STOP", tls_reload._Stop())
    tls, keystore, props = _pod(tmp_path, CURRENT)
    _renew(tls, renewed := _keystore(CA))
    broker = Broker(keystore)

    def connect() -> Broker:
        tls_reload._stop()  # the signal handler, outside a sleep: it must not raise here
        return broker

    tls_reload.watch(tls, keystore, props, 2, connect, every=3600, rounds=None, now=NOW)
    assert [served for _, _, served in broker.reloads] == [renewed]


def test_the_sidecar_stops_at_sigterm(tmp_path):
    """It is its container's PID 1, which ignores a signal it has no handler for: the broker
    pod's every stop then waited its whole grace period (seen on the real cluster)."""
    import os
    import select
    import signal
    import subprocess
    import sys
    import time

    tls, keystore, props = _pod(tmp_path, CURRENT)
    env = {**os.environ, "HANZO_STREAM_BOOTSTRAP": "127.0.0.1:1",
           "HANZO_STREAM_SECURITY_PROTOCOL": "PLAINTEXT", "HOSTNAME": "kafka-2"}
    proc = subprocess.Popen([sys.executable, "-m", "hanzo_stream.pods.tls_reload", "--tls-dir", str(tls),
                             "--keystore", str(keystore), "--properties", str(props)],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:  # its first line comes once its handler is installed: no fixed wait (a loaded machine
        deadline = time.monotonic() + 120  # took more than 3 s to get there, and SIGTERM killed it)
        while proc.stderr is not None and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 1)[0]:
                line = proc.stderr.readline()
                assert line, f"it exited ({proc.poll()}) before it was watching"
                if "watching" in line:
                    break
        else:
            pytest.fail("the sidecar never said it was watching")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        said = proc.stderr.read() if proc.stderr else ""
        assert code == 0, f"exit {code}, not 0 (its own handler ends it): {said[-2000:]}"
    finally:
        proc.kill()
