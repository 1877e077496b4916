"""Moving resources into components changes no URN: a stack deployed before sees no change.

Under a component a resource's URN carries the component's type (`KafkaCluster$...`), which
the engine would read as a new resource and the old one deleted: the StatefulSet and every
volume with it. So each moved resource names its old URN in an alias. The fixtures are the
URNs the flat program gave (tests/unit/data/urns-<variant>.txt, written by the program as
it was before the components); every one must still be a resource's URN or alias, and no
resource may have a URN the fixtures do not know. A resource added on purpose: rerun this
module as a script (`python -m tests.unit.test_infra_urns`), which rewrites the fixtures
from the URNs each resource answers to, and review the diff.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .infra_helpers import render

DATA = Path(__file__).parent / "data"
COMPONENT = "hanzo-stream:"  # the type prefix of the program's own components
PAGING = (("pagerdutyRoutingKey", "0123456789abcdef0123456789abcdef"),
          ("s3AccessKey", "AKIAEXAMPLE0001"), ("s3SecretKey", "s3-secret-for-the-render"))
# Each optional resource at least once: Alertmanager and the Spark users' secrets, cert-manager.
VARIANTS = {
    "dev": ("dev", (), ()),
    "prod": ("prod", (), ()),
    "prod-paging": ("prod", (("s3Endpoint", "http://minio.hanzo:9000"),), PAGING),
    "dev-cert-manager": ("dev", (("tlsMode", "cert-manager"),
                                 ("certManagerIssuer", "hanzo-ca")), ()),
}


def answers_to(r: dict) -> list[str]:
    """The URNs state may hold this resource under: its own, then its aliases'."""
    return [r["urn"], *r.get("aliases", [])]


def claims(rendered: dict, known: set[str]) -> dict[str, str]:
    """Each resource's URN as the last deployment knows it (its own, else an alias that the
    fixture holds; else its own, which the fixture then lacks)."""
    return {r["urn"]: next((u for u in answers_to(r) if u in known), r["urn"])
            for r in rendered["resources"] if not r["type"].startswith(COMPONENT)}


def fixture(variant: str) -> set[str]:
    return set((DATA / f"urns-{variant}.txt").read_text().split())


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_resource_keeps_the_urn_of_the_flat_program(variant):
    stack, sets, secrets = VARIANTS[variant]
    known = fixture(variant)
    claimed = claims(render(stack, sets, secrets), known)
    unknown = sorted(new for new, old in claimed.items() if old not in known)
    assert not unknown, ("a URN no earlier deployment has: give the resource an alias of its "
                         f"old URN (infra/components.py), or rewrite the fixtures: {unknown}")
    lost = sorted(known - set(claimed.values()))
    assert not lost, f"resources of the flat program the new one no longer answers to: {lost}"


def test_a_moved_resource_is_aliased_to_the_stack_root():
    """The alias is what keeps state: without it the URN would be a new one."""
    out = render("dev")
    moved = [r for r in out["resources"] if "$" in r["urn"].split("::")[2]]
    assert moved, "nothing under a component"
    for r in moved:
        root = "::".join([*r["urn"].split("::")[:2], r["urn"].split("::")[2].split("$")[-1],
                          r["urn"].split("::")[3]])
        assert root in r["aliases"], r["urn"]


def main() -> None:
    """Rewrite the fixtures from the program as it is now."""
    for variant, (stack, sets, secrets) in VARIANTS.items():
        rendered = render(stack, sets, secrets)
        urns = sorted(set(claims(rendered, fixture(variant) if (DATA / f"urns-{variant}.txt")
                                  .exists() else set()).values()))
        (DATA / f"urns-{variant}.txt").write_text("\n".join(urns) + "\n")
        print(f"{variant}: {len(urns)} URNs", file=sys.stderr)


if __name__ == "__main__":
    main()
