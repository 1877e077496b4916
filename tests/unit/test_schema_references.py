"""The client never fetches: a schema that refers outside schemas/ (http:, file:, another
host's $id) is refused when the set is loaded, before any validator is built; circular and
deep schemas are refused with their file instead of crashing a recursive walker."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from hanzo_stream.schemas.store import BASE_ID, MAX_DEPTH, SchemaFileError, load
from hanzo_stream.schemas.validate import validate_schemas
from hanzo_stream.schemas.validator import Validator

ROOT = Path(__file__).resolve().parents[2]
EVENT = "llm.usage.completed"


@pytest.fixture
def schemas(tmp_path) -> Path:
    d = tmp_path / "schemas"
    shutil.copytree(ROOT / "schemas", d)
    return d


def edit(d: Path, rel: str, change) -> None:
    f = d / rel
    data = json.loads(f.read_text())
    change(data)
    f.write_text(json.dumps(data))


def with_property(ref: str):
    def change(s: dict) -> None:
        s.setdefault("properties", {})["extra"] = {"$ref": ref}
    return change


@pytest.fixture
def http_server():
    """A server on 127.0.0.1 that records every request it gets (there must be none)."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            hits.append(self.path)
            body = json.dumps({"type": "string"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", hits
    server.shutdown()


def test_a_remote_reference_is_refused_and_never_fetched(schemas, http_server):
    url, hits = http_server
    edit(schemas, f"events/{EVENT}.json", with_property(f"{url}/evil.json"))
    with pytest.raises(SchemaFileError) as e:
        Validator(load(schemas)).check({"type": EVENT})
    assert f"events/{EVENT}.json: /properties/extra/$ref" in str(e.value)
    assert "nothing is fetched" in str(e.value)
    assert hits == []


@pytest.mark.parametrize("ref", ["file:///etc/passwd", "/etc/passwd", "../../etc/passwd#/x",
                                 f"{BASE_ID}defs/missing.json",
                                 f"{BASE_ID}hanzo.stream.v1.json#/properties/id"])
def test_references_outside_the_set_are_refused(schemas, ref):
    edit(schemas, f"events/{EVENT}.json", with_property(ref))
    with pytest.raises(SchemaFileError) as e:
        load(schemas)
    assert repr(ref) in str(e.value)


def test_fragments_and_whole_ids_are_the_references_allowed(schemas):
    edit(schemas, f"events/{EVENT}.json", lambda s: s.update(
        {"$defs": {"word": {"type": "string"}},
         "properties": {**s.get("properties", {}), "extra": {"$ref": "#/$defs/word"}}}))
    assert EVENT in load(schemas).events


def test_a_reference_cycle_names_its_files(schemas):
    a, b = f"{BASE_ID}defs/a.json", f"{BASE_ID}defs/b.json"
    (schemas / "defs" / "a.json").write_text(json.dumps({"$id": a, "allOf": [{"$ref": b}]}))
    (schemas / "defs" / "b.json").write_text(json.dumps({"$id": b, "allOf": [{"$ref": a}]}))
    with pytest.raises(SchemaFileError) as e:
        load(schemas)
    assert "$ref cycle defs/a.json -> defs/b.json -> defs/a.json" in str(e.value)


def test_a_schema_that_refers_to_itself_is_a_cycle(schemas):
    own = json.loads((schemas / "events" / f"{EVENT}.json").read_text())["$id"]
    edit(schemas, f"events/{EVENT}.json", with_property(own))
    with pytest.raises(SchemaFileError, match="cycle"):
        load(schemas)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 3000, 100_000])
def test_deep_schemas_are_refused_with_their_file(schemas, depth):
    deep: dict = {"type": "string"}
    text = '{"allOf": [' * depth + json.dumps(deep) + "]}" * depth
    (schemas / "defs" / "deep.json").write_text(text)
    problems = validate_schemas(schemas, None)
    assert len(problems) == 1 and "defs/deep.json" in str(problems[0])
    assert "deep" in str(problems[0]) or "nests" in str(problems[0])


def test_validate_answers_a_hostile_schema_set_without_a_traceback(tmp_path, schemas):
    shutil.copy(ROOT / "topics.yaml", tmp_path / "topics.yaml")
    (schemas / "defs" / "deep.json").write_text('{"allOf": [' * 5000 + "{}" + "]}" * 5000)
    proc = subprocess.run([sys.executable, "-m", "hanzo_stream", "validate", "--registry",
                           str(tmp_path / "topics.yaml")], capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "defs/deep.json" in out and "Traceback" not in out, out
