"""Hanzo Stream's Pulumi program: KRaft Kafka and everything around it on Kubernetes.

`python -m infra.render <stack>` renders a stack offline under Pulumi mocks (no cluster,
no Pulumi CLI); the unit tests use the same harness.
"""
