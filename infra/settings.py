"""Every setting a stack can change, with its default, in one table.

`SETTINGS` is the documentation and the parser at once: docs/deploy.md lists the same
keys (a test keeps them in step), and a stack file that names an unknown key is refused,
so a typo in Pulumi.<stack>.yaml fails `pulumi preview` instead of being ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hanzo_stream.artifacts import jars, versions
from hanzo_stream.monitoring import RUNBOOK_BASE_URL
from hanzo_stream.registry import platform

PROJECT = "hanzo-stream"
# The broker pods' ports (topology.py names them for every module).
PORTS = {"client": 9093, "internal": 9094, "controller": 9095, "metrics": 9404}

# The Prometheus JMX exporter agent: where it is published (the reconciler image bakes it in
# from there, images/Dockerfile.reconciler), its checksum, and where that image keeps it.
JMX_AGENT_URL = jars.central_url(jars.JMX_AGENT)  # Maven Central's copy
JMX_AGENT_SHA256 = versions.JMX_EXPORTER_SHA256
JMX_AGENT_IN_IMAGE = "/opt/hanzo-stream/jmx/jmx_prometheus_javaagent.jar"
CURL_IMAGE = versions.CURL_IMAGE  # an initImage that can download it
# Node labels the API server copies onto a pod when it binds it to a node (PodTopologyLabels
# admission, Kubernetes 1.35+), so a broker can read one as its rack; "" turns racks off.
RACK_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region", "")


@dataclass(frozen=True)
class Setting:
    key: str
    default: Any
    doc: str
    secret: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting("environment", "dev", "`dev` or `prod`; `prod` turns on the production policy "
            "(3+ brokers, RF >= 3, min ISR >= 2)"),
    Setting("namespace", "hanzo", "namespace for every workload of the platform"),
    Setting("createNamespace", True, "create the namespace (false: it already exists)"),
    Setting("clientNamespaces", ["hanzo"], "namespaces whose pods may reach the client port "
            "9093 (the platform's own namespace always may) and the schema registry"),
    Setting("monitoringNamespace", "monitoring", "namespace of Prometheus; only it may scrape "
            "metrics ports"),
    Setting("clusterDomain", "cluster.local", "the cluster's DNS domain"),
    Setting("brokers", 1, "combined broker+controller pods, an odd number: 1 (dev) or 3, 5, ... "
            "(prod). Raising it on a running stack grows the controller quorum in place "
            "(docs/runbooks/scaling-1-to-3.md); lowering it is refused (docs/deploy.md)"),
    Setting("clusterId", "", "the KRaft cluster id; empty: derived from the namespace's uid, so it "
            "lives as long as the retained volumes do (set it only to adopt a running cluster's id)"),
    Setting("brokersRemovedByHand", 0, "set it to the new, smaller `brokers` once the extra "
            "brokers' replicas are moved, their voters removed and the brokers unregistered by "
            "hand (docs/deploy.md, \"Fewer brokers\"); 0: a smaller `brokers` is refused"),
    Setting("initialControllers", 0, "pods that formed the controller quorum when the stack "
            "was created; 0: the size the program recorded at the stack's first `pulumi up` "
            "(set it only for a stack whose record is missing or wrong; 1, or 3 up to `brokers`)"),
    Setting("statefulSetName", "kafka", "the brokers' StatefulSet; its pods are <name>-0, "
            "<name>-1, ... and claim the volumes data-<pod>. A takeover names the running one's "
            "(`insights-kafka`), so its pod claims the old volume (docs/takeover.md)"),
    Setting("headlessServiceName", "kafka-headless", "the StatefulSet's governing (headless) "
            "Service: each broker is <pod>.<this>.<namespace>.svc. A takeover keeps the "
            "standard's `insights-kafka`, the name its clients dial"),
    Setting("clientServiceName", "kafka", "the Service clients bootstrap from (port 9093)"),
    Setting("takeoverSwitch", False, "true only for the `pulumi up` that switches a running "
            "Kafka 3.3+ KRaft cluster over in place (docs/takeover.md): the old static quorum, "
            "no ACL refusal before the registry is applied, and a broker that refuses to start "
            "on a volume that is not the old cluster's instead of formatting it. Needs "
            "`clusterId` (the old one's) and 1 broker; false again once `kafka-features "
            "upgrade` has run (the roll into the platform's own configuration)"),
    Setting("legacyPlaintextPort", 0, "a PLAINTEXT listener (`LEGACY`) on this port for the "
            "clients of a taken-over cluster that still dial the old address (9092), reachable "
            "only from pods in the namespace, and only while topics.yaml declares its "
            "`legacy_plaintext` window; 0: none, every listener is SASL_SSL"),
    Setting("brokerUid", 0, "uid and fsGroup of the broker pods; 0: the image flavour's "
            "(apache 1000, bitnami 1001). A taken-over Bitnami volume's files belong to 1001"),
    Setting("imageFlavor", "apache", "`apache` (the official apache/kafka image, KAFKA_* "
            "variables) or `bitnami` (a Bitnami-layout image you name in `image`, "
            "KAFKA_CFG_* variables)"),
    Setting("image", "", f"broker image; empty: {versions.APACHE_IMAGE} (apache); the "
            "bitnami flavour has no default (Bitnami publishes no free Kafka "
            f"{versions.KAFKA_VERSION} image): set it to your subscription's or mirror's tag"),
    Setting("imageDigest", "", "optional `sha256:...` digest appended to every image "
            "reference of the broker"),
    Setting("requireDigests", False, "policy: refuse any image without a digest"),
    Setting("storageSize", "50Gi", "persistent volume per broker; raising it on a running stack "
            "expands the volumes in place (their StorageClass must allow volume expansion), "
            "lowering it is refused: volumes cannot shrink"),
    Setting("storageClass", "", "storage class of the broker volumes; empty: the default"),
    Setting("brokerAntiAffinity", "required", "at 3+ brokers, one broker per node: `required` "
            "(a node failure costs one broker) or `preferred` (a one-node test cluster)"),
    Setting("rackLabel", RACK_LABELS[0], "the node label each broker takes as its `broker.rack`, "
            "so Kafka and the reconciler put a partition's replicas in different zones: "
            "`topology.kubernetes.io/zone`, `topology.kubernetes.io/region`, or empty for no "
            "racks. Needs Kubernetes 1.35+, whose API server copies these node labels onto pods; "
            "a broker whose pod lacks the label starts without a rack and logs why"),
    Setting("cpuRequest", "500m", "broker CPU request (Pulumi.prod.yaml: 2)"),
    Setting("memoryRequest", "1Gi", "broker memory request, at least the heap (prod: 8Gi)"),
    Setting("cpuLimit", "1000m", "broker CPU limit (prod: 4)"),
    Setting("memoryLimit", "2Gi", "broker memory limit, the heap plus at least 768 MiB "
            "(prod: 8Gi)"),
    Setting("heapOpts", "-Xms1g -Xmx1g", "broker JVM heap (KAFKA_HEAP_OPTS), with an -Xmx "
            "that fits memoryRequest and memoryLimit (checked; prod: -Xms4g -Xmx4g)"),
    Setting("javaOptions", "", "extra options of the stack's JVMs: the brokers' (KAFKA_OPTS, "
            "so the Kafka tools run in their containers too) and the Spark jobs' drivers and "
            "executors (`submit` launcher); empty: the JVMs' defaults. The local Kubernetes "
            "stacks set the local JIT, C1 only (hanzo_stream/artifacts/jvm.py)"),
    Setting("brokerConfigOverrides", {}, "extra broker properties applied last, e.g. "
            "`{\"num.io.threads\": \"16\"}`"),
    Setting("tlsMode", "self-signed", "`self-signed` (CA and certificates generated by the "
            "program, kept as Pulumi secrets) or `cert-manager` (Certificate resources)"),
    Setting("certManagerIssuer", "", "issuer name, required when tlsMode is cert-manager"),
    Setting("certManagerIssuerKind", "ClusterIssuer", "`Issuer` or `ClusterIssuer`"),
    Setting("tlsExtraDnsNames", [], "extra DNS names on the broker certificate"),
    Setting("caGeneration", 1, "the generation of the program's CA (`self-signed`) that issues "
            "the brokers' certificate; a CA rollover raises it by one "
            "(docs/runbooks/ca-rollover.md)"),
    Setting("caTrust", [], "the CA generations brokers and clients trust (the `ca.crt` bundle); "
            "empty: `caGeneration` alone. Two during a rollover, e.g. `[1, 2]`"),
    Setting("protect", True, "protect the quorum's recorded founding size and the CA from "
            "`pulumi destroy` (the cluster id is the namespace's, which destroy keeps)"),
    Setting("reconcilerImage", versions.RECONCILER_IMAGE,
            "image with the hanzo-stream CLI (see docs/images.md)"),
    Setting("reconcilerArgs", ["apply"], "arguments of `hanzo-stream` in the reconciler Job"),
    Setting("jmxAgentUrl", "", "where to download the JMX exporter javaagent (e.g. a mirror of "
            "Maven Central) instead of copying it from the init image; empty: the brokers' init "
            f"container copies `{JMX_AGENT_IN_IMAGE}` from the reconciler image, no network "
            f"(docs/images.md). A URL needs an `initImage` with curl, e.g. `{CURL_IMAGE}`"),
    Setting("jmxAgentSha256", JMX_AGENT_SHA256, "expected SHA-256 of the javaagent jar, "
            "checked before the broker starts"),
    Setting("initImage", "", "image of the init container that provides the javaagent; "
            "empty: `reconcilerImage`"),
    Setting("prometheusOperator", True, "create PodMonitor, ServiceMonitor and "
            "PrometheusRule (needs the Prometheus operator's CRDs)"),
    Setting("prometheusLabels", {"release": "kube-prometheus-stack"}, "labels the "
            "Prometheus operator selects monitors and rules by"),
    Setting("runbookBaseUrl", RUNBOOK_BASE_URL, "where an alert's runbook link opens: this "
            "URL + the runbook's path in the repository (docs/runbooks/...), e.g. your own "
            "docs site or fork"),
    Setting("grafanaDashboards", True, "dashboards as ConfigMaps labelled "
            "grafana_dashboard=1 in the monitoring namespace"),
    Setting("kafkaExporter", "hanzo-stream", "consumer-lag exporter: `hanzo-stream` (the "
            "platform's own, kafka_exporter's metric names, from the reconciler image) or "
            "`danielqsj` (danielqsj/kafka_exporter from kafkaExporterImage)"),
    Setting("kafkaExporterImage", versions.KAFKA_EXPORTER_IMAGE,
            "danielqsj/kafka_exporter's image, when kafkaExporter is `danielqsj`"),
    Setting("exporterPrincipal", platform.LAG_EXPORTER, "principal the lag exporter logs "
            "in as (DESCRIBE on topics and groups: hanzo_stream/registry/platform.py)"),
    Setting("schemaRegistry", True, "deploy the schema registry"),
    Setting("schemaRegistryImage", versions.SCHEMA_REGISTRY_IMAGE,
            "Confluent-compatible schema registry image"),
    Setting("schemaRegistryPrincipal", platform.SCHEMA_REGISTRY, "principal the schema "
            "registry logs in as (its topic and group only)"),
    Setting("schemaRegistryCompatibility", "BACKWARD", "default compatibility level"),
    Setting("schemaRegistryReplicas", 1, "schema registry pods"),
    Setting("spark", True, "run the consumer-group Spark jobs (launched as sparkLauncher says)"),
    Setting("sparkLauncher", "submit", "`submit`: each job's driver is a Deployment running "
            "spark-submit against the API server (nothing to install); `operator`: a Kubeflow "
            "Spark operator SparkApplication per job (needs the operator)"),
    Setting("sparkMaxExecutors", 0, "cap on each job's executors; 0: the spec's (the group's "
            "expected consumers)"),
    Setting("sparkDriverMemory", "1g", "Spark driver heap (`submit` launcher)"),
    Setting("sparkDriverCpuRequest", "500m", "Spark driver CPU request (`submit` launcher)"),
    Setting("sparkExecutorMemory", "2g", "Spark executor heap (`submit` launcher)"),
    Setting("sparkExecutorCpuRequest", "1", "Spark executor CPU request (`submit` launcher)"),
    Setting("sparkImage", versions.SPARK_IMAGE, "PySpark image with "
            "spark/ and the Kafka connector jars (see docs/images.md)"),
    Setting("sparkVersion", versions.SPARK_VERSION, "Spark version of sparkImage"),
    Setting("sparkServiceAccount", "spark", "service account of the Spark drivers"),
    Setting("checkpointBase", "s3a://hanzo-stream/checkpoints", "checkpoints live at "
            "<checkpointBase>/<job>"),
    Setting("s3Endpoint", "", "S3-compatible endpoint for s3a:// paths (e.g. Hanzo Storage)"),
    Setting("auditArchivePath", "", "audit-archive's Parquet location, e.g. "
            "s3a://hanzo-audit/audit_log; empty: the spec's"),
    Setting("s3AccessKey", "", "S3 access key (set with --secret)", secret=True),
    Setting("s3SecretKey", "", "S3 secret key (set with --secret)", secret=True),
    Setting("clickhouseUrl", "", "ClickHouse HTTP URL for analytics-ingest"),
    Setting("clickhousePassword", "", "ClickHouse password (set with --secret)", secret=True),
    Setting("postgresDsn", "", "PostgreSQL DSN billing-agg and rpc-billing also upsert their "
            "hourly records into (the standard's phase 1; set with --secret); unset: that copy "
            "is off", secret=True),
    Setting("deadLetterMonitor", True, "run the dead-letter-monitor consumer group: dead letters "
            "counted by source topic, stage and error class for the dead-letter alerts"),
    Setting("alertmanager", True, "run Alertmanager routing every alert to PagerDuty; its config "
            "and routing key come from a Secret (needs pagerdutyRoutingKey)"),
    Setting("alertmanagerImage", versions.ALERTMANAGER_IMAGE, "Alertmanager image (the release "
            "the local platform runs)"),
    Setting("pagerdutyUrl", "https://events.pagerduty.com/v2/enqueue", "PagerDuty Events API v2 "
            "endpoint"),
    Setting("pagerdutyRoutingKey", "", "PagerDuty Events API v2 integration key (set with "
            "--secret)", secret=True),
)

_BY_KEY = {s.key: s for s in SETTINGS}


class SettingsError(ValueError):
    """A stack file names an unknown key or an invalid value."""


@dataclass(frozen=True)
class StackSettings:
    """The parsed settings of one stack. Secret settings stay outside (see `secret_keys`)."""

    values: Mapping[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def prod(self) -> bool:
        return self.values["environment"] == "prod"

    @property
    def ca_trust(self) -> list[int]:
        """The trusted CA generations, oldest first (`caTrust`, or `caGeneration` alone)."""
        return sorted(set(self.values["caTrust"])) or [self.values["caGeneration"]]

    @property
    def broker_image(self) -> str:
        image = self.values["image"] or versions.APACHE_IMAGE  # _validate: bitnami names one
        digest = self.values["imageDigest"]
        return f"{image}@{digest}" if digest else image


def _coerce(s: Setting, raw: Any) -> Any:
    """Pulumi hands every value over as a string (objects as JSON); turn it into the type."""
    want = type(s.default)
    if isinstance(raw, str) and want is not str:
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise SettingsError(f"{PROJECT}:{s.key}: {raw!r} is not a valid {want.__name__}") from e
    if want is int and isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if not isinstance(raw, want) or (want is int and isinstance(raw, bool)):
        raise SettingsError(f"{PROJECT}:{s.key}: expected {want.__name__}, got {raw!r}")
    return raw


def parse(raw: Mapping[str, Any]) -> StackSettings:
    """Settings from raw config values (keys with or without the project prefix)."""
    values = {s.key: s.default for s in SETTINGS if not s.secret}
    for key, value in raw.items():
        short = key.split(":", 1)[1] if ":" in key else key
        if short not in _BY_KEY:
            raise SettingsError(f"unknown setting {key!r}; known: {', '.join(sorted(_BY_KEY))}")
        if _BY_KEY[short].secret:
            continue  # read as a Pulumi secret by the program, never parsed into plain values
        values[short] = _coerce(_BY_KEY[short], value)
    _validate(values)
    return StackSettings(values)


_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
          "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"\+?(\d+(?:\.\d*)?|\.\d+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)|[eE]([+-]?\d+))?")


def quantity_bytes(quantity: str) -> Decimal:
    """A Kubernetes storage quantity ("50Gi", "100G", "1.5Ti", "5e10") in bytes, so that sizes
    written differently compare right."""
    m = _QUANTITY.fullmatch(str(quantity).strip())
    if not m:
        raise SettingsError(f"{quantity!r} is not a Kubernetes storage quantity such as 50Gi")
    number, unit, exponent = m.groups()
    scale = Decimal(10) ** int(exponent) if exponent else Decimal(_UNITS[unit or ""])
    return Decimal(number) * scale


def _validate(v: dict[str, Any]) -> None:
    if v["environment"] not in ("dev", "prod"):
        raise SettingsError("environment must be dev or prod")
    if v["imageFlavor"] not in ("bitnami", "apache"):
        raise SettingsError("imageFlavor must be apache or bitnami")
    if v["imageFlavor"] == "bitnami" and not v["image"]:
        raise SettingsError(
            f"{PROJECT}:imageFlavor is bitnami but {PROJECT}:image is empty: Bitnami publishes no "
            f"free Kafka {versions.KAFKA_VERSION} image (its free tags froze in docker.io/"
            "bitnamilegacy in 2025). Set `image` to the Bitnami-layout tag your subscription or "
            f"mirror serves, e.g. `pulumi config set image registry.example.com/bitnami/kafka:"
            f"{versions.KAFKA_VERSION}`, or drop imageFlavor to run {versions.APACHE_IMAGE}; "
            "see docs/images.md")
    if v["sparkLauncher"] not in ("submit", "operator"):
        raise SettingsError(f"{PROJECT}:sparkLauncher must be submit or operator")
    if v["brokerAntiAffinity"] not in ("required", "preferred"):
        raise SettingsError(f"{PROJECT}:brokerAntiAffinity must be required or preferred")
    if v["rackLabel"] not in RACK_LABELS:
        raise SettingsError(
            f"{PROJECT}:rackLabel {v['rackLabel']!r} is not a label Kubernetes copies from a node "
            "onto its pods: use topology.kubernetes.io/zone (the default), "
            "topology.kubernetes.io/region, or \"\" for brokers without racks")
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", v["runbookBaseUrl"]):
        raise SettingsError(
            f"{PROJECT}:runbookBaseUrl {v['runbookBaseUrl']!r} is not an http(s) URL: a pager opens "
            f"it in a browser. Set it to where docs/ is published, e.g. {RUNBOOK_BASE_URL}")
    if v["kafkaExporter"] not in ("hanzo-stream", "danielqsj"):
        raise SettingsError(f"{PROJECT}:kafkaExporter must be hanzo-stream or danielqsj")
    if v["tlsMode"] not in ("self-signed", "cert-manager"):
        raise SettingsError("tlsMode must be self-signed or cert-manager")
    if v["tlsMode"] == "cert-manager" and not v["certManagerIssuer"]:
        raise SettingsError("tlsMode cert-manager needs certManagerIssuer")
    _validate_ca(v)
    if v["brokers"] < 1 or v["brokers"] % 2 == 0:
        n = v["brokers"]
        raise SettingsError(
            f"{PROJECT}:brokers is {n} but must be odd (1, 3, 5, ...): every broker is a "
            f"controller quorum voter, and {n} voters survive no more failures than "
            f"{max(n - 1, 1)} (a majority of {n} is {n // 2 + 1}); use {max(n - 1, 1)} or {n + 1}")
    _validate_initial_controllers(v["initialControllers"], v["brokers"])
    if quantity_bytes(v["storageSize"]) <= 0:
        raise SettingsError(f"{PROJECT}:storageSize must be larger than 0")
    if v["jmxAgentUrl"] and not v["initImage"]:
        raise SettingsError(
            f"{PROJECT}:jmxAgentUrl is set, so the brokers' init container downloads the JMX agent "
            f"with curl, which the reconciler image lacks: set {PROJECT}:initImage to an image with "
            f"curl and sha256sum (e.g. `pulumi config set initImage {CURL_IMAGE}`), or `pulumi "
            "config rm jmxAgentUrl` to copy the agent from the reconciler image (docs/images.md)")
    if v["clusterId"] and not re.fullmatch(r"[A-Za-z0-9_-]{22}", v["clusterId"]):
        raise SettingsError(f"{PROJECT}:clusterId {v['clusterId']!r} is not a KRaft cluster id "
                            "(22 characters of base64url, as `kafka-storage.sh random-uuid` prints "
                            "and meta.properties holds)")
    _validate_names(v)
    _validate_takeover(v)
    if v["imageDigest"] and not v["imageDigest"].startswith("sha256:"):
        raise SettingsError("imageDigest must look like sha256:<64 hex>")
    _validate_heap(v)


def _validate_ca(v: dict[str, Any]) -> None:
    g, trust = v["caGeneration"], v["caTrust"]
    if v["tlsMode"] == "cert-manager" and (g != 1 or trust):
        raise SettingsError(f"{PROJECT}:caGeneration and caTrust are for tlsMode self-signed: with "
                            "cert-manager the issuer owns the CA; roll it over there and `pulumi "
                            "config rm` both")
    if g < 1:
        raise SettingsError(f"{PROJECT}:caGeneration is {g}: CA generations count from 1")
    if any(not isinstance(t, int) or isinstance(t, bool) or t < 1 for t in trust):
        raise SettingsError(f"{PROJECT}:caTrust {trust!r} must list CA generations (numbers), "
                            f"e.g. [{g}, {g + 1}]")
    if trust and g not in trust:
        raise SettingsError(f"{PROJECT}:caTrust {trust} leaves out caGeneration {g}, the CA that "
                            "issues the brokers' certificate: nothing would trust the brokers. "
                            f"Add it (e.g. `pulumi config set caTrust '[{g - 1}, {g}]'`)")
    if not set(trust) <= {g - 1, g, g + 1} or len(set(trust)) > 2:
        raise SettingsError(f"{PROJECT}:caTrust {trust} with caGeneration {g}: a rollover trusts "
                            f"two neighbouring generations at most, e.g. [{g}, {g + 1}] before "
                            f"caGeneration moves to {g + 1}, [{g - 1}, {g}] right after "
                            "(docs/runbooks/ca-rollover.md)")


_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def _validate_names(v: dict[str, Any]) -> None:
    # A pod name is the StatefulSet's plus "-<ordinal>", and its controller-revision-hash label
    # adds 11 characters more: 52 keeps both under Kubernetes' 63.
    for key, most in (("statefulSetName", 52), ("headlessServiceName", 63),
                      ("clientServiceName", 63)):
        if not _DNS_LABEL.fullmatch(v[key]) or len(v[key]) > most:
            raise SettingsError(f"{PROJECT}:{key} {v[key]!r} is not a Kubernetes name: lower-case "
                                f"letters, digits and '-', starting with a letter, at most {most}")
    if v["headlessServiceName"] == v["clientServiceName"]:
        raise SettingsError(
            f"{PROJECT}:headlessServiceName and clientServiceName are both "
            f"{v['clientServiceName']!r}: one Service cannot be headless (each broker's own "
            "address) and a client Service at once; give the client Service another name")


def _validate_takeover(v: dict[str, Any]) -> None:
    port = v["legacyPlaintextPort"]
    if port and not (1024 <= port <= 65535 and port not in PORTS.values()):
        raise SettingsError(
            f"{PROJECT}:legacyPlaintextPort {port} must be 0 (none) or a free port from 1024 "
            f"to 65535 other than the broker's own {', '.join(map(str, PORTS.values()))}; "
            "the standard's clients dial 9092")
    if v["brokerUid"] < 0:
        raise SettingsError(f"{PROJECT}:brokerUid must be 0 (the image's uid) or a uid above 0")
    if not v["takeoverSwitch"]:
        return
    if not v["clusterId"]:
        raise SettingsError(
            f"{PROJECT}:takeoverSwitch is true but clusterId is empty: set it to the running "
            "cluster's id, `cluster.id` in its meta.properties (`kubectl -n hanzo exec "
            "insights-kafka-0 -- cat /bitnami/kafka/data/meta.properties`); docs/takeover.md")
    if v["brokers"] != 1:
        raise SettingsError(
            f"{PROJECT}:takeoverSwitch takes over a one-broker cluster (the standard's) and "
            f"brokers is {v['brokers']}: switch with brokers 1, then grow after the switch")


#: What a broker's JVM needs beside its heap (metaspace, thread stacks, network and direct
#: buffers, the JMX agent), with a margin: the least memoryLimit leaves above -Xmx.
OFF_HEAP_BYTES = 768 * 2**20
_XMX = re.compile(r"-Xmx(\d+)([kKmMgG]?)")


def heap_bytes(heap_opts: str) -> int | None:
    """The -Xmx of KAFKA_HEAP_OPTS in bytes (the last one wins, as in the JVM)."""
    found = _XMX.findall(heap_opts)
    if not found:
        return None
    number, unit = found[-1]
    return int(number) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[unit.lower()]


def _validate_heap(v: dict[str, Any]) -> None:
    """A heap the pod's memory cannot hold is an OOM kill under load, not at start."""
    heap = heap_bytes(v["heapOpts"])
    if heap is None:
        raise SettingsError(f"{PROJECT}:heapOpts {v['heapOpts']!r} sets no -Xmx: the JVM would "
                            "size its heap from the container's limit; set e.g. -Xms4g -Xmx4g")
    gib = f"{heap / 2**30:g} GiB"
    if heap > quantity_bytes(v["memoryRequest"]):
        raise SettingsError(
            f"{PROJECT}:heapOpts asks for a {gib} heap but memoryRequest is {v['memoryRequest']}: "
            "the scheduler could place the broker where its heap does not fit; raise "
            "memoryRequest to at least the heap (production: heap about half of the memory, the "
            "rest is page cache)")
    if heap + OFF_HEAP_BYTES > quantity_bytes(v["memoryLimit"]):
        raise SettingsError(
            f"{PROJECT}:heapOpts asks for a {gib} heap but memoryLimit is {v['memoryLimit']}, "
            f"which leaves less than {OFF_HEAP_BYTES >> 20} MiB for the JVM beside its heap: "
            "the broker would be OOM-killed under load; raise memoryLimit or lower -Xmx")


def _validate_initial_controllers(n: int, brokers: int) -> None:
    """0 defers to the recorded founding size; anything else must be a quorum that could have
    founded this stack: at least one pod, no more pods than the stack has, and never two."""
    if n == 0:
        return
    fix = ("set it to the number of brokers the stack was created with (e.g. `pulumi config set "
           "initialControllers 1` for a stack created with one broker), or `pulumi config rm "
           "initialControllers` to use the size the program recorded")
    if n < 0 or n > brokers:
        raise SettingsError(f"{PROJECT}:initialControllers is {n} but must be between 1 and "
                            f"brokers ({brokers}): {fix}")
    if n == 2:
        raise SettingsError(f"{PROJECT}:initialControllers cannot be 2 (a 2-voter quorum "
                            f"survives no failure, so no stack is founded with two): {fix}")


def secret_keys() -> list[str]:
    return [s.key for s in SETTINGS if s.secret]


def from_pulumi() -> StackSettings:
    """Read the stack's configuration; unknown `hanzo-stream:` keys are refused."""
    from pulumi.runtime import config as runtime_config

    every = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    mine = {k: v for k, v in every.items() if k.startswith(PROJECT + ":")}
    return parse(mine)
