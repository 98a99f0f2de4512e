"""Workspaces hold the task's base and nothing more; diffs and patches round-trip."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from codeloop.agent.patches import PatchError, apply_patch, is_test_path, unified_diff
from codeloop.agent.workspace import BaseCache, Workspace, materialize_base
from tests._repo_fixture import GOLD_EDIT, make_repo_task


@pytest.fixture
def task_and_repos(tmp_path):
    return make_repo_task(tmp_path / "src"), str(tmp_path / "src" / "repos")


def _mk(root: Path, counter) -> str:
    path = root / f"ws{next(counter)}"
    path.mkdir(parents=True)
    return str(path)


def test_the_base_holds_the_bug_and_the_added_tests(task_and_repos, tmp_path):
    task, repos = task_and_repos
    materialize_base(task, repos, str(tmp_path / "base"))
    assert GOLD_EDIT[1] in (tmp_path / "base" / GOLD_EDIT[0]).read_text()
    assert (tmp_path / "base" / "tests" / "test_f2p.py").exists()


def test_the_base_holds_no_hidden_test_file(task_and_repos, tmp_path):
    task, repos = task_and_repos
    materialize_base(task, repos, str(tmp_path / "base"))
    assert not (tmp_path / "base" / "tests" / "test_hidden.py").exists()


def test_the_base_holds_no_git_history(task_and_repos, tmp_path):
    task, repos = task_and_repos
    assert (Path(repos) / task.snapshot / ".git").is_dir()  # the store has it
    materialize_base(task, repos, str(tmp_path / "base"))
    assert not list((tmp_path / "base").rglob(".git"))


def test_a_workspace_diff_is_the_edit_without_test_files(task_and_repos, tmp_path):
    task, repos = task_and_repos
    ws = Workspace.create(
        task, BaseCache(repos, str(tmp_path / "c")), lambda: _mk(tmp_path, iter([0]))
    )
    path, old, new = GOLD_EDIT
    f = Path(ws.path, path)
    f.write_text(f.read_text().replace(old, new))
    Path(ws.path, "tests", "test_visible.py").write_text("def test_x():\n    pass\n")
    Path(ws.path, "calc", "extra.py").write_text("X = 1\n")
    os.unlink(Path(ws.path, "calc", "text.py"))
    diff = ws.diff()
    assert "b/calc/ops.py" in diff and "new file mode 100644" in diff
    assert "deleted file mode 100644" in diff and "tests/" not in diff


def test_a_diff_applied_to_the_base_gives_the_workspace(tmp_path):
    base, work = tmp_path / "base", tmp_path / "work"
    base.mkdir()
    (base / "a.py").write_text("one\ntwo\nthree")  # no newline at the end
    (base / "gone.py").write_text("bye\n")
    shutil.copytree(base, work)
    (work / "a.py").write_text("one\n2\nthree\nfour\n")
    (work / "gone.py").unlink()
    (work / "pkg").mkdir()
    (work / "pkg" / "new.py").write_text("hello")
    (work / "run.sh").write_text("#!/bin/sh\n")
    (work / "run.sh").chmod(0o755)
    patch = unified_diff(str(base), str(work))
    copy = tmp_path / "copy"
    shutil.copytree(base, copy)
    apply_patch(str(copy), patch)
    assert unified_diff(str(copy), str(work)) == ""


def test_a_patch_that_does_not_apply_says_why(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    bad = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 2\n+x = 3\n"
    with pytest.raises(PatchError, match="a.py"):
        apply_patch(str(tmp_path), bad)


def test_a_patch_cannot_reach_outside_its_tree(tmp_path):
    (tmp_path / "tree").mkdir()
    evil = "diff --git a/../evil.py b/../evil.py\nnew file mode 100644\n--- /dev/null\n+++ b/../evil.py\n@@ -0,0 +1 @@\n+x\n"
    with pytest.raises(PatchError):
        apply_patch(str(tmp_path / "tree"), evil)
    assert not (tmp_path / "evil.py").exists()


def test_reset_brings_the_base_back(task_and_repos, tmp_path):
    task, repos = task_and_repos
    ws = Workspace.create(
        task, BaseCache(repos, str(tmp_path / "c")), lambda: _mk(tmp_path, iter([0]))
    )
    Path(ws.path, "calc", "ops.py").write_text("broken\n")
    Path(ws.path, "junk").mkdir()
    ws.reset()
    assert ws.diff() == "" and not Path(ws.path, "junk").exists()


def test_destroy_removes_even_what_the_agent_locked(task_and_repos, tmp_path):
    task, repos = task_and_repos
    ws = Workspace.create(
        task, BaseCache(repos, str(tmp_path / "c")), lambda: _mk(tmp_path, iter([0]))
    )
    Path(ws.path, "locked", "in").mkdir(parents=True)
    Path(ws.path, "locked").chmod(0)
    ws.destroy()
    assert not os.path.exists(ws.path)


@pytest.mark.parametrize(
    "path,is_test",
    [("tests/test_a.py", True), ("pkg/tests/helpers.py", True), ("test_x.py", True),
     ("pkg/a_test.py", True), ("conftest.py", True), ("pkg/conftest.py", True),
     ("pytest.ini", True), ("tox.ini", True), ("setup.cfg", True), ("pyproject.toml", True),
     ("pkg/testing_utils.py", False), ("pkg/ops.py", False), ("README.md", False),
     ("pkg/contest.py", False)],
)
def test_test_files_are_told_from_product_files(path, is_test):
    assert is_test_path(path) is is_test
