"""The published images' Dockerfiles are rendered from the pins (hanzo_stream/artifacts/dockerfiles.py):
the files in images/ must be that rendering, and name the paths infra/ expects."""

from __future__ import annotations

import re

from hanzo_stream.artifacts import dockerfiles, jars, versions
from infra import settings, spark


def test_the_dockerfiles_in_the_repository_are_the_rendering():
    for name, render in dockerfiles.RENDERED.items():
        on_disk = (dockerfiles.IMAGES / name).read_text()
        assert on_disk == render(), \
            f"images/{name} is stale: run python -m hanzo_stream.artifacts.dockerfiles"


def test_they_bake_what_infra_runs():
    assert dockerfiles.JMX_AGENT == settings.JMX_AGENT_IN_IMAGE
    assert dockerfiles.APP_HOME == spark.APP_HOME
    baked = re.findall(r"https://repo1\.maven\.org/\S+/([^/\s]+\.jar)", dockerfiles.spark())
    assert baked == spark.connector_jars()
    reconciler = dockerfiles.reconciler()
    assert f"--checksum=sha256:{versions.JMX_EXPORTER_SHA256}" in reconciler
    assert jars.central_url(jars.JMX_AGENT).endswith(
        f"/io/prometheus/jmx/jmx_prometheus_javaagent/{versions.JMX_EXPORTER_VERSION}/"
        f"jmx_prometheus_javaagent-{versions.JMX_EXPORTER_VERSION}.jar")
