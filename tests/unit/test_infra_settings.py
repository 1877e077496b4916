"""Stack settings: the table, the stack files and the deploy guide agree."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from hanzo_stream.artifacts import versions
from infra.render import stack_config
from infra.settings import SETTINGS, SettingsError, parse

from .infra_helpers import ROOT


def test_project_file_points_at_the_program():
    doc = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert doc["name"] == "hanzo-stream"
    runtime = doc["runtime"]
    assert (runtime if isinstance(runtime, str) else runtime["name"]) == "python"
    assert doc["main"].rstrip("/") == "infra"
    assert (ROOT / "infra" / "__main__.py").exists()


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_stack_files_use_only_known_settings(stack):
    s = parse(stack_config(stack)[0])
    assert s.environment == stack
    assert s.brokers == {"dev": 1, "prod": 3}[stack]


def test_every_setting_is_documented_with_its_default():
    guide = (ROOT / "docs" / "deploy.md").read_text()
    for setting in SETTINGS:
        row = next((line for line in guide.splitlines() if line.startswith(f"| `{setting.key}`")),
                   None)
        assert row, f"docs/deploy.md has no row for {setting.key}"
        default = setting.default if isinstance(setting.default, str) else json.dumps(
            setting.default)
        if default:
            assert f"`{default}`" in row, (setting.key, default)


def test_defaults_follow_the_issue():
    s = parse({})
    assert (s.brokers, s.storageSize, s.cpuRequest, s.memoryRequest, s.cpuLimit,
            s.memoryLimit) == (1, "50Gi", "500m", "1Gi", "1000m", "2Gi")
    # The official image of the pinned Kafka release; Bitnami is a choice that names its image.
    assert (s.imageFlavor, s.broker_image) == ("apache", versions.APACHE_IMAGE)
    assert versions.APACHE_IMAGE.endswith(f"/apache/kafka:{versions.KAFKA_VERSION}")
    mirror = "registry.example.com/bitnami/kafka:4.4.0"
    assert parse({"imageFlavor": "bitnami", "image": mirror}).broker_image == mirror


def test_production_is_sized_for_production():
    s = parse(stack_config("prod")[0])
    assert (s.cpuRequest, s.memoryRequest, s.memoryLimit, s.heapOpts) == (
        "2", "8Gi", "8Gi", "-Xms4g -Xmx4g")


@pytest.mark.parametrize(("raw", "message"), [
    ({"heapOpts": "-Xms4g -Xmx4g"}, r"asks for a 4 GiB heap but memoryRequest is 1Gi"),
    ({"heapOpts": "-Xmx2g", "memoryRequest": "2Gi"}, r"memoryLimit is 2Gi, which leaves less "
                                                     r"than 768 MiB"),
    ({"heapOpts": "-XX:+UseG1GC"}, r"sets no -Xmx"),
    ({"brokers": "2"}, r"brokers is 2 but must be odd .* use 1 or 3"),
    ({"brokers": "4"}, r"4 voters survive no more failures than 3 \(a majority of 4 is 3\); "
                       r"use 3 or 5"),
    ({"brokers": "0"}, r"brokers is 0 but must be odd"),
    ({"brokers": "three"}, "not a valid int"),
    ({"brokers": "true"}, "expected int"),
    ({"imageFlavor": "confluent"}, "imageFlavor"),
    ({"imageFlavor": "bitnami"}, r"image is empty: Bitnami publishes no free Kafka 4\.4\.0 image"),
    ({"tlsMode": "cert-manager"}, "certManagerIssuer"),
    ({"imageDigest": "abc"}, "sha256"),
    ({"environment": "staging"}, "dev or prod"),
    ({"hanzo-stream:nope": "1"}, "unknown setting"),
    # Only the labels the API server copies from a node onto its pods can reach the broker.
    ({"rackLabel": "kubernetes.io/hostname"}, r"rackLabel 'kubernetes.io/hostname' is not a "
                                              r"label Kubernetes copies .*topology\.kubernetes"
                                              r"\.io/zone"),
    # A download needs curl, which the default init image (the reconciler image) lacks.
    ({"jmxAgentUrl": "https://mirror.example.com/agent.jar"},
     r"jmxAgentUrl is set.*pulumi config set initImage docker\.io/curlimages/curl"),
    # The founding quorum: 1 or 3+, never more pods than the stack has, never 2; each error
    # names the key and the fix.
    ({"initialControllers": "3"}, r"initialControllers is 3 but must be between 1 and brokers "
                                  r"\(1\): .*pulumi config set initialControllers 1"),
    ({"brokers": "3", "initialControllers": "4"}, r"between 1 and brokers \(3\)"),
    ({"brokers": "3", "initialControllers": "-1"}, r"initialControllers is -1"),
    ({"brokers": "5", "initialControllers": "2"}, r"initialControllers cannot be 2 .*"
                                                  r"pulumi config rm initialControllers"),
])
def test_bad_settings_are_refused(raw, message):
    with pytest.raises(SettingsError, match=message):
        parse(raw)


def test_initial_controllers_defaults_to_the_record_and_accepts_a_founding_size():
    assert parse({}).initialControllers == 0  # 0: the program's record decides
    assert parse({"brokers": "3", "initialControllers": "1"}).initialControllers == 1
    assert parse({"brokers": "5", "initialControllers": "3"}).initialControllers == 3


def test_values_arrive_as_pulumi_strings():
    s = parse({"hanzo-stream:brokers": "3", "createNamespace": "false",
               "clientNamespaces": '["a", "b"]', "brokerConfigOverrides": '{"x.y": "1"}'})
    assert (s.brokers, s.createNamespace, s.clientNamespaces, s.brokerConfigOverrides) == (
        3, False, ["a", "b"], {"x.y": "1"})


def test_secret_settings_are_never_parsed_into_plain_values():
    s = parse({"s3SecretKey": "hunter2"})
    assert "s3SecretKey" not in s.values
    assert not re.search("hunter2", json.dumps(s.values))


def test_the_program_directory_runs_as_pulumi_runs_it():
    """Pulumi executes infra/ as a program directory (its __main__.py, infra/ first on
    sys.path); that path registers the same resources as the rendered stack."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from .infra_helpers import render

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        proc = subprocess.run([sys.executable, "-m", "infra.render", "dev", "--via-main",
                               "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        via_main = json.loads(out.read_text())
    names = sorted((r["type"], r["name"]) for r in via_main["resources"])
    assert names == sorted((r["type"], r["name"]) for r in render("dev")["resources"])


def test_pulumi_sdks_are_pinned_to_the_releases_the_engine_runs():
    """pyproject pins the Kubernetes SDK of the provider binary we build (versions.py) and
    one pulumi SDK; the environment the tests run in has exactly those; the random and tls
    providers are gone (infra/generated.py makes those values)."""
    import tomllib
    from importlib.metadata import version

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["infra"]
    pins = dict(d.split("==") for d in deps if d.startswith("pulumi"))
    assert pins == {"pulumi": "3.272.0", "pulumi-kubernetes": versions.PULUMI_KUBERNETES_VERSION}
    assert pins == {name: version(name) for name in pins}


def test_the_projects_own_images_are_tagged_with_the_package_version():
    import tomllib

    from hanzo_stream.artifacts import versions

    version = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())[
        "project"]["version"]
    for image in (versions.RECONCILER_IMAGE, versions.SPARK_IMAGE):
        assert image.rsplit(":", 1)[1] == version, image
