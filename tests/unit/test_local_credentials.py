"""Local secrets are written whole, 0600, and never through a link someone planted."""

from __future__ import annotations

import os
import stat

import pytest

from hanzo_stream.core import state
from hanzo_stream.core.secret_files import write_secret
from hanzo_stream.local import credentials


def test_a_secret_file_is_0600_from_the_start_and_replaced_whole(tmp_path):
    f = tmp_path / "s" / "secret.txt"
    write_secret(f, "one")
    assert f.read_text() == "one" and stat.S_IMODE(f.stat().st_mode) == 0o600
    f.chmod(0o644)  # an older, looser file is replaced by a new 0600 one
    write_secret(f, b"two")
    assert f.read_bytes() == b"two" and stat.S_IMODE(f.stat().st_mode) == 0o600
    assert sorted(p.name for p in f.parent.iterdir()) == ["secret.txt"]  # no temporary left


def test_a_planted_symbolic_link_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    link = tmp_path / "secret.txt"
    os.symlink(victim, link)
    write_secret(link, "new")
    assert victim.read_text() == "untouched"
    assert not link.is_symlink() and link.read_text() == "new"
    assert stat.S_IMODE(link.stat().st_mode) == 0o600


def test_credentials_are_never_read_through_a_link(tmp_path):
    planted = tmp_path / "planted.json"
    planted.write_text('{"admin": "chosen-by-someone-else", "principals": {}, "services": {}}')
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(planted, state.credentials_file(home))
    with pytest.raises(RuntimeError, match="symbolic link"):
        credentials.of_home(home, ["llm-gateway"])
    assert "chosen-by-someone-else" in planted.read_text()
