"""Render a stack offline under Pulumi mocks: no cluster, no Pulumi CLI, no state.

    python -m infra.render dev [--out rendered.json] [--set key=value] [--secret key=value]
                               [--existing resource-name='{"output": value}']

Runs the real program with `pulumi.runtime.set_mocks` and writes every registered or read
resource (its URN as the engine would give it and the URNs of its aliases, inputs with
secrets unwrapped, which input paths were secret, protect flag, ignore_changes, secret
outputs, dependencies; reads are marked `read`), the stack outputs
(value and secretness) and every generated secret value (the secret outputs of the
program's dynamic resources), so tests can search the output for them. Dynamic resources
(infra/generated.py) run their provider's real `create`, so passwords, keys and
certificates are real ones, made for this rendering only. `--existing` renders a later
`pulumi up` of a stack that already has that resource (or a read of what the cluster or
the stack's last deployment holds): its outputs are the ones given, not the ones the inputs
would produce. One stack per process: the Pulumi runtime keeps global state, so the tests
start one per stack.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")
PROVIDER_KEY = "__provider"  # pulumi.dynamic: the serialized provider among the inputs
STACK_TYPE = "pulumi:pulumi:Stack"


def stack_config(stack: str, root: Path = ROOT) -> tuple[dict[str, str], list[str]]:
    """Pulumi.<stack>.yaml as the language host passes it: strings, objects as JSON.
    Encrypted (`secure:`) values cannot be decrypted here; a generated stand-in is used."""
    doc = yaml.safe_load((root / f"Pulumi.{stack}.yaml").read_text()) or {}
    config, secret_keys = {}, []
    for key, value in (doc.get("config") or {}).items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key] = "stand-in-" + secrets.token_hex(12)
            secret_keys.append(key)
        else:
            config[key] = value if isinstance(value, str) else json.dumps(value)
    return config, secret_keys


def _unwrap(value: Any, path: str, secret_paths: list[str]) -> Any:
    if isinstance(value, dict):
        if value.get(SECRET_SIG[0]) == SECRET_SIG[1]:
            secret_paths.append(path)
            return _unwrap(value.get("value"), path, [])
        return {k: _unwrap(v, f"{path}.{k}" if path else k, secret_paths)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v, f"{path}[{i}]", secret_paths) for i, v in enumerate(value)]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _create(provider: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Run a dynamic provider's create as its provider process would: unpickle it (dill, by
    reference to infra.generated) and call it with the resolved inputs."""
    import dill

    result = dill.loads(base64.b64decode(provider)).create(inputs)
    return result.id, _unwrap(result.outs or {}, "", [])


def render(stack: str, extra: dict[str, str] | None = None,
           extra_secrets: dict[str, str] | None = None, root: Path = ROOT,
           via_main: bool = False, existing: dict[str, dict] | None = None) -> dict:
    config, secret_keys = stack_config(stack, root)
    for k, v in (extra or {}).items():
        config[f"hanzo-stream:{k}"] = v
    for k, v in (extra_secrets or {}).items():
        config[f"hanzo-stream:{k}"] = v
        secret_keys.append(f"hanzo-stream:{k}")
    os.environ["PULUMI_CONFIG"] = json.dumps(config)
    os.environ["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(secret_keys)

    import pulumi
    from pulumi.runtime import mocks
    from pulumi.runtime.settings import get_root_resource
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    generated: list[str] = [v for k, v in config.items() if k in secret_keys]
    resources: list[dict] = []
    options: dict[str, dict] = {}

    class Recorder(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs):
            paths: list[str] = []
            inputs = _unwrap(args.inputs, "", paths)
            provider = inputs.pop(PROVIDER_KEY, None)  # a dynamic resource's serialized provider
            opts = options.get((args.typ, args.name), {})
            resources.append({"type": args.typ, "name": args.name, "inputs": inputs,
                              "secret_paths": [p for p in paths if p != PROVIDER_KEY], **opts})
            rid, outputs = f"{args.name}-id", dict(inputs)
            if provider is not None:  # what the engine would do: the provider's own create
                rid, made = _create(provider, inputs)
                outputs |= made
                generated.extend(made[k] for k in opts.get("secret_outputs", ()) if made.get(k))
            elif args.typ == "pulumi:pulumi:StackReference":
                outputs |= {"outputs": {}, "secretOutputNames": []}  # a stack never deployed
            elif args.typ == "kubernetes:discovery.k8s.io/v1:EndpointSlice":  # a kubeadm node's
                outputs |= {"endpoints": [{"addresses": ["192.168.49.2"]}],
                            "ports": [{"name": "https", "port": 8443, "protocol": "TCP"}]}
            elif args.typ == "kubernetes:core/v1:Namespace":  # what the API server assigns
                meta = dict(outputs.get("metadata") or {"name": (args.resource_id or "")})
                outputs["metadata"] = meta | {"uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, meta["name"]))}
            outputs |= (existing or {}).get(args.name, {})
            return rid, outputs

        def call(self, args: pulumi.runtime.MockCallArgs):
            return {}

    # The mock's URNs keep only the parent's last type; the engine's hold the whole chain.
    engine_urns: dict[str, str] = {}

    def engine_urn(parent: str, typ: str, name: str, request_parent: bool = True) -> str:
        """The URN the engine gives a resource: its parents' types chained, except the stack's."""
        chain = engine_urns.get(parent, "").split("::")[2:3] if request_parent else []
        qualified = "$".join([*chain, typ]) if chain and chain[0] != STACK_TYPE else typ
        return "::".join([f"urn:pulumi:{stack}", "hanzo-stream", qualified, name])

    def alias_urn(alias, typ: str, name: str, parent: str) -> str:
        if alias.urn:
            return engine_urns.get(alias.urn, alias.urn)
        spec = alias.spec
        return engine_urn(spec.parentUrn or parent, spec.type or typ, spec.name or name,
                          request_parent=not spec.noParent)

    class Monitor(mocks.MockMonitor):
        def RegisterResource(self, request):
            urn = engine_urn(request.parent, request.type, request.name)
            engine_urns[self.make_urn(request.parent, request.type, request.name)] = urn
            aliases = [alias_urn(a, request.type, request.name, request.parent)
                       for a in request.aliases]
            options[(request.type, request.name)] = {
                "urn": urn, "aliases": sorted(aliases),
                "protect": bool(request.protect),
                "retain_on_delete": bool(request.retainOnDelete),
                "ignore_changes": sorted(request.ignoreChanges),
                "create_timeout": request.customTimeouts.create or None,
                "update_timeout": request.customTimeouts.update or None,
                "secret_outputs": sorted(request.additionalSecretOutputs),
                "dependencies": sorted(u.split("::")[-1] for u in request.dependencies)}
            return super().RegisterResource(request)

        def ReadResource(self, request):
            urn = engine_urn(request.parent, request.type, request.name)
            options[(request.type, request.name)] = {"read": True, "id": request.id, "urn": urn}
            return super().ReadResource(request)

    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="hanzo-stream", stack=stack, preview=False,
                             monitor=Monitor(recorder), organization="organization")
    from pulumi.runtime.config import set_all_config

    set_all_config(config, secret_keys)  # what the language host does before the program
    if via_main:  # exactly what the language host runs: infra/ as a program directory
        import runpy

        sys.path.insert(0, str(root / "infra"))
        program = lambda: runpy.run_path(str(root / "infra"), run_name="__main__")  # noqa: E731
    else:
        sys.path.insert(0, str(root))
        from infra.program import main

        program = lambda: main(root)  # noqa: E731
    _sync_await(run_pulumi_func(program))
    outputs = {}
    for name, value in get_root_resource().outputs.items():
        out = pulumi.Output.from_input(value)
        outputs[name] = {"value": _unwrap(_sync_await(out.future()), "", []),
                         "secret": bool(_sync_await(out.is_secret()))}
    return {"stack": stack, "resources": resources, "outputs": outputs,
            "generated_secrets": generated}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stack")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--secret", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--existing", action="append", default=[], metavar="NAME=JSON",
                    help="outputs the state holds for resource NAME from an earlier up")
    ap.add_argument("--via-main", action="store_true", help="run infra/__main__.py as Pulumi does")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="the checkout to render (its topics.yaml, Pulumi.<stack>.yaml, ...)")
    a = ap.parse_args(argv)
    pairs = lambda xs: dict(x.split("=", 1) for x in xs)  # noqa: E731
    existing = {k: json.loads(v) for k, v in pairs(a.existing).items()}
    result = render(a.stack, pairs(a.set), pairs(a.secret), root=a.root, via_main=a.via_main,
                    existing=existing)
    text = json.dumps(result, indent=1, sort_keys=True, default=str)
    if a.out:
        a.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
