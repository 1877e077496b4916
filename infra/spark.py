"""One Kubeflow Spark operator SparkApplication per consumer-group job.

Why the operator and not spark-submit Jobs: these are streaming queries that must run
forever and come back after a crash. A SparkApplication has a restart policy with
back-off for exactly that, the operator re-submits a lost driver, and
`kubectl get sparkapplications` shows each job's state. A spark-submit Job would need
its own restart loop and RBAC to create drivers, and a Job "completing" means nothing
for a stream.

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

from hanzo_stream import versions as v
from hanzo_stream.registry import Registry

from .reconciler import connection_env
from .settings import StackSettings
from .tls import CA_MOUNT, ca_volume
from .topology import PART_OF, Topology, labels

DEFAULT_JOBS = ("analytics-ingest", "billing-agg", "audit-archive")
APP_HOME = "/opt/hanzo-stream"
SERVICE_LABELS = {"app.kubernetes.io/component": "spark", "app.kubernetes.io/part-of": PART_OF}
S3_SECRET = "hanzo-stream-s3"
CLICKHOUSE_SECRET = "hanzo-stream-clickhouse"

def connector_jars(spark_version: str = v.SPARK_VERSION, scala: str = v.SPARK_SCALA) -> list[str]:
    """Spark's Kafka connector and what it needs at run time, plus s3a for checkpoints and
    the archive; the versions are hanzo_stream/versions.py's. Baked into the image: images.md."""
    return [
        f"spark-sql-kafka-0-10_{scala}-{spark_version}.jar",
        f"spark-token-provider-kafka-0-10_{scala}-{spark_version}.jar",
        f"kafka-clients-{v.SPARK_KAFKA_CLIENTS}.jar",
        f"commons-pool2-{v.SPARK_COMMONS_POOL2}.jar",
        f"hadoop-aws-{v.SPARK_HADOOP}.jar",
        f"bundle-{v.SPARK_AWS_SDK}.jar",
        f"analyticsaccelerator-s3-{v.SPARK_S3_ANALYTICS_ACCELERATOR}.jar",  # hadoop-aws 3.5 reads through it
    ]


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
        {"name": "HANZO_STREAM_HOME", "value": "/tmp/hanzo-stream"},
    ]
    if uses_s3(s, job):  # endpoint and keys from the S3 Secret, never a literal (jobs/s3.py)
        env += [_secret_env("HANZO_STREAM_S3_ENDPOINT", S3_SECRET, "endpoint"),
                _secret_env("AWS_ACCESS_KEY_ID", S3_SECRET, "access-key"),
                _secret_env("AWS_SECRET_ACCESS_KEY", S3_SECRET, "secret-key")]
    env.append(_secret_env("CLICKHOUSE_PASSWORD", CLICKHOUSE_SECRET, "password"))
    if s.clickhouseUrl:
        env.append({"name": "HANZO_STREAM_CLICKHOUSE_URL", "value": s.clickhouseUrl})
    if s.auditArchivePath:
        env.append({"name": "HANZO_STREAM_ARCHIVE_PATH", "value": s.auditArchivePath})
    return env


def application(s: StackSettings, top: Topology, job: SparkJob) -> dict:
    pod_labels = {**SERVICE_LABELS, "hanzo.ai/spark-app": job.name}
    security = {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
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
            "driver": {**common, "cores": 1, "memory": "1g",
                       "serviceAccount": s.sparkServiceAccount},
            "executor": {**common, "instances": job.executors, "cores": 1, "memory": "2g"},
            "volumes": [ca_volume()],
        },
    }


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
                 s3_endpoint: str = "") -> list[dict]:
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
    return out
