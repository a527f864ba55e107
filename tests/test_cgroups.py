"""The control-group layer against both hierarchies' files. This machine's kernel mounts one version (v1 here),
which the sandbox tests exercise for real; the other is checked against a folder laid out as the kernel lays it
out, with the files a new group gets made by `mkdir` as the kernel makes them."""

import errno
import os
from pathlib import Path

import pytest

from grader.sandbox import cgroups

# Files a test writes through a descriptor start empty (a regular file, unlike the kernel's, keeps what a shorter
# write does not cover).
V2_GROUP_FILES = {"cgroup.procs": "", "cgroup.subtree_control": "", "cpu.weight": "100", "pids.max": "max",
                  "memory.max": "", "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
                  "memory.oom.group": "0", "memory.swap.max": "max"}
V1_GROUP_FILES = {"cpu": {"cgroup.procs": "", "cpu.shares": "1024"}, "pids": {"cgroup.procs": "", "pids.max": "max"},
                  "memory": {"cgroup.procs": "", "memory.limit_in_bytes": "",
                             "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
                             "memory.swappiness": "60"}}


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

    real_rmdir = os.rmdir

    def rmdir(path):
        """A group goes with its files, as the kernel's does, unless it has groups of its own (EBUSY)."""
        folder = Path(path)
        if not folder.is_relative_to(cgroups.ROOT) or not folder.exists():
            return real_rmdir(path)
        if any(p.is_dir() for p in folder.iterdir()):
            raise OSError(errno.EBUSY, "Device or resource busy", path)
        for p in folder.iterdir():
            p.unlink()
        real_rmdir(path)

    monkeypatch.setattr(cgroups.os, "mkdir", mkdir)
    monkeypatch.setattr(cgroups.os, "rmdir", rmdir)
    monkeypatch.setattr(cgroups.os, "makedirs", lambda path, mode=0o777, exist_ok=False: None
                        if exist_ok and os.path.isdir(path) else mkdir(path, mode))


def v2_layout(tmp_path, monkeypatch, controllers: str):
    (tmp_path / "cgroup.controllers").write_text(controllers + "\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(cgroups, "ROOT", str(tmp_path))
    return tmp_path


@pytest.fixture
def v2_root(tmp_path, monkeypatch, kernel_mkdir):
    return v2_layout(tmp_path, monkeypatch, "cpuset cpu io memory pids")


@pytest.fixture
def v2_root_without_memory(tmp_path, monkeypatch, kernel_mkdir):
    return v2_layout(tmp_path, monkeypatch, "cpuset cpu io pids")


@pytest.fixture
def v1_root(tmp_path, monkeypatch, kernel_mkdir):
    for controller in ("cpu", "pids", "memory"):
        (tmp_path / controller).mkdir()
        (tmp_path / controller / "cgroup.procs").write_text("")
    monkeypatch.setattr(cgroups, "ROOT", str(tmp_path))
    return tmp_path


def test_a_v2_group_gets_the_cpu_pids_and_memory_controllers_and_its_caps(v2_root):
    group = cgroups.create("uid-61000")
    folder = v2_root / cgroups.PARENT / "uid-61000"
    assert group.folders == [str(folder)]
    assert (v2_root / "cgroup.subtree_control").read_text() == "+cpu +pids +memory"
    assert (v2_root / cgroups.PARENT / "cgroup.subtree_control").read_text() == "+cpu +pids +memory"
    assert (v2_root / cgroups.PARENT / "cpu.weight").read_text() == str(min(10000, 100 * cgroups.PARENT_WEIGHT_CPUS))
    assert (folder / "pids.max").read_text() == str(cgroups.MAX_PIDS)
    # A group that hands a controller down holds no process: the worker sits beside the exercise's group.
    assert (folder / "cgroup.subtree_control").read_text() == "+memory"
    assert group.procs == [str(folder / cgroups.WORKER / "cgroup.procs")]
    assert group.memory == str(folder / cgroups.EXERCISE)
    assert (folder / cgroups.EXERCISE / "memory.oom.group").read_text() == "1"   # a kill takes them all
    assert (folder / cgroups.EXERCISE / "memory.swap.max").read_text() == "0"


def test_a_v2_group_without_the_memory_controller_keeps_the_worker_in_it(v2_root_without_memory):
    group = cgroups.create("uid-61000")
    folder = v2_root_without_memory / cgroups.PARENT / "uid-61000"
    assert (v2_root_without_memory / cgroups.PARENT / "cgroup.subtree_control").read_text() == "+cpu +pids"
    assert group.memory is None and group.memory_files() == {}
    assert group.procs == [str(folder / "cgroup.procs")]


@pytest.mark.parametrize("layout, limit, events", [("v2_root", "memory.max", "memory.events"),
                                                    ("v1_root", "memory.limit_in_bytes", "memory.oom_control")])
def test_the_worker_reaches_the_memory_group_through_descriptors(layout, limit, events, request):
    """The worker (in the box, no /sys) gets descriptors: a child writes the exercise's limit and joins; the
    worker reads how many processes the kernel killed there."""
    from grader.worker import jail

    request.getfixturevalue(layout)
    group = cgroups.create("uid-61000")
    files = group.memory_files()
    try:
        os.write(files["limit"], b"1073741824")
        os.write(files["procs"], b"0")
        assert (Path(group.memory) / limit).read_text() == "1073741824"
        assert (Path(group.memory) / "cgroup.procs").read_text() == "0"
        memory_group = {"memory_group": files}
        assert jail.oom_kills(memory_group) == 0
        (Path(group.memory) / events).write_text((Path(group.memory) / events).read_text().replace("oom_kill 0",
                                                                                                 "oom_kill 2"))
        assert jail.oom_kills(memory_group) == 2
    finally:
        for fd in files.values():
            os.close(fd)


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


def test_a_v1_group_caps_memory_in_a_group_the_worker_never_joins(v1_root):
    group = cgroups.create("uid-61000")
    memory = v1_root / "memory" / cgroups.PARENT / "uid-61000"
    assert group.memory == str(memory) and str(memory) not in group.folders
    assert all("/memory/" not in procs for procs in group.procs)
    assert (memory / "memory.swappiness").read_text() == "0"   # over the limit is killed, not swapped


def test_a_group_left_by_a_killed_grading_is_replaced_subgroups_and_all(v2_root):
    cgroups.create("uid-61000")
    again = cgroups.create("uid-61000")   # the fake rmdir of a folder with files in it fails, like the kernel's
    assert again is not None and again.memory

