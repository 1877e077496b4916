"""The Go toolchain fetch: Go's own module hash, computed here, and refusal of a wrong zip."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from hanzo_stream.artifacts import gotoolchain, versions

DATA = Path(__file__).parent / "data"


def test_the_module_hash_is_the_one_go_computed():
    # github.com/jpillora/backoff@v1.0.0 from the Go module proxy; its .ziphash, written by
    # `go mod download`, is h1:uvFg412JmmHBHw7iwprIxkPMI+sGQ4kzOWsMeHnm2EA=
    zf = zipfile.ZipFile(DATA / "go-module-backoff-v1.0.0.zip")
    assert gotoolchain.dirhash(zf) == "h1:uvFg412JmmHBHw7iwprIxkPMI+sGQ4kzOWsMeHnm2EA="


def test_a_toolchain_zip_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"golang.org/toolchain@{gotoolchain.module_version()}/bin/go", "#!/bin/sh\n")

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(gotoolchain.urllib.request, "urlopen",
                        lambda url, timeout: Response(buf.getvalue()))
    with pytest.raises(gotoolchain.ToolchainError, match="GO_TOOLCHAIN_HASH"):
        gotoolchain._fetch(tmp_path / versions.GO_VERSION)
    assert not (tmp_path / versions.GO_VERSION).exists()


def test_every_go_module_here_fits_the_pinned_release():
    wanted = gotoolchain._wanted()
    for mod in (Path(__file__).parents[2] / "kube").glob("*/go.mod"):
        line = next(ln for ln in mod.read_text().splitlines() if ln.startswith("go "))
        assert tuple(int(d) for d in line.split()[1].split(".")) <= wanted, mod
