"""A tree a sandboxed command builds, however deep or long its paths, is that command's alone.

A command may leave thousands of nested dirs, or paths past PATH_MAX, in its workspace or
its work dir. The sandbox hands such a workspace over and back (as root) and removes what
is left (codeloop.sandbox.trees: by dir fds, no recursion, no path built, no link
followed): the command gets its result, the next command on the same executor runs, and
the workspace is gone after destroy. Local as root, docker, and as an ordinary user (the
slow test runs this file as uid 65534); trees.py itself is checked on such trees with links
in them. Nothing is mocked: the sandbox really runs.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess

import pytest

from codeloop.agent.fsops import remove_path
from codeloop.agent.workspace import Workspace
from codeloop.config import SandboxConfig
from codeloop.sandbox import CmdJob, ExecJob, make_executor
from codeloop.sandbox.docker_backend import skip_without_docker_engine
from codeloop.sandbox.trees import (
    TREE_DIR_FLAGS,
    chown_tree,
    empty_tree,
    remove_tree,
    walk_dirs,
)
from tests._nonroot import run_as_ordinary_user, skip_unless_ordinary_user_can_run, tail

DEPTH = 5000  # past Python's recursion limit (1000): os.walk and shutil.rmtree die here
LONG_NAME, LONG_LEVELS = "L" * 250, 17  # 17 * 251 characters: a path past PATH_MAX (4096)

# builds ``levels`` nested dirs named ``name`` in its cwd by dir fds (no path grows), a file
# and a link to / at the bottom; prints how deep it got
MAKER = """
import os, sys
name, levels = sys.argv[1], int(sys.argv[2])
fd = os.open(".", os.O_RDONLY)
for i in range(levels):
    os.mkdir(name, dir_fd=fd)
    sub = os.open(name, os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = sub
os.close(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
os.symlink("/", "root-link", dir_fd=fd)
print(levels)
"""
SHAPES = {"5000_deep": ("d", DEPTH), "past_path_max": (LONG_NAME, LONG_LEVELS)}


def chain(top: str, name: str, levels: int) -> int:
    """Make ``levels`` nested dirs ``name`` under ``top``; the fd of the deepest (close it)."""
    fd = os.open(top, TREE_DIR_FLAGS)
    for _ in range(levels):
        os.mkdir(name, dir_fd=fd)
        sub = os.open(name, TREE_DIR_FLAGS, dir_fd=fd)
        os.close(fd)
        fd = sub
    return fd


def bottom(top: str, name: str, levels: int) -> int:
    """The fd of the deepest of ``levels`` nested dirs ``name`` under ``top`` (close it)."""
    fd = os.open(top, TREE_DIR_FLAGS)
    for _ in range(levels):
        sub = os.open(name, TREE_DIR_FLAGS, dir_fd=fd)
        os.close(fd)
        fd = sub
    return fd


def links_at_the_bottom(fd: int, outside: str) -> None:
    """A link to a dir outside, one to a file outside, a dangling one and a file."""
    os.symlink(outside, "dir-link", dir_fd=fd)
    os.symlink(os.path.join(outside, "keep.txt"), "file-link", dir_fd=fd)
    os.symlink("/nowhere/at/all", "dangling", dir_fd=fd)
    os.close(os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))


@pytest.fixture
def shaped(tmp_path):
    """(top, outside): top holds a 5000-deep and a past-PATH_MAX chain with links at each
    bottom into ``outside``, which holds keep.txt. Removed after (pytest's own clean-up of
    old temp dirs recurses)."""
    outside, top = tmp_path / "outside", tmp_path / "top"
    outside.mkdir()
    (outside / "keep.txt").write_text("kept\n")
    top.mkdir()
    for name, levels in SHAPES.values():
        fd = chain(str(top), name, levels)
        links_at_the_bottom(fd, str(outside))
        os.close(fd)
    yield str(top), str(outside)
    remove_tree(str(top))


def test_remove_tree_removes_deep_and_long_pathed_trees_and_never_follows_their_links(shaped):
    top, outside = shaped
    remove_tree(top)
    assert not os.path.lexists(top)
    assert os.listdir(outside) == ["keep.txt"]
    assert open(os.path.join(outside, "keep.txt")).read() == "kept\n"


def test_chown_tree_changes_every_entry_and_each_link_itself_not_what_it_names(shaped):
    if os.geteuid() != 0:
        pytest.skip("not root: chown to another uid needs root")
    top, outside = shaped
    chown_tree(top, 65534, 65534)
    for name, levels in SHAPES.values():
        fd = bottom(top, name, levels)
        try:
            owners = {os.stat(n, dir_fd=fd, follow_symlinks=False).st_uid for n in os.listdir(fd)}
            assert owners == {65534} and os.fstat(fd).st_uid == 65534
        finally:
            os.close(fd)
    assert os.stat(outside).st_uid == os.stat(os.path.join(outside, "keep.txt")).st_uid == 0


def test_a_walk_holds_a_few_fds_whatever_the_depth(shaped):
    top, _ = shaped
    counts = []

    def enter(fd, _st):
        counts.append(len(os.listdir("/proc/self/fd")))
        return [e.name for e in os.scandir(fd) if e.is_dir(follow_symlinks=False)]

    before = len(os.listdir("/proc/self/fd"))
    fd = os.open(top, TREE_DIR_FLAGS)
    try:
        walk_dirs(fd, enter)
    finally:
        os.close(fd)
    assert len(counts) == 1 + DEPTH + LONG_LEVELS
    assert max(counts) <= before + 2  # the top's and the dir walked's


def test_dirs_their_owner_made_unreadable_are_removed_too(tmp_path):
    fd = chain(str(tmp_path), "d", 1200)
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.chmod(fd, 0)
    os.close(fd)
    fd = bottom(str(tmp_path), "d", 600)
    os.chmod(fd, 0)
    os.close(fd)
    os.chmod(tmp_path / "d", 0)
    remove_tree(str(tmp_path / "d"))
    assert os.listdir(tmp_path) == []


def test_emptying_a_tree_keeps_the_dir_itself(shaped):
    top, outside = shaped
    empty_tree(top)
    assert os.listdir(top) == [] and os.listdir(outside) == ["keep.txt"]


def test_a_dir_moved_while_its_tree_is_walked_stops_the_walk(tmp_path):
    os.close(chain(str(tmp_path), "d", 5))
    entered = []

    def enter(fd, _st):
        entered.append(1)
        if len(entered) == 3:  # in top/d/d, walking from top (tmp/d/d): it goes elsewhere
            os.rename(tmp_path / "d/d/d/d", tmp_path / "elsewhere")
        return [e.name for e in os.scandir(fd) if e.is_dir(follow_symlinks=False)]

    fd = os.open(tmp_path / "d/d", TREE_DIR_FLAGS)
    try:
        with pytest.raises(OSError) as info:
            walk_dirs(fd, enter)  # back up from the moved dir: its ".." is tmp, not top/d
    finally:
        os.close(fd)
    assert info.value.errno == errno.ESTALE


def test_the_agents_remove_tool_removes_a_deep_tree_by_its_name(shaped):
    top, outside = shaped
    remove_path(os.path.dirname(top), os.path.basename(top))
    assert not os.path.lexists(top) and os.listdir(outside) == ["keep.txt"]


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def ex(request):
    if request.param == "docker":
        skip_without_docker_engine()
    executor = make_executor(
        SandboxConfig(backend=request.param, workers=1, timeout_s=30.0), workspaces=True
    )
    yield executor
    executor.close()


def cmd(ex, ws: str, argv: list[str]):
    (res,) = ex.run_commands([CmdJob(argv, ws)])
    return res


def make(shape: str, where: str = ".") -> list[str]:
    name, levels = SHAPES[shape]
    return ["/bin/sh", "-c", f'cd {where} && exec python3 -I -c "$0" "$@"', MAKER, name,
            str(levels)]


def assert_handed_back_to_root(ws: str, shape: str) -> None:
    """As root the host owns the workspace again after the command, down to its bottom."""
    if os.geteuid() != 0:
        return
    fd = bottom(ws, *SHAPES[shape])
    try:
        names = os.listdir(fd)
        assert sorted(names) == ["bottom.txt", "root-link"]
        assert {os.stat(n, dir_fd=fd, follow_symlinks=False).st_uid for n in names} == {0}
    finally:
        os.close(fd)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_command_that_builds_such_a_tree_gets_its_result_and_the_next_one_runs(ex, shape):
    ws = ex.workspaces.new_workspace()
    res = cmd(ex, ws, make(shape))
    assert (res.status, res.exit_code, res.stdout) == ("exited", 0, f"{SHAPES[shape][1]}\n"), res
    assert_handed_back_to_root(ws, shape)
    again = cmd(ex, ws, ["/bin/sh", "-c", "ls; echo fine"])  # the same workspace, same slot
    assert (again.status, again.exit_code) == ("exited", 0) and again.stdout.endswith("fine\n")
    Workspace(ws, base="").destroy()
    assert not os.path.lexists(ws)
    other = ex.workspaces.new_workspace()
    assert cmd(ex, other, ["/bin/sh", "-c", "echo fine"]).stdout == "fine\n"


@pytest.mark.parametrize("shape", list(SHAPES))
def test_such_a_tree_in_a_commands_work_dir_is_swept_and_the_next_command_runs(ex, shape):
    ws = ex.workspaces.new_workspace()
    res = cmd(ex, ws, make(shape, where='"$HOME"'))
    assert (res.status, res.exit_code) == ("exited", 0), res
    after = cmd(ex, ws, ["/bin/sh", "-c", 'ls -A "$HOME"; echo fine'])
    assert (after.status, after.stdout) == ("exited", "fine\n"), after
    Workspace(ws, base="").destroy()


def test_a_judged_function_that_builds_a_deep_tree_is_judged_and_the_next_job_runs(ex):
    code = MAKER.replace("name, levels = sys.argv[1], int(sys.argv[2])", "name, levels = 'd', 5000")
    res = ex.run(ExecJob(code=f"def f():\n    exec({code!r}, {{}})\n    return 1",
                         tests=["assert f() == 1"]))
    assert res.passed, res
    assert ex.run(ExecJob(code="def g(x): return x", tests=["assert g(2) == 2"])).passed


def test_resetting_a_workspace_with_such_trees_leaves_only_its_base(ex, tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "a.py").write_text("x = 1\n")
    ws = Workspace(ex.workspaces.new_workspace(), str(base))
    ws.reset()
    for shape in SHAPES:
        assert cmd(ex, ws.path, make(shape)).exit_code == 0
    ws.reset()
    assert os.listdir(ws.path) == ["a.py"]
    ws.destroy()
    assert not os.path.lexists(ws.path)


@pytest.fixture
def immutable():
    """chattr +i on a path (undone after): a file even root cannot chown, the stand-in for
    a workspace the sandbox cannot hand over (a job has no capability to make one)."""
    if os.geteuid() != 0 or not shutil.which("chattr"):
        pytest.skip("not root or no chattr: no file root cannot chown can be made here")
    made = []

    def make_immutable(path: str) -> None:
        if subprocess.run(["chattr", "+i", path], capture_output=True).returncode != 0:
            pytest.skip(f"the file system of {path} refuses chattr +i")
        made.append(path)

    yield make_immutable
    for path in made:
        subprocess.run(["chattr", "-i", path], capture_output=True)


def test_a_workspace_that_cannot_be_handed_over_is_that_commands_error(ex, immutable):
    ws, other = ex.workspaces.new_workspace(), ex.workspaces.new_workspace()
    os.makedirs(os.path.join(ws, "pkg"))
    stuck = os.path.join(ws, "pkg", "stuck.txt")
    open(stuck, "w").close()
    immutable(stuck)
    res = cmd(ex, ws, ["/bin/sh", "-c", "echo ran > ran.txt"])
    assert res.status == "workspace_error" and res.exit_code is None, res
    assert re.search(r"cannot hand the workspace over: .*Operation not permitted", res.stderr)
    assert not os.path.exists(os.path.join(ws, "ran.txt"))  # it did not run
    assert cmd(ex, other, ["/bin/sh", "-c", "echo fine"]).stdout == "fine\n"  # the slot lives
    subprocess.run(["chattr", "-i", stuck], check=True)
    assert cmd(ex, ws, ["/bin/sh", "-c", "echo ran"]).stdout == "ran\n"
    Workspace(ws, base="").destroy()
    assert not os.path.lexists(ws)


@pytest.mark.slow
def test_this_file_passes_as_an_ordinary_user():
    skip_unless_ordinary_user_can_run(
        "not root: this run already is an ordinary user's",
        "this machine allows no unprivileged user namespace",
    )
    proc, collected = run_as_ordinary_user(
        "codeloop-deep-trees-nonroot-", ["_nonroot.py"], ["test_sandbox_deep_trees.py"])
    out = tail(proc)
    assert proc.returncode == 0 and "failed" not in out, out
    want = re.search(r"(\d+)(?:/\d+)? tests? collected", collected)  # docker's deselected
    skipped = re.findall(r"SKIPPED \[\d+\] [^:]+:\d+: (.*)", out)
    assert all(s.startswith("not root") for s in skipped), skipped
    assert want and re.search(rf"\b{int(want[1]) - len(skipped)} passed", out), out
