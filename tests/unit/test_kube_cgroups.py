"""The node's teardown walks cgroups that vanish while it walks them (hanzo_stream/kube/node.py)."""

from __future__ import annotations

from hanzo_stream.kube.node import _cgroup_dirs, _procs


def test_cgroup_dirs_are_listed_deepest_first_and_a_missing_root_is_empty(tmp_path):
    (tmp_path / "kubepods" / "burstable" / "pod1").mkdir(parents=True)
    (tmp_path / "kubepods" / "besteffort").mkdir()
    dirs = _cgroup_dirs(tmp_path)
    assert dirs[0] == tmp_path / "kubepods" / "burstable" / "pod1" and dirs[-1] == tmp_path
    assert len(dirs) == 5
    assert _cgroup_dirs(tmp_path / "gone") == []


def test_a_cgroup_gone_meanwhile_has_no_processes(tmp_path):
    (tmp_path / "cgroup.procs").write_text("12\n34\n")
    assert _procs(tmp_path) == [12, 34]
    assert _procs(tmp_path / "gone") == []
