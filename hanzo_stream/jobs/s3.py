"""Where a job's S3-compatible storage is and how to log in to it: one answer for every user.

The Spark session (s3a settings), the job's JVM (the AWS SDK's credential chain reads
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY from its environment), the archive reader and
`hanzo-stream local status` (boto3) all ask `resolve()`, so they cannot disagree.

Endpoint: HANZO_STREAM_S3_ENDPOINT, else the spec's `s3.endpoint`, else the local platform's
object store while it runs. Keys: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, else the local
platform's credentials.json; neither: the SDK's default chain (a pod's web identity).
Credentials are never Spark or Hadoop configuration: Spark prints its configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..core import state

ENDPOINT_ENV = "HANZO_STREAM_S3_ENDPOINT"
ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"
SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"
DEFAULT_REGION = "us-east-1"  # what S3-compatible stores (MinIO, s3proxy) answer to


@dataclass(frozen=True)
class S3Access:
    endpoint: str | None  # None: AWS itself
    access_key: str | None = None
    secret_key: str | None = None
    path_style: bool = True
    region: str = DEFAULT_REGION

    def __repr__(self) -> str:  # never print the secret key
        return (f"S3Access(endpoint={self.endpoint!r}, access_key={self.access_key!r}, "
                f"path_style={self.path_style}, region={self.region!r})")

    def client(self) -> Any:
        """A boto3 S3 client for this store (boto3 is the standard client the tests use too)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path" if self.path_style else "auto"},
                          retries={"max_attempts": 5, "mode": "standard"}))

    def environ(self) -> dict[str, str]:
        """The variables the JVM's AWS SDK reads its keys from (empty: the default chain)."""
        if not (self.access_key and self.secret_key):
            return {}
        return {ACCESS_KEY_ENV: self.access_key, SECRET_KEY_ENV: self.secret_key}


def resolve(s3: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
            home: Path | None = None) -> S3Access:
    """The store a spec's `s3:` block (endpoint, path_style_access) points at, with its keys."""
    env = os.environ if env is None else env
    s3 = s3 or {}
    endpoint = env.get(ENDPOINT_ENV) or s3.get("endpoint") or (local_endpoint(home) if home else None)
    key, secret = env.get(ACCESS_KEY_ENV), env.get(SECRET_KEY_ENV)
    if not (key and secret) and home is not None:
        key, secret = _local_keys(home)
    return S3Access(endpoint, key, secret, bool(s3.get("path_style_access", True)))


def of_spec(spec: Any, env: Mapping[str, str] | None = None) -> S3Access:
    """The store of a job spec: its first sink's `s3:` block, the job's state directory."""
    block = next((s.get("s3") for s in spec.sinks.values() if s.get("s3")), None)
    return resolve(block, env, spec.home)


def local_endpoint(home: Path) -> str | None:
    """The local platform's object store, while it runs (local/object_store.py starts it)."""
    return state.running_url(home / state.OBJECT_STORE, state.OBJECT_STORE)


def _local_keys(home: Path) -> tuple[str | None, str | None]:
    services = state.read_credentials(home).get("services", {})
    return services.get(state.S3_ACCESS_KEY), services.get(state.S3_SECRET_KEY)


def is_s3(path: str) -> bool:
    return path.startswith(("s3a://", "s3://"))


def split(url: str) -> tuple[str, str]:
    """s3a://bucket/some/prefix -> ("bucket", "some/prefix")."""
    parsed = urlparse(url)
    if parsed.scheme not in ("s3a", "s3") or not parsed.netloc:
        raise ValueError(f"{url!r} is not an s3a://bucket/prefix URL")
    return parsed.netloc, parsed.path.lstrip("/")


def list_keys(client: Any, bucket: str, prefix: str) -> list[str]:
    """Every key under `prefix` (all pages)."""
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys
