"""Every pinned third-party version, in one place.

The Kafka version is used by the local jars, the Pulumi image tags and the docs.
Production runs the 3.7 line; 3.7.2 is its last patch release.
"""

KAFKA_VERSION = "3.7.2"
SCALA_BINARY = "2.13"

# Official images. Bitnami moved its free tags to docker.io/bitnamilegacy in 2025.
BITNAMI_IMAGE = f"docker.io/bitnamilegacy/kafka:{KAFKA_VERSION}"
APACHE_IMAGE = f"docker.io/apache/kafka:{KAFKA_VERSION}"

JMX_EXPORTER_VERSION = "1.0.1"

# Workflow linter run by the test suite over .github/workflows (go install, .ci/install-lint.sh).
ACTIONLINT_VERSION = "1.7.12"
