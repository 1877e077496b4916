"""One Spark driver per consumer-group job, submitted to the cluster's API server.

Two launchers (`sparkLauncher`), both running the same job code with executors as pods:

- `submit` (the default, needs nothing installed): a Deployment per job whose pod runs
  `spark-submit --master k8s://... --deploy-mode client`: the pod is the driver, and it asks
  the API server for its executors, which it owns (they go when it goes). These are
  streaming queries that must run forever and come back after a crash: the Deployment
  restarts the driver for ever, `Recreate` keeps two drivers off one checkpoint, and
  `kubectl get deploy` shows each job. Executors get their environment, CA and security
  context from a pod template (a ConfigMap the driver mounts). A job whose sink lives in
  the driver's own files (analytics-ingest's embedded chDB, without `clickhouseUrl`) keeps
  them on a claim of its own, so they survive the driver as the checkpoint does.
- `operator`: a Kubeflow Spark operator SparkApplication per job (restart policy with
  back-off, the operator re-submits a lost driver). Needs the operator and its CRDs.

Jobs come from consumers/*.yaml (one spec per consumer group) when the directory
exists; otherwise from the registry's Spark groups. Each runs as its group's principal
(credentials from that principal's Secret), with executors = the group's expected
consumers, a checkpoint under `checkpointBase`, and the Kafka connector jars baked into
the image (no dependency resolution at start-up, see docs/images.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hanzo_stream.artifacts import jars
from hanzo_stream.artifacts import versions as v
from hanzo_stream.jobs.postgres import DSN_ENV
from hanzo_stream.registry import Registry

from . import security_context
from .monitoring import CONSUMER_METRICS_PORT
from .reconciler import connection_env
from .settings import StackSettings
from .tls import CA_MOUNT, ca_volume
from .topology import PART_OF, Topology, labels

DEFAULT_JOBS = ("analytics-ingest", "billing-agg", "audit-archive")
APP_HOME = "/opt/hanzo-stream"
SERVICE_LABELS = {"app.kubernetes.io/component": "spark", "app.kubernetes.io/part-of": PART_OF}
S3_SECRET = "hanzo-stream-s3"
JOB_HOME = "/tmp/hanzo-stream"  # HANZO_STREAM_HOME of the job's pods
STATE_SIZE = "1Gi"  # a driver's own files (an embedded chDB): its state claim
CLICKHOUSE_SECRET = "hanzo-stream-clickhouse"
POSTGRES_SECRET = "hanzo-stream-postgres"  # key `dsn`, from the postgresDsn secret setting

def connector_jars(spark_version: str = v.SPARK_VERSION, scala: str = v.SPARK_SCALA) -> list[str]:
    """Spark's Kafka connector and what it needs at run time, plus s3a for checkpoints and
    the archive (hanzo_stream/artifacts/jars.py): the files baked into the image (docs/images.md)."""
    return [jars.jar_name(c) for c in [*jars.spark_connector(spark_version, scala), *jars.SPARK_S3A]]


@dataclass(frozen=True)
class SparkJob:
    name: str  # the job name (Kubernetes name of the SparkApplication)
    group: str  # consumer group from the registry
    principal: str
    topics: tuple[str, ...]
    entry: str  # python file relative to the repository root
    executors: int
    checkpoint: str | None = None
    s3_paths: tuple[str, ...] = ()  # the spec's sink paths on S3
    embedded: bool = False  # a sink in the driver's own files (chDB without a `url`)
    postgres_env: str | None = None  # the variable a `postgres` sink reads its DSN from


def discover(root: Path, registry: Registry) -> list[SparkJob]:
    """Jobs from consumers/<group>.yaml (`group`, `job`: entry file, `checkpoint`, ...);
    without that directory, the registry's Spark groups with conventional entry points."""
    specs: list[dict] = []
    d = root / "consumers"
    if d.is_dir():
        for p in sorted(d.glob("*.yaml")):
            doc = yaml.safe_load(p.read_text())
            if isinstance(doc, dict):
                specs.append({"_file": p.stem, **doc})
    if not specs:
        specs = [{"_file": g} for g in DEFAULT_JOBS]
    groups = {g.name: g for g in registry.groups}
    jobs = []
    for spec in specs:
        g = groups.get(spec.get("group") or spec["_file"])
        if g is None:
            continue  # not a consumer group of this registry: nothing to run
        if spec.get("runtime", "spark") != "spark":
            continue  # a plain consumer (llm-metrics): a Deployment, infra/monitoring.py
        name = spec["_file"]
        entry = spec.get("job")
        if not isinstance(entry, str) or not entry.endswith(".py"):
            entry = f"spark/{name.replace('-', '_')}.py"
        jobs.append(SparkJob(
            name=name, group=g.name, principal=g.principal, topics=g.topics, entry=entry,
            executors=int(spec.get("executors") or g.consumers),
            checkpoint=spec.get("checkpoint") if isinstance(spec.get("checkpoint"), str) else None,
            s3_paths=tuple(str(k.get("path")) for k in (spec.get("sinks") or {}).values()
                           if isinstance(k, dict) and str(k.get("path", "")).startswith("s3a://")),
            embedded=any(isinstance(k, dict) and k.get("type") == "clickhouse" and not k.get("url")
                         for k in (spec.get("sinks") or {}).values()),
            postgres_env=next((str(k.get("dsn_env") or DSN_ENV) for k in (spec.get("sinks") or {}).values()
                               if isinstance(k, dict) and k.get("type") == "postgres"), None),
        ))
    return jobs


def checkpoint_of(s: StackSettings, job: SparkJob) -> str:
    """A spec's URI checkpoint (s3a://, hdfs://) is kept; a relative one (a local path on a
    laptop) becomes <checkpointBase>/<job>: pod disks do not survive a restart."""
    cp = job.checkpoint
    if cp and "://" in cp:
        return cp
    return f"{s.checkpointBase.rstrip('/')}/{job.name}"


def _secret_env(name: str, secret: str, key: str) -> dict:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key,
                                                         "optional": True}}}


def uses_s3(s: StackSettings, job: SparkJob) -> bool:
    """Its checkpoint or one of its outputs is an s3a:// path."""
    paths = [checkpoint_of(s, job), *job.s3_paths]
    if job.name == "audit-archive" and s.auditArchivePath:
        paths.append(s.auditArchivePath)
    return any(p.startswith("s3a://") for p in paths)


def job_env(s: StackSettings, top: Topology, job: SparkJob) -> list[dict]:
    env = connection_env(top, job.principal)
    env += [
        {"name": "HANZO_STREAM_JOB", "value": job.name},
        {"name": "HANZO_STREAM_GROUP", "value": job.group},
        {"name": "HANZO_STREAM_TOPICS", "value": ",".join(job.topics)},
        {"name": "HANZO_STREAM_CHECKPOINT", "value": checkpoint_of(s, job)},
        {"name": "HANZO_STREAM_HOME", "value": JOB_HOME},
    ]
    if uses_s3(s, job):  # endpoint and keys from the S3 Secret, never a literal (jobs/s3.py)
        env += [_secret_env("HANZO_STREAM_S3_ENDPOINT", S3_SECRET, "endpoint"),
                _secret_env("AWS_ACCESS_KEY_ID", S3_SECRET, "access-key"),
                _secret_env("AWS_SECRET_ACCESS_KEY", S3_SECRET, "secret-key")]
    env.append(_secret_env("CLICKHOUSE_PASSWORD", CLICKHOUSE_SECRET, "password"))
    if job.postgres_env:  # optional: without the Secret the variable is unset and the sink off
        env.append(_secret_env(job.postgres_env, POSTGRES_SECRET, "dsn"))
    if s.clickhouseUrl:
        env.append({"name": "HANZO_STREAM_CLICKHOUSE_URL", "value": s.clickhouseUrl})
    if s.auditArchivePath:
        env.append({"name": "HANZO_STREAM_ARCHIVE_PATH", "value": s.auditArchivePath})
    return env


def application(s: StackSettings, top: Topology, job: SparkJob) -> dict:
    pod_labels = {**SERVICE_LABELS, "hanzo.ai/spark-app": job.name}
    security = security_context.container(writable_root=True,
                                          seccompProfile={"type": "RuntimeDefault"})
    common = {
        "labels": pod_labels,
        "env": job_env(s, top, job),
        "volumeMounts": [{"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True}],
        "securityContext": security,
    }
    # s3a's endpoint and path style are set by the job from its spec and HANZO_STREAM_S3_ENDPOINT
    # (hanzo_stream/jobs/spark.py s3a_conf); its keys come from the environment or the pod's
    # identity through the SDK's default chain.
    conf = {"spark.sql.streaming.stopGracefullyOnShutdown": "true"}
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": job.name, "namespace": top.namespace,
                     "labels": {**labels("spark", job.name), "hanzo.ai/consumer-group": job.group}},
        "spec": {
            "type": "Python", "pythonVersion": "3", "mode": "cluster",
            "image": s.sparkImage, "imagePullPolicy": "IfNotPresent",
            "mainApplicationFile": f"local://{APP_HOME}/{job.entry}",
            "sparkVersion": s.sparkVersion,
            "restartPolicy": {"type": "Always", "onFailureRetryInterval": 30,
                              "onSubmissionFailureRetryInterval": 60},
            "deps": {"jars": [f"local://{APP_HOME}/jars/{j}"
                              for j in connector_jars(s.sparkVersion)]},
            "sparkConf": conf,
            "driver": {**common, "env": [*common["env"], METRICS_ENV], "annotations": SCRAPE,
                       "cores": 1, "memory": "1g", "serviceAccount": s.sparkServiceAccount},
            "executor": {**common, "instances": job.executors, "cores": 1, "memory": "2g"},
            "volumes": [ca_volume()],
        },
    }


DRIVER_PORT, BLOCK_MANAGER_PORT = 7078, 7079
# The driver's /metrics (hanzo_stream/jobs/progress_metrics.py: each query's batch time, rates,
# state), on the port the plain consumers serve theirs; scraped by annotation, as theirs.
METRICS_PORT = CONSUMER_METRICS_PORT
METRICS_ENV = {"name": "HANZO_STREAM_METRICS_LISTEN", "value": f"0.0.0.0:{METRICS_PORT}"}
SCRAPE = {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT),
          "prometheus.io/path": "/metrics"}


def metrics_policy_target() -> dict:
    """Only the monitoring namespace reaches the drivers' /metrics (infra/network.py)."""
    return {"name": "spark-driver-metrics", "selector": SERVICE_LABELS, "port": METRICS_PORT}
API_TIMEOUT_MS = 60_000
TEMPLATE_MOUNT = f"{APP_HOME}/spark-template"
EXECUTOR_CONTAINER = "executor"
RESTRICTED = security_context.container(writable_root=True)
POD_SECURITY = security_context.pod(10001)


def keeps_state(s: StackSettings, job: SparkJob) -> bool:
    """Its sink lives in the driver's files (no `clickhouseUrl`): they must outlive the pod, as
    the checkpoint on shared storage does, or a restarted driver resumes after rows it lost."""
    return job.embedded and not s.clickhouseUrl


def state_name(job: SparkJob) -> str:
    return f"{job.name}-state"


def state_claim(s: StackSettings, top: Topology, job: SparkJob) -> dict:
    """The driver's own volume, at HANZO_STREAM_HOME (one driver at a time: `Recreate`)."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": STATE_SIZE}}}
    if s.storageClass:
        spec["storageClassName"] = s.storageClass
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": state_name(job), "namespace": top.namespace,
                         "labels": labels("spark", job.name)},
            "spec": spec}


def executors(s: StackSettings, job: SparkJob) -> int:
    """The spec's executors (the group's expected consumers), unless the stack caps them."""
    return min(job.executors, s.sparkMaxExecutors) if s.sparkMaxExecutors else job.executors


def executor_template(s: StackSettings, top: Topology, job: SparkJob) -> dict:
    """The executors' pod template: Spark fills in image, command and resources."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"labels": {**SERVICE_LABELS, "hanzo.ai/spark-app": job.name,
                                "hanzo.ai/spark-role": "executor"}},
        "spec": {
            "securityContext": POD_SECURITY,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [{
                "name": EXECUTOR_CONTAINER,
                "env": [*job_env(s, top, job), {"name": "PYSPARK_PYTHON", "value": "python3"}],
                "volumeMounts": [{"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True}],
                "securityContext": RESTRICTED,
            }],
            "volumes": [ca_volume()],
        },
    }
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{job.name}-executor-template", "namespace": top.namespace,
                         "labels": labels("spark", job.name)},
            "data": {"executor.yaml": yaml.safe_dump(pod, sort_keys=False)}}


def submit_args(s: StackSettings, top: Topology, job: SparkJob) -> list[str]:
    """spark-submit in client mode: this pod is the driver; $(POD_IP) and $(POD_NAME) are
    the pod's own (Kubernetes expands them from the env), so executors dial it back and
    are owned by it."""
    jars = f"{APP_HOME}/jars/*"
    conf = {
        "spark.driver.host": "$(POD_IP)", "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": str(DRIVER_PORT), "spark.blockManager.port": str(BLOCK_MANAGER_PORT),
        "spark.driver.extraClassPath": jars, "spark.executor.extraClassPath": jars,
        "spark.kubernetes.namespace": top.namespace,
        "spark.kubernetes.driver.pod.name": "$(POD_NAME)",
        "spark.kubernetes.container.image": s.sparkImage,
        "spark.kubernetes.container.image.pullPolicy": "IfNotPresent",
        # The driver's API client: 10 s by default, which a busy node's driver JVM missed at
        # start (its event loop starved) and crash-looped; seen on the local 2-core node.
        "spark.kubernetes.driver.connectionTimeout": str(API_TIMEOUT_MS),
        "spark.kubernetes.driver.requestTimeout": str(API_TIMEOUT_MS),
        "spark.kubernetes.executor.podTemplateFile": f"{TEMPLATE_MOUNT}/executor.yaml",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        # The driver pod's own name: a replacement driver starts while the old one's executors
        # (<prefix>-exec-1, ...) are still being deleted, and a job-wide prefix collides.
        "spark.kubernetes.executor.podNamePrefix": "$(POD_NAME)",
        "spark.executor.instances": str(executors(s, job)),
        "spark.executor.cores": "1",
        "spark.executor.memory": s.sparkExecutorMemory,
        "spark.kubernetes.executor.request.cores": s.sparkExecutorCpuRequest,
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    }
    if s.javaOptions:
        conf["spark.driver.extraJavaOptions"] = conf["spark.executor.extraJavaOptions"] = s.javaOptions
    args = ["--master", f"k8s://https://kubernetes.default.svc.{top.cluster_domain}:443",
            "--deploy-mode", "client", "--name", job.name,
            "--driver-memory", s.sparkDriverMemory]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return [*args, f"{APP_HOME}/{job.entry}"]


def driver(s: StackSettings, top: Topology, job: SparkJob) -> dict:
    """The job's driver: a one-pod Deployment running spark-submit (see the module docstring)."""
    pod_labels = {**SERVICE_LABELS, "hanzo.ai/spark-app": job.name, "hanzo.ai/spark-role": "driver"}
    state = [{"name": "state", "mountPath": JOB_HOME}] if keeps_state(s, job) else []
    env = [*job_env(s, top, job), {"name": "PYSPARK_PYTHON", "value": "python3"}, METRICS_ENV,
           {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": job.name, "namespace": top.namespace,
                     "labels": {**labels("spark", job.name), "hanzo.ai/consumer-group": job.group}},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one driver per checkpoint, ever
            "selector": {"matchLabels": {"hanzo.ai/spark-app": job.name,
                                         "hanzo.ai/spark-role": "driver"}},
            "template": {"metadata": {"labels": pod_labels, "annotations": SCRAPE}, "spec": {
                "serviceAccountName": s.sparkServiceAccount,
                "automountServiceAccountToken": True,  # the driver creates its executors
                "enableServiceLinks": False,
                "securityContext": POD_SECURITY,
                "terminationGracePeriodSeconds": 60,  # stopGracefullyOnShutdown: finish the batch
                "containers": [{
                    "name": "driver",
                    "image": s.sparkImage,
                    "command": ["spark-submit"],
                    "args": submit_args(s, top, job),
                    "env": env,
                    "ports": [{"name": "driver", "containerPort": DRIVER_PORT},
                              {"name": "block-manager", "containerPort": BLOCK_MANAGER_PORT},
                              {"name": "metrics", "containerPort": METRICS_PORT}],
                    "resources": {"requests": {"cpu": s.sparkDriverCpuRequest,
                                               "memory": f"{jvm_mib(s.sparkDriverMemory)}Mi"},
                                  "limits": {"memory": f"{with_overhead(s.sparkDriverMemory)}Mi"}},
                    "securityContext": RESTRICTED,
                    "volumeMounts": [
                        {"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True},
                        {"name": "executor-template", "mountPath": TEMPLATE_MOUNT, "readOnly": True},
                        *state],
                }],
                "volumes": [ca_volume(), {"name": "executor-template", "configMap": {
                    "name": f"{job.name}-executor-template"}},
                    *[{"name": v["name"], "persistentVolumeClaim": {"claimName": state_name(job)}}
                      for v in state]],
            }},
        },
    }


def jvm_mib(size: str) -> int:
    """A JVM memory size (`2g`, `512m`) in MiB."""
    n, unit = float(size[:-1]), size[-1].lower()
    if unit not in "gm" or n <= 0:
        raise ValueError(f"{size!r} is not a JVM memory size like 2g or 512m")
    return int(n * 1024) if unit == "g" else int(n)


def with_overhead(size: str) -> int:
    """Heap plus what the JVM and Python need beside it, in MiB: Spark's own rule for a pod's
    memory (max(384 MiB, 10%))."""
    heap = jvm_mib(size)
    return heap + max(384, heap // 10)


def manifests(s: StackSettings, top: Topology, job: SparkJob) -> list[dict]:
    """What runs one job, by the stack's launcher."""
    if s.sparkLauncher == "operator":
        return [application(s, top, job)]
    claim = [state_claim(s, top, job)] if keeps_state(s, job) else []
    return [executor_template(s, top, job), *claim, driver(s, top, job)]


def rbac(s: StackSettings, top: Topology) -> list[dict]:
    """What a Spark driver needs: create and watch its executors (pods, services, configmaps)."""
    meta = {"name": s.sparkServiceAccount, "namespace": top.namespace,
            "labels": labels("spark", s.sparkServiceAccount)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": [""],
                    "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
                    "verbs": ["create", "get", "list", "watch", "delete", "deletecollection",
                              "patch", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": s.sparkServiceAccount},
         "subjects": [{"kind": "ServiceAccount", "name": s.sparkServiceAccount,
                       "namespace": top.namespace}]},
    ]


def user_secrets(top: Topology, s3_access: Any, s3_secret: Any, ch_password: Any,
                 s3_endpoint: str = "", pg_dsn: Any = None) -> list[dict]:
    """Secrets for the sinks, from secret stack settings; absent settings make no Secret.

    The S3 Secret carries the endpoint with the keys: a job on S3 reads all three from it.
    """
    out = []
    if s3_access is not None and s3_secret is not None:
        data = {"access-key": s3_access, "secret-key": s3_secret}
        if s3_endpoint:
            data["endpoint"] = s3_endpoint
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": S3_SECRET, "namespace": top.namespace,
                                 "labels": labels("credentials", S3_SECRET)},
                    "stringData": data})
    if ch_password is not None:
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": CLICKHOUSE_SECRET, "namespace": top.namespace,
                                 "labels": labels("credentials", CLICKHOUSE_SECRET)},
                    "stringData": {"password": ch_password}})
    if pg_dsn is not None:
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": POSTGRES_SECRET, "namespace": top.namespace,
                                 "labels": labels("credentials", POSTGRES_SECRET)},
                    "stringData": {"dsn": pg_dsn}})
    return out
