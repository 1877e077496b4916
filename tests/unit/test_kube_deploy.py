"""What a preview or an up did, step by step, as the Kubernetes tests read it (deploy.Plan)."""

from __future__ import annotations

from types import SimpleNamespace

from hanzo_stream.kube.deploy import Plan, _step_recorder, provider_config

STS = "kubernetes:apps/v1:StatefulSet"


def event(op: str, type_: str, name: str, diffs: list[str] | None = None) -> SimpleNamespace:
    urn = f"urn:pulumi:dev::hanzo-stream::{type_}::{name}"
    meta = SimpleNamespace(op=SimpleNamespace(value=op), type=type_, urn=urn, diffs=diffs, keys=None)
    return SimpleNamespace(resource_pre_event=SimpleNamespace(metadata=meta))


def record(*events: SimpleNamespace) -> list[dict]:
    steps, on_event = _step_recorder()
    for ev in events:
        on_event(ev)
    on_event(SimpleNamespace(resource_pre_event=None, diagnostic_event="x"))  # not a step
    return steps


def test_steps_that_change_nothing_are_not_recorded():
    steps = record(event("same", STS, "statefulset-kafka"),
                   event("read", "pulumi:pulumi:StackReference", "last-deployment"),
                   event("update", STS, "statefulset-kafka", ["spec"]))
    assert [(s["op"], s["name"], s["keys"]) for s in steps] == [("update", "statefulset-kafka", ["spec"])]


def test_a_replacement_reads_replace_whichever_of_its_steps_comes_last():
    # An up replaces in three steps; the last one (delete-replaced) must not hide the replace.
    for order in (("create-replacement", "replace", "delete-replaced"), ("replace",),
                  ("delete-replaced", "create-replacement")):
        plan = Plan(record(*(event(op, STS, "statefulset-kafka") for op in order)), {})
        assert plan.ops("StatefulSet") == {"statefulset-kafka": "replace"}, order


def test_ops_of_one_kind_and_the_count_of_changes():
    plan = Plan(record(event("update", STS, "statefulset-kafka"),
                       event("create", "kubernetes:core/v1:Secret", "secret-kafka-user-reporting")),
                {"same": 50, "read": 1, "update": 1, "create": 1})
    assert plan.ops("StatefulSet") == {"statefulset-kafka": "update"}
    assert plan.ops() == {"statefulset-kafka": "update", "secret-kafka-user-reporting": "create"}
    assert plan.changes == 2


def test_local_stacks_get_the_projects_provider_settings_and_no_project_setting(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text("name: hanzo-stream\nconfig:\n"
                                          "  hanzo-stream:brokers: 3\n"
                                          "  kubernetes:enableSecretMutable: true\n"
                                          "  kubernetes:deleteUnreachable: false\n")
    assert provider_config(tmp_path) == {"kubernetes:enableSecretMutable": "true",
                                         "kubernetes:deleteUnreachable": "false"}
    # The project's own: a changed Secret is updated in place, never deleted and created again.
    assert provider_config()["kubernetes:enableSecretMutable"] == "true"
