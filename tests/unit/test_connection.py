"""Connection settings: the same env vars drive every client family."""

from __future__ import annotations

import pytest

from hanzo_stream.core.connection import Connection, ConnectionError_

ENV = {"HANZO_STREAM_BOOTSTRAP": "127.0.0.1:9093", "HANZO_STREAM_SASL_USERNAME": "llm-gateway",
       "HANZO_STREAM_SASL_PASSWORD": "pw", "HANZO_STREAM_CA_FILE": "/ca.pem"}


def test_from_env_and_flags_override():
    c = Connection.from_env(ENV, username="iam-service")
    assert (c.bootstrap, c.username, c.security_protocol, c.sasl_mechanism) == (
        "127.0.0.1:9093", "iam-service", "SASL_SSL", "SCRAM-SHA-512")


def test_missing_bootstrap_says_how_to_fix():
    with pytest.raises(ConnectionError_, match="hanzo-stream local env"):
        Connection.from_env({})


def test_client_families_agree():
    c = Connection.from_env(ENV)
    assert c.confluent()["ssl.ca.location"] == "/ca.pem"
    assert c.confluent()["sasl.mechanism"] == "SCRAM-SHA-512"
    assert c.kafka_python()["sasl_plain_username"] == "llm-gateway"
    assert c.kafka_python()["ssl_check_hostname"] is True
    java = c.java()
    assert "ScramLoginModule" in java["sasl.jaas.config"] and java["ssl.truststore.type"] == "PEM"


def test_password_never_in_repr_but_in_exports():
    c = Connection.from_env(ENV | {"HANZO_STREAM_SASL_PASSWORD": "hunter2"})
    assert "hunter2" not in repr(c)
    exports = c.env_exports()
    assert "export HANZO_STREAM_SASL_PASSWORD=hunter2" in exports
    assert Connection.from_env(dict(line.split(" ", 1)[1].split("=", 1)
                                    for line in exports.splitlines())) == c
