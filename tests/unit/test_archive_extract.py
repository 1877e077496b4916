"""The schema registry's archive is unpacked safely on every Python the README allows: with
tarfile's "data" filter where it exists, by hand on Debian 12's 3.11.2 (which lacks it)."""

from __future__ import annotations

import contextlib
import io
import tarfile
from pathlib import Path

import pytest

from hanzo_stream.local import schema_registry
from hanzo_stream.local.daemon import StartFailed


def archive(tmp_path: Path, *members: tuple[str, str | None]) -> Path:
    """members: (name, symlink target or None for a small file)."""
    f = tmp_path / "a.tar.gz"
    with tarfile.open(f, "w:gz") as tar:
        for name, link in members:
            info = tarfile.TarInfo(name)
            if link is None:
                data = b"ok"
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
    return f


@pytest.fixture(params=["filter", "by hand"])
def python(request, monkeypatch):
    if request.param == "by hand":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return request.param


def test_a_normal_archive_is_unpacked(tmp_path, python):
    f = archive(tmp_path, ("apicurio/bin/run.sh", None), ("apicurio/lib/current", "../bin"))
    dest = tmp_path / "out"
    dest.mkdir()
    with tarfile.open(f) as tar:
        schema_registry._extract(tar, dest)
    assert (dest / "apicurio/bin/run.sh").read_bytes() == b"ok"


@pytest.mark.parametrize("members", [
    [("../evil", None)], [("apicurio/x", "/etc/passwd")], [("apicurio/x", "../../outside")],
])
def test_an_archive_that_reaches_outside_is_refused(tmp_path, python, members):
    f = archive(tmp_path, *members)
    dest = tmp_path / "out"
    dest.mkdir()
    with tarfile.open(f) as tar, pytest.raises((StartFailed, tarfile.FilterError)):
        schema_registry._extract(tar, dest)
    assert not (tmp_path / "evil").exists()


def test_an_absolute_name_never_lands_outside(tmp_path, python):
    """The data filter strips the leading /, the check by hand refuses it: never outside."""
    f = archive(tmp_path, ("/tmp-hanzo-abs-evil", None))
    dest = tmp_path / "out"
    dest.mkdir()
    with tarfile.open(f) as tar, contextlib.suppress(StartFailed):
        schema_registry._extract(tar, dest)
    assert not Path("/tmp-hanzo-abs-evil").exists()
