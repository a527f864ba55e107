"""The control-group layer against both hierarchies' files. This machine's kernel mounts one version (v1 here),
which the sandbox tests exercise for real; the other is checked against a folder laid out as the kernel lays it
out, with the files a new group gets made by `mkdir` as the kernel makes them."""

import os
from pathlib import Path

import pytest

from grader.sandbox import cgroups

V2_GROUP_FILES = {"cgroup.procs": "", "cgroup.subtree_control": "", "cpu.weight": "100", "pids.max": "max"}
V1_GROUP_FILES = {"cpu": {"cgroup.procs": "", "cpu.shares": "1024"}, "pids": {"cgroup.procs": "", "pids.max": "max"}}


@pytest.fixture
def kernel_mkdir(monkeypatch):
    """os.mkdir under the fake root fills a new group with its files, as the kernel does."""
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, **kwargs):
        real_mkdir(path, mode, **kwargs)
        root = Path(cgroups.ROOT)
        relative = Path(path).relative_to(root) if Path(path).is_relative_to(root) else None
        if relative is None:
            return
        files = V2_GROUP_FILES if (root / "cgroup.controllers").exists() else V1_GROUP_FILES[relative.parts[0]]
        for name, text in files.items():
            (Path(path) / name).write_text(text)

    monkeypatch.setattr(cgroups.os, "mkdir", mkdir)
    monkeypatch.setattr(cgroups.os, "makedirs", lambda path, mode=0o777, exist_ok=False: None
                        if exist_ok and os.path.isdir(path) else mkdir(path, mode))


@pytest.fixture
def v2_root(tmp_path, monkeypatch, kernel_mkdir):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(cgroups, "ROOT", str(tmp_path))
    return tmp_path


@pytest.fixture
def v1_root(tmp_path, monkeypatch, kernel_mkdir):
    for controller in ("cpu", "pids"):
        (tmp_path / controller).mkdir()
        (tmp_path / controller / "cgroup.procs").write_text("")
    monkeypatch.setattr(cgroups, "ROOT", str(tmp_path))
    return tmp_path


def test_a_v2_group_gets_the_cpu_and_pids_controllers_and_its_cap(v2_root):
    group = cgroups.create("uid-61000")
    folder = v2_root / cgroups.PARENT / "uid-61000"
    assert group.folders == [str(folder)]
    assert (v2_root / "cgroup.subtree_control").read_text() == "+cpu +pids"
    assert (v2_root / cgroups.PARENT / "cgroup.subtree_control").read_text() == "+cpu +pids"
    assert (v2_root / cgroups.PARENT / "cpu.weight").read_text() == str(min(10000, 100 * cgroups.PARENT_WEIGHT_CPUS))
    assert (folder / "pids.max").read_text() == str(cgroups.MAX_PIDS)
    assert group.procs == [str(folder / "cgroup.procs")]


@pytest.mark.parametrize("share, weight", [(1, "100"), (0.1, "10"), (0.001, "1")])
def test_a_v2_group_weighs_its_share_in_cpu_weight(v2_root, share, weight):
    group = cgroups.create("uid-61000")
    group.weigh(share)
    assert (Path(group.folders[0]) / "cpu.weight").read_text() == weight   # 1 to 10000, default 100


@pytest.mark.parametrize("share, shares", [(1, "1024"), (0.1, "102"), (0.001, "2")])
def test_a_v1_group_weighs_its_share_in_cpu_shares(v1_root, share, shares):
    group = cgroups.create("uid-61000")
    assert group.folders == [str(v1_root / c / cgroups.PARENT / "uid-61000") for c in ("cpu", "pids")]
    group.weigh(share)
    assert (v1_root / "cpu" / cgroups.PARENT / "uid-61000" / "cpu.shares").read_text() == shares   # at least 2
    assert (v1_root / "pids" / cgroups.PARENT / "uid-61000" / "pids.max").read_text() == str(cgroups.MAX_PIDS)

