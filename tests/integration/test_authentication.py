"""Every way of getting the connection wrong is refused at once, each with its own error.

Six cases against the session broker: no SASL at all (anonymous), plaintext sent to the TLS
listener, a wrong password, an unknown user, a CA the client does not trust, and a
certificate issued (by the trusted CA) for another host, served by the test broker's
WRONGNAME listener. Each is tried with both client families, with their own timeouts set
far above the bound the failure must arrive within, so a timeout can never pass for a
refusal; and `hanzo_stream.core.diagnose` must name the exact cause, which the families cannot
always do themselves (docs/security.md lists what each reports).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from hanzo_stream.core.connection import Connection
from hanzo_stream.core.diagnose import diagnose
from hanzo_stream.local.tls import make_tls

from .conftest import Cluster

pytestmark = pytest.mark.integration

PRINCIPAL = "llm-gateway"
CLIENT_TIMEOUT_S = 60  # every client-side timeout; a refusal must come long before
REFUSED_WITHIN_S = 15  # generous for a loaded CI machine, far below CLIENT_TIMEOUT_S


def _untrusted_ca(c: Connection, tmp: Path) -> Connection:
    return replace(c, ca_file=str(make_tls(tmp / "foreign-ca").ca_pem))


def _wrong_name(c: Connection, cluster: Cluster) -> Connection:
    if cluster.local is None or not cluster.local.wrong_name_bootstrap:
        pytest.skip("the wrong-name listener exists on the local test broker only")
    return replace(c, bootstrap=cluster.local.wrong_name_bootstrap)


CONNECTION_LOST = {"NoBrokersAvailable", "KafkaConnectionError"}
LOGIN_REFUSED = CONNECTION_LOST | {"SaslAuthenticationFailedError", "ConnectionError"}
# case -> (how to break a good connection, what diagnose() must say,
#          librdkafka error codes allowed, kafka-python's first reported error allowed).
# kafka-python-ng 2.2 and kafka-python 3 report differently (see kafka_python_refusal):
# both are allowed. Neither can tell every case apart; diagnose() must.
Breaker = Callable[[Connection, Cluster, Path], Connection]
CASES: dict[str, tuple[Breaker, str, set[str], set[str]]] = {
    "no_sasl": (lambda c, cl, t: replace(c, security_protocol="SSL"), "sasl_required",
                {"_TRANSPORT", "_ALL_BROKERS_DOWN"}, CONNECTION_LOST),
    "plaintext_to_tls": (lambda c, cl, t: replace(c, security_protocol="SASL_PLAINTEXT"),
                         "tls_required", {"_TRANSPORT", "_ALL_BROKERS_DOWN"}, CONNECTION_LOST),
    "wrong_password": (lambda c, cl, t: replace(c, password="not-" + (c.password or "")),
                       "authentication_failed", {"_AUTHENTICATION"}, LOGIN_REFUSED),
    "unknown_user": (lambda c, cl, t: replace(c, username="nobody-in-the-registry"),
                     "authentication_failed", {"_AUTHENTICATION"}, LOGIN_REFUSED),
    "untrusted_ca": (lambda c, cl, t: _untrusted_ca(c, t), "untrusted_certificate", {"_SSL"},
                     {"NoBrokersAvailable", "CERTIFICATE_VERIFY_FAILED"}),
    "hostname_mismatch": (lambda c, cl, t: _wrong_name(c, cl), "hostname_mismatch", {"_SSL"},
                          {"NoBrokersAvailable", "CERTIFICATE_VERIFY_FAILED (name mismatch)"}),
}


@pytest.fixture
def broken(request, hip_cluster: Cluster, tmp_path_factory) -> tuple[str, Connection]:
    case = request.param
    conn = CASES[case][0](hip_cluster.as_(PRINCIPAL), hip_cluster, tmp_path_factory.mktemp(case))
    return case, conn


Seen = list[tuple[str, float]]  # (error, seconds after the client was created), in order


def confluent_refusal(conn: Connection, wanted: set[str]) -> Seen:
    """The errors librdkafka reports for a producer's first record, until one is `wanted`."""
    from confluent_kafka import Producer

    errors: list = []
    delivered: list = []
    t0 = time.monotonic()
    p = Producer(conn.confluent() | {
        "error_cb": lambda e: errors.append((e, time.monotonic() - t0)),
        "message.timeout.ms": CLIENT_TIMEOUT_S * 1000,
        "socket.connection.setup.timeout.ms": CLIENT_TIMEOUT_S * 1000,
        "log_level": 0})
    p.produce("dead_letter", b"must never arrive", on_delivery=lambda e, m: delivered.append(e))
    while (not any(e.name() in wanted for e, _ in errors)
           and time.monotonic() - t0 < REFUSED_WITHIN_S):
        p.poll(0.1)
    p.purge()
    p.flush(1)
    assert not any(e is None for e in delivered), "the record was delivered"
    return [(e.name(), at) for e, at in errors]


def kafka_python_refusal(conn: Connection, wanted: set[str]) -> Seen:
    """The failures kafka-python reports, raised or logged.

    kafka-python-ng 2.2 raises at once. kafka-python 3 retries its bootstrap until
    bootstrap_timeout_ms and then raises KafkaTimeoutError, but logs each failure the moment
    it happens: that log line is its answer (given 2 s here, as the first one comes at once).
    """
    import logging

    from kafka import KafkaAdminClient
    from kafka.errors import KafkaTimeoutError

    logged: Seen = []

    class First(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if "CERTIFICATE_VERIFY_FAILED" in msg:
                name = "CERTIFICATE_VERIFY_FAILED" + (" (name mismatch)" if "mismatch" in msg else "")
            elif record.exc_info and record.exc_info[0]:
                name = record.exc_info[0].__name__
            else:
                found = re.search(r"\b([A-Za-z]+Error)\b", msg)
                name = found.group(1) if found else ""
            if name:
                logged.append((name, time.monotonic() - t0))

    ms = CLIENT_TIMEOUT_S * 1000
    options = {"request_timeout_ms": ms, "api_version_auto_timeout_ms": ms,
               "connections_max_idle_ms": 2 * ms, "bootstrap_timeout_ms": 2000}
    options = {k: v for k, v in options.items() if k in KafkaAdminClient.DEFAULT_CONFIG}
    handler, log = First(logging.WARNING), logging.getLogger("kafka")
    log.addHandler(handler)
    t0 = time.monotonic()
    try:
        with pytest.raises(Exception) as raised:  # noqa: PT011 (what it was is asserted below)
            admin = KafkaAdminClient(**conn.kafka_python(), **options)
            try:
                admin.list_topics()
            finally:
                admin.close()
    finally:
        log.removeHandler(handler)
    if not isinstance(raised.value, KafkaTimeoutError):
        return [(type(raised.value).__name__, time.monotonic() - t0)]
    return logged  # kafka-python 3: what it logged before timing out


def _family(name: str) -> str:
    if name == "kafka-python":
        from kafka import __version__

        return f"kafka-python {__version__}"
    return name


# family -> (how to try, index of its allowed errors in CASES)
FAMILIES = {"confluent-kafka": (confluent_refusal, 2), "kafka-python": (kafka_python_refusal, 3)}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("broken", list(CASES), indirect=True)
def test_each_client_family_is_refused_at_once_with_the_cases_error(broken, family):
    case, conn = broken
    attempt, allowed = FAMILIES[family]
    wanted = CASES[case][allowed]
    seen = attempt(conn, wanted)
    first = next(((e, at) for e, at in seen if e in wanted), None)
    assert first is not None, f"{case}: {family} never reported any of {wanted}: {seen}"
    print(f"\n{case}: {_family(family)} reported {first[0]} after {first[1]:.2f}s "
          f"(first of {len(seen)}: {', '.join(sorted({e for e, _ in seen}))})")
    assert first[1] < REFUSED_WITHIN_S


@pytest.mark.parametrize("broken", list(CASES), indirect=True)
def test_diagnose_names_each_cause(broken):
    case, conn = broken
    t0 = time.monotonic()
    problem = diagnose(conn, timeout=REFUSED_WITHIN_S)
    print(f"\n{case}: {problem and problem.kind}: {problem} ({time.monotonic() - t0:.2f}s)")
    assert problem is not None and problem.kind == CASES[case][1], (case, problem)
    assert conn.password is None or conn.password not in problem.message


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_diagnose_finds_nothing_wrong_with_good_credentials(hip_cluster, mechanism):
    assert diagnose(hip_cluster.as_(PRINCIPAL, mechanism)) is None


def test_the_wrong_name_listener_differs_only_in_its_certificate(hip_cluster):
    """Without hostname verification the WRONGNAME listener logs in fine: its certificate is
    from the trusted CA and only its name is wrong, so the refusals above are about the name."""
    from confluent_kafka.admin import AdminClient

    conn = _wrong_name(hip_cluster.as_(PRINCIPAL), hip_cluster)
    unchecked = AdminClient(conn.confluent() | {"ssl.endpoint.identification.algorithm": "none"})
    assert "dead_letter" in unchecked.list_topics(timeout=30).topics


def test_check_command_says_why_and_never_prints_the_password(hip_cluster):
    from typer.testing import CliRunner

    from hanzo_stream.cli import app
    from hanzo_stream.core.connection import ENV

    good = hip_cluster.as_(PRINCIPAL)
    env = {var: str(getattr(good, f)) for f, var in ENV.items()}
    ok = CliRunner().invoke(app, ["check"], env=env)
    assert ok.exit_code == 0, ok.output
    assert f"logged in as {PRINCIPAL}" in ok.output
    refused = CliRunner().invoke(app, ["check"], env=env | {ENV["password"]: "not-the-password"})
    assert refused.exit_code == 1 and "authentication_failed" in refused.output, refused.output
    assert "not-the-password" not in refused.output
