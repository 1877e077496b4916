"""Every pinned third-party version, in one place.

The Kafka version is used by the local jars, the Pulumi image tags and the docs.
Production runs the current 4.x line (4.4.0: the newest release Maven Central serves).
"""

# renovate: datasource=maven depName=org.apache.kafka:kafka_2.13
KAFKA_VERSION = "4.4.0"
# renovate: follows KAFKA_VERSION (the Scala build Kafka 4 ships)
SCALA_BINARY = "2.13"
# Kafka 4 logs through slf4j 1.7 -> log4j2; its POMs leave the binding to the distribution,
# so the local jars add the one Kafka 4.4.0 ships (log4j-slf4j-impl of its log4j-core).
# renovate: datasource=maven depName=org.apache.logging.log4j:log4j-slf4j-impl
KAFKA_LOG4J2 = "2.25.5"

# The standard's running cluster (insights-kafka, bitnami/kafka:3.7, KRaft combined mode): the
# release the takeover starts from (hanzo_stream/pods/takeover.py), its jars from Maven Central.
# renovate: held (the standard's running cluster, not ours to move)
TAKEOVER_FROM_KAFKA = "3.7.2"
# log4j 1 (reload4j) binding of Kafka 3.x, as its distribution ships it.
# renovate: held (as the distribution of TAKEOVER_FROM_KAFKA ships it)
TAKEOVER_FROM_SLF4J_RELOAD4J = "1.7.36"

# The official Apache Kafka image is the default. Bitnami publishes no free Kafka 4.4.0
# image (its free tags froze in docker.io/bitnamilegacy in 2025): the bitnami flavour runs
# the image a stack names (a Bitnami subscription, or a mirror); docs/images.md.
# renovate: follows KAFKA_VERSION
APACHE_IMAGE = f"docker.io/apache/kafka:{KAFKA_VERSION}"

# renovate: datasource=maven depName=io.prometheus.jmx:jmx_prometheus_javaagent
JMX_EXPORTER_VERSION = "1.0.1"
# The agent jar's SHA-256 (Maven Central's), checked wherever it is fetched or baked in.
# renovate: follows JMX_EXPORTER_VERSION (a unit test names the new digest)
JMX_EXPORTER_SHA256 = "7d61f737fd661610ccc14aea79764faa1ea94a340cbc8f0029b3d2edea3d80c1"

# The local schema registry (hanzo_stream/local/schema_registry.py): Apicurio's Quarkus build
# from Maven Central; 3.1 and later need Java 21, the platform runs Java 17.
# renovate: datasource=maven depName=io.apicurio:apicurio-registry-app
APICURIO_VERSION = "3.0.9"

# Third-party images a stack may run (infra/settings.py defaults; docs/images.md).
# renovate: datasource=docker depName=docker.io/curlimages/curl
CURL_IMAGE = "docker.io/curlimages/curl:8.10.1"  # an initImage that can download the agent
# renovate: datasource=docker depName=docker.io/danielqsj/kafka-exporter
KAFKA_EXPORTER_IMAGE = "docker.io/danielqsj/kafka-exporter:v1.8.0"
# renovate: datasource=docker depName=docker.io/confluentinc/cp-schema-registry
SCHEMA_REGISTRY_IMAGE = "docker.io/confluentinc/cp-schema-registry:7.7.1"
# This project's own images, as published (tagged with the package version, pyproject.toml).
# renovate: follows pyproject.toml's version (this project's own image)
RECONCILER_IMAGE = "ghcr.io/hanzoai/hanzo-stream:0.1.0"
# renovate: follows pyproject.toml's version (this project's own image)
SPARK_IMAGE = "ghcr.io/hanzoai/hanzo-stream-spark:0.1.0"

# Workflow linter run by the test suite over .github/workflows (go install, .ci/install-lint.sh).
# renovate: datasource=go depName=github.com/rhysd/actionlint
ACTIONLINT_VERSION = "1.7.12"

# PySpark and its Kafka connector (spark-sql-kafka-0-10_2.13) must be the same release;
# pyproject.toml pins the same pyspark (a unit test checks).
# renovate: datasource=maven depName=org.apache.spark:spark-sql-kafka-0-10_2.13
SPARK_VERSION = "4.2.0"
# renovate: follows SPARK_VERSION
SPARK_SCALA = "2.13"  # Spark 4 is built for Scala 2.13 only
# What spark-sql-kafka 4.2.0 is built against (its POM), fetched and baked next to it. Kept
# at 3.9 under the 4.4 brokers on purpose: the connector's own client (docs/jobs.md).
# renovate: follows SPARK_VERSION (the connector's POM)
SPARK_KAFKA_CLIENTS = "3.9.2"
# renovate: follows SPARK_VERSION (the connector's POM)
SPARK_COMMONS_POOL2 = "2.13.1"
# The bases of this project's own images (images/Dockerfile.*, rendered by
# hanzo_stream/artifacts/dockerfiles.py).
# renovate: datasource=docker depName=docker.io/library/python
PYTHON_BASE_IMAGE = "docker.io/library/python:3.11-slim-bookworm"
# renovate: follows SPARK_VERSION
SPARK_BASE_IMAGE = f"docker.io/apache/spark:{SPARK_VERSION}-scala{SPARK_SCALA}-java17-python3-ubuntu"
# s3a: hadoop-aws must match PySpark's bundled Hadoop; the SDK v2 bundle hadoop-aws was built with.
# renovate: follows SPARK_VERSION (the Hadoop PySpark bundles)
SPARK_HADOOP = "3.5.0"
# renovate: follows SPARK_HADOOP (what hadoop-aws was built with)
SPARK_AWS_SDK = "2.35.4"
# hadoop-aws 3.5.0 reads through the S3 Analytics Accelerator (a compile dependency in its POM).
# renovate: follows SPARK_HADOOP (hadoop-aws's POM)
SPARK_S3_ANALYTICS_ACCELERATOR = "1.3.1"

# The local S3-compatible object store (Hanzo Storage/MinIO in production): s3proxy from Maven
# Central, its self-contained jar, filesystem-nio2 backend. 4.x lists S3A's directory markers as
# S3 does (3.0.0 did not: Spark's checkpoint and file-sink logs failed on empty directories).
# renovate: datasource=maven depName=org.gaul:s3proxy
S3PROXY_VERSION = "4.1.0"

# Alert routing: Debian's prometheus-alertmanager locally, the same release's image in production.
# renovate: follows Debian's prometheus-alertmanager (the local process)
ALERTMANAGER_VERSION = "0.25.0"
# renovate: follows ALERTMANAGER_VERSION
ALERTMANAGER_IMAGE = f"quay.io/prometheus/alertmanager:v{ALERTMANAGER_VERSION}"

# The 3.5 line, for bench/spark_versions.py only (the jobs need Spark 4's VARIANT): the newest
# 3.5 release whose spark-sql-kafka-0-10 Maven Central serves (for Scala 2.12, as PyPI's
# pyspark 3.5 is built), and what that connector's POM builds against.
# renovate: held (the newest 3.5 with a Scala 2.12 connector: bench only)
SPARK_BASELINE_VERSION = "3.5.7"
# renovate: held (as SPARK_BASELINE_VERSION)
SPARK_BASELINE_SCALA = "2.12"
# renovate: follows SPARK_BASELINE_VERSION (the connector's POM)
SPARK_BASELINE_KAFKA_CLIENTS = "3.4.1"
# renovate: follows SPARK_BASELINE_VERSION (the connector's POM)
SPARK_BASELINE_COMMONS_POOL2 = "2.11.1"

# The Go toolchain every Go build here uses (hanzo_stream/artifacts/gotoolchain.py): the machine's own if
# it is at least this release, else this release fetched from the Go module proxy
# (golang.org/toolchain, what `GOTOOLCHAIN` downloads). At least every kube/*/go.mod's `go` line.
# renovate: datasource=golang-version depName=go
GO_VERSION = "1.26.8"
# renovate: follows GO_VERSION (a unit test names the new hash)
GO_TOOLCHAIN_HASH = "h1:ZOmGe1OnfREDMIdb1Qi4G9JSuDPBLGExZMQ4nis1RXM="  # its module zip's hash

# The local Kubernetes (hanzo_stream/kube/build.py builds these from the Go module proxy;
# kube/k8s/go.mod and kube/pulumi/go.mod require the same releases, a unit test checks).
# renovate: datasource=go depName=k8s.io/kubernetes
KUBERNETES_VERSION = "v1.37.2"
# renovate: datasource=go depName=github.com/coredns/coredns
COREDNS_VERSION = "v1.15.0"  # cluster DNS, built with only the plugins it uses
# renovate: datasource=go depName=github.com/pulumi/pulumi/pkg/v3
PULUMI_VERSION = "3.274.1"  # the CLI (github.com/pulumi/pulumi/pkg/v3)
# pulumi-resource-kubernetes: the proxy serves one pseudo-version of provider/v4, the commit
# of the day before release 4.25.0; the binary is stamped 4.25.0 and the PyPI SDK pins it.
# renovate: datasource=pypi depName=pulumi-kubernetes
PULUMI_KUBERNETES_VERSION = "4.25.0"
# renovate: follows PULUMI_KUBERNETES_VERSION (the proxy's pseudo-version)
PULUMI_KUBERNETES_PROVIDER_MODULE = "v4.0.0-20260115033456-f47bc2d6f199"

# The local Kubernetes' own images, built here without any registry (hanzo_stream/kube/images.py):
# Debian release and JRE of the kafka and hanzo-stream images (bookworm's python3 is 3.11,
# the build checks it), and the references the cluster runs them under.
# renovate: held (the Debian release the images are built from)
KUBE_IMAGE_DEBIAN = "bookworm"
# renovate: follows KUBE_IMAGE_DEBIAN (its python3)
KUBE_IMAGE_PYTHON = "3.11"
# renovate: follows KUBE_IMAGE_DEBIAN (its JRE)
KUBE_IMAGE_JAVA = "17"
# renovate: follows nothing: built here (hanzo_stream/kube/images.py)
KUBE_PAUSE_IMAGE = "localhost/hanzo-stream/pause:1"
# renovate: follows KAFKA_VERSION
KUBE_KAFKA_IMAGE = f"localhost/hanzo-stream/kafka:{KAFKA_VERSION}"  # stands in for APACHE_IMAGE
# renovate: follows TAKEOVER_FROM_KAFKA
KUBE_LEGACY_KAFKA_IMAGE = f"localhost/hanzo-stream/kafka:{TAKEOVER_FROM_KAFKA}"  # bitnami/kafka:3.7
# renovate: follows nothing: built here, tagged by its contents
KUBE_HANZO_STREAM_REPO = "localhost/hanzo-stream/hanzo-stream"  # tagged with a hash of its contents
