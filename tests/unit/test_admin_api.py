"""The admin Protocols name calls that confluent-kafka's AdminClient, kafka-python's
KafkaAdminClient and CountingAdmin really have: a library upgrade that drops or renames one
fails here, not in a plan against a live cluster."""

from __future__ import annotations

import inspect

from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient

from hanzo_stream.reconcile.admin import CountingAdmin
from hanzo_stream.reconcile.admin_api import Admin, KafkaAdmin, KafkaPythonAdmin


def methods(protocol: type) -> set[str]:
    return {n for n, v in vars(protocol).items()
            if not n.startswith("_") and (inspect.isfunction(v) or isinstance(v, property))}


def test_confluent_kafka_has_every_call_the_reconciler_makes():
    assert methods(KafkaAdmin) and all(callable(getattr(AdminClient, n, None)) for n in methods(KafkaAdmin))


def test_counting_admin_adds_what_confluent_kafka_lacks():
    assert all(hasattr(CountingAdmin, n) for n in methods(Admin)), methods(Admin)


def test_kafka_python_has_every_call_counting_admin_makes():
    assert all(callable(getattr(KafkaAdminClient, n, None)) for n in methods(KafkaPythonAdmin))
