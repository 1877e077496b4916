"""The one broker configuration function and its renderings."""

from __future__ import annotations

import pytest

from hanzo_stream.core.broker_config import (
    BrokerSettings,
    Node,
    broker_config,
    from_apache_env,
    from_bitnami_env,
    jaas_config,
    quorum_format_args,
    to_apache_env,
    to_bitnami_env,
    to_server_properties,
)


def settings(n: int, node_id: int = 1) -> BrokerSettings:
    nodes = tuple(Node(i, f"kafka-{i - 1}.kafka-headless") for i in range(1, n + 1))
    return BrokerSettings(node_id, nodes, "/data", "/tls/keystore.pem", "/tls/ca.pem")


def test_single_broker_replicates_everything_once():
    cfg = broker_config(settings(1))
    for key in ("default.replication.factor", "min.insync.replicas", "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor", "transaction.state.log.min.isr"):
        assert cfg[key] == "1", key


def test_three_brokers_rf3_min_isr2_and_a_dynamic_quorum():
    cfg = broker_config(settings(3, node_id=2))
    assert cfg["default.replication.factor"] == cfg["offsets.topic.replication.factor"] == "3"
    assert cfg["min.insync.replicas"] == cfg["transaction.state.log.min.isr"] == "2"
    assert cfg["node.id"] == "2"
    # KIP-853: no static voter list; the voters live in the metadata log.
    assert "controller.quorum.voters" not in cfg
    assert cfg["controller.quorum.bootstrap.servers"] == (
        "kafka-0.kafka-headless:9095,kafka-1.kafka-headless:9095,kafka-2.kafka-headless:9095")
    assert cfg["advertised.listeners"].split(",") == [
        "CLIENT://kafka-1.kafka-headless:9093", "INTERNAL://kafka-1.kafka-headless:9094",
        "CONTROLLER://kafka-1.kafka-headless:9095"]


def test_quorum_format_args_standalone_initial_and_joining():
    assert quorum_format_args(settings(1), {1: "dirA"}) == ["--standalone"]
    three = {1: "dirA", 2: "dirB", 3: "dirC"}
    want = ["--initial-controllers", "1@kafka-0.kafka-headless:9095:dirA,"
            "2@kafka-1.kafka-headless:9095:dirB,3@kafka-2.kafka-headless:9095:dirC"]
    assert [quorum_format_args(settings(3, i), three) for i in (1, 2, 3)] == [want] * 3
    # A node added to a 1-voter cluster never claims a voter seat by itself.
    assert quorum_format_args(settings(3, 2), {1: "dirA"}) == ["--no-initial-controllers"]


def test_security_defaults():
    cfg = broker_config(settings(1))
    protocols = dict(p.split(":") for p in cfg["listener.security.protocol.map"].split(","))
    assert set(protocols.values()) == {"SASL_SSL"}
    assert "PLAINTEXT" not in cfg["listeners"] + cfg["listener.security.protocol.map"]
    assert cfg["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,PLAIN"
    assert cfg["ssl.enabled.protocols"] == "TLSv1.3"
    assert cfg["allow.everyone.if.no.acl.found"] == "false"
    assert cfg["super.users"] == "User:admin"
    assert cfg["authorizer.class.name"].endswith("StandardAuthorizer")
    assert cfg["auto.create.topics.enable"] == cfg["unclean.leader.election.enable"] == "false"
    assert cfg["process.roles"] == "broker,controller"


def test_no_secret_in_the_non_secret_half():
    cfg = broker_config(settings(3))
    assert not any("jaas" in k or "password" in k for k in cfg)
    secret = jaas_config("s3cret", {"llm-gateway": "pw1"})
    assert 'user_llm-gateway="pw1"' in secret["listener.name.client.plain.sasl.jaas.config"]
    assert all("s3cret" in v for k, v in secret.items() if "plain" in k)


@pytest.mark.parametrize("n", [1, 3])
def test_env_renderings_round_trip(n):
    cfg = broker_config(settings(n))
    assert from_bitnami_env(to_bitnami_env(cfg)) == cfg
    assert from_apache_env(to_apache_env(cfg)) == cfg
    assert to_bitnami_env(cfg)["KAFKA_CFG_NODE_ID"] == "1"
    assert to_apache_env(cfg)["KAFKA_NODE_ID"] == "1"


def test_bitnami_refuses_keys_it_cannot_express():
    with pytest.raises(ValueError, match="bitnami"):
        to_bitnami_env({"listener.name.client.scram-sha-512.sasl.jaas.config": "x"})


def test_server_properties_one_line_per_key():
    text = to_server_properties({"a.b": "1", "c": "x\ny"})
    assert text == "a.b=1\nc=x\\ny\n"


def test_an_extra_listener_is_a_client_listener_with_its_own_certificate():
    from hanzo_stream.core.broker_config import ExtraListener

    base = settings(1)
    s = BrokerSettings(base.node_id, base.nodes, base.log_dirs, base.keystore_pem,
                       base.truststore_pem, extra_listeners=(ExtraListener("WRONGNAME", 9099, "/tls/x.pem"),))
    cfg = broker_config(s)
    assert cfg["listeners"].endswith(",WRONGNAME://0.0.0.0:9099")
    assert cfg["advertised.listeners"].endswith(",WRONGNAME://kafka-0.kafka-headless:9099")
    assert cfg["listener.security.protocol.map"].endswith(",WRONGNAME:SASL_SSL")
    assert cfg["listener.name.wrongname.ssl.keystore.location"] == "/tls/x.pem"
    assert cfg["listener.name.wrongname.sasl.enabled.mechanisms"] == cfg["sasl.enabled.mechanisms"]
    assert cfg["ssl.keystore.location"] == "/tls/keystore.pem"  # CLIENT keeps its own
    jaas = jaas_config("s3cret", {"u": "p"}, ("CLIENT", "WRONGNAME"))
    assert jaas["listener.name.wrongname.plain.sasl.jaas.config"] == \
        jaas["listener.name.client.plain.sasl.jaas.config"]
    assert "listener.name.wrongname.scram-sha-512.sasl.jaas.config" in jaas
    assert set(cfg) - set(broker_config(base)) == {
        "listener.name.wrongname.ssl.keystore.location", "listener.name.wrongname.sasl.enabled.mechanisms"}
