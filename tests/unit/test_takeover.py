"""The takeover's pure part (hanzo_stream/pods/takeover.py): reading the old directory, the
configuration of the node that takes it over. The switch itself: tests/integration/test_takeover.py."""

from __future__ import annotations

import pytest

from hanzo_stream.core.broker_config import BrokerSettings, Node, broker_config
from hanzo_stream.pods import takeover


def _settings(node_id: int = 0) -> BrokerSettings:
    return BrokerSettings(node_id=node_id, nodes=(Node(node_id, "insights-kafka-0.insights-kafka"),),
                          log_dirs="/var/lib/kafka/data", keystore_pem="k.pem", truststore_pem="ca.pem")


def _old(tmp_path, meta: str | None) -> takeover.LogDir:
    if meta is not None:
        (tmp_path / "meta.properties").write_text(meta)
    return takeover.read_log_dir(tmp_path)


def test_a_kraft_directory_is_read_and_others_are_refused_with_the_way_forward(tmp_path):
    old = _old(tmp_path, "#\nnode.id=0\ndirectory.id=AbCdEfGhIjKlMnOpQrStUw\nversion=1\n"
                         "cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n")
    assert (old.node_id, old.cluster_id, old.directory_id) == (0, "MkU3OEVBNTcwNTJENDM2Qk",
                                                              "AbCdEfGhIjKlMnOpQrStUw")
    with pytest.raises(takeover.TakeoverRefused, match="ZooKeeper-mode broker.*migrate it to KRaft"):
        _old(tmp_path, "version=0\nbroker.id=0\ncluster.id=x\n")
    with pytest.raises(takeover.TakeoverRefused, match="not a Kafka log directory"):
        _old(tmp_path / "nowhere", None)


def test_the_new_node_keeps_the_old_id_directory_and_static_quorum_and_the_legacy_port(tmp_path):
    old = _old(tmp_path, "node.id=0\nversion=1\ncluster.id=c\n")
    cfg = takeover.upgraded_config(_settings(), old, 9092)
    ours = broker_config(_settings())
    assert cfg["node.id"] == "0" and cfg["log.dirs"] == str(tmp_path)
    assert "controller.quorum.bootstrap.servers" not in cfg
    assert cfg["controller.quorum.voters"] == "0@insights-kafka-0.insights-kafka:9095"
    assert cfg["listeners"] == ours["listeners"] + ",LEGACY://0.0.0.0:9092"
    assert cfg["advertised.listeners"].endswith(",LEGACY://insights-kafka-0.insights-kafka:9092")
    assert cfg["listener.security.protocol.map"].endswith(",LEGACY:PLAINTEXT")
    assert cfg["authorizer.class.name"] == ours["authorizer.class.name"]
    assert cfg["allow.everyone.if.no.acl.found"] == "true"  # until the registry's ACLs exist
    same = {k for k in ours if k not in ("controller.quorum.bootstrap.servers", "listeners", "log.dirs",
                                          "advertised.listeners", "listener.security.protocol.map",
                                          "allow.everyone.if.no.acl.found")}
    assert {k: cfg[k] for k in same} == {k: ours[k] for k in same}  # the rest is the platform's
    assert "LEGACY" not in takeover.upgraded_config(_settings(), old, None)["listeners"]
    with pytest.raises(takeover.TakeoverRefused, match="node 0, not 1"):
        takeover.upgraded_config(_settings(1), old, 9092)


def test_finalizing_raises_the_metadata_version_to_this_release():
    assert takeover.release("4.4.0") == "4.4"
    assert takeover.finalize_args("b:9093", "c.properties")[-2:] == ["--release-version",
                                                                    takeover.release()]


def test_after_finalize_the_node_runs_the_platforms_own_config_legacy_aside(tmp_path):
    old = _old(tmp_path, "node.id=0\nversion=1\ncluster.id=c\n")
    ours = broker_config(takeover.broker_settings(_settings(), old))
    assert takeover.settled_config(_settings(), old, None) == ours
    with_legacy = takeover.settled_config(_settings(), old, 9092)
    assert with_legacy["allow.everyone.if.no.acl.found"] == "false"  # deny by default again
    assert "controller.quorum.voters" not in with_legacy
    assert {k: v for k, v in with_legacy.items() if "listener" not in k} == {
        k: v for k, v in ours.items() if "listener" not in k}
