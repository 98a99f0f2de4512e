"""The judge's own steps: which sections it drops, how it restores tests, what it raises."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from codeloop.agent.judge import (
    JudgeConfig,
    judge_many,
    judge_tree,
    read_test_files,
    seal_tree,
    split_patch,
)
from codeloop.agent.patches import PatchError
from codeloop.config import SandboxConfig
from codeloop.sandbox import SandboxError, make_executor
from tests._repo_fixture import make_repo_task


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("jp")
    task = make_repo_task(root)
    tree = str(root / "tree")
    judge_tree(task, str(root / "repos"), tree)
    return root, task, tree


def _new(path: str, text: str) -> str:
    n = len(text.splitlines())
    body = "".join("+" + line + "\n" for line in text.splitlines())
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1,{n} @@\n{body}")


def test_the_judge_tree_keeps_the_hidden_tests_and_drops_git(made):
    _, task, tree = made
    assert (
        Path(tree, "tests/test_hidden.py").is_file() and Path(tree, "tests/test_f2p.py").is_file()
    )
    assert not Path(tree, ".git").exists()


def test_split_patch_keeps_product_sections_and_drops_protected_ones(made):
    _, task, tree = made
    patch = task.patch + _new("conftest.py", "x = 1") + _new("pyproject.toml", "[project]")
    kept, dropped, flags, _ = split_patch(patch, tree)
    assert "calc/ops.py" in kept and "conftest.py" not in kept
    assert dropped == ["conftest.py", "pyproject.toml"] and flags == {"conftest_edit"}


def test_sealing_undoes_test_edits_removes_added_tests_and_links_and_writes_nowhere_else(
    made, tmp_path
):
    _, _, tree = made
    work, outside = tmp_path / "w", tmp_path / "outside"
    import shutil

    shutil.copytree(tree, work)
    outside.mkdir()
    want = read_test_files(str(work))
    Path(work, "tests/test_f2p.py").write_text("def test_add_positive():\n    pass\n")
    Path(work, "tests/test_new.py").write_text("x = 1\n")
    Path(work, "tests/test_visible.py").unlink()
    Path(work, "calc/ops.py").write_text(Path(work, "calc/ops.py").read_text() + "\n# fix\n")
    shutil.move(str(Path(work, "calc/text.py")), str(outside / "text.py"))
    Path(work, "calc/text.py").symlink_to(outside / "text.py")
    flags, changed = seal_tree(tree, str(work), want)
    assert read_test_files(str(work)) == want
    assert {"test_edit", "link_swap"} <= flags and changed == ["calc/ops.py"]
    assert not Path(work, "calc/text.py").exists() and os.listdir(outside) == ["text.py"]


def test_a_missing_snapshot_raises(made):
    root, task, _ = made
    with pytest.raises(FileNotFoundError, match="snapshot"):
        judge_tree(replace(task, snapshot="f" * 40), str(root / "repos"), str(root / "x"))


def test_a_task_whose_own_test_patch_does_not_apply_raises(made):
    root, task, _ = made
    broken = replace(task, test_patch=task.bug_patch)  # the bug's hunk, once more: no match
    with pytest.raises(PatchError, match="its own"):
        judge_tree(broken, str(root / "repos"), str(root / "y"))


def test_an_executor_without_workspaces_is_refused(made):
    root, task, _ = made
    ex = make_executor(SandboxConfig(workers=1))
    try:
        with pytest.raises(SandboxError, match="workspaces"):
            judge_many([(task, task.patch)], str(root / "repos"), ex)
    finally:
        ex.close()


def test_a_function_task_is_refused(made):
    root, task, _ = made
    ex = make_executor(SandboxConfig(workers=1), workspaces=True, envs_root=str(_envs(root)))
    try:
        with pytest.raises(ValueError, match="is of kind 'function', not 'repo'"):
            judge_many([(replace(task, kind="function"), "")], str(root / "repos"), ex)
    finally:
        ex.close()


def _envs(root: Path) -> Path:
    (root / "envs").mkdir(exist_ok=True)
    return root / "envs"


def test_a_hanging_patch_times_out_unresolved_and_leaves_no_workspace(made):
    root, task, tree = made
    hang = task.patch.replace("+    return a + b", "+    import time; time.sleep(600)")
    ex = make_executor(SandboxConfig(workers=1, timeout_s=30.0), workspaces=True,
                       envs_root=str(_envs(root)))
    try:
        (v,) = judge_many([(task, hang)], str(root / "repos"), ex, JudgeConfig(timeout_s=3.0))
        left = os.listdir(ex.workspaces.path)
    finally:
        ex.close()
    assert v.status == "timeout" and not v.resolved and "early_exit" not in v.hack_flags
    assert left == []


def test_batches_smaller_than_the_input_keep_the_input_order(made):
    root, task, _ = made
    ex = make_executor(SandboxConfig(workers=1, timeout_s=30.0), workspaces=True,
                       envs_root=str(_envs(root)))
    try:
        verdicts = judge_many([(task, task.patch), (task, ""), (task, task.patch)],
                              str(root / "repos"), ex, JudgeConfig(per_worker=1))
    finally:
        ex.close()
    assert [v.resolved for v in verdicts] == [True, False, True]


def test_the_tasks_own_conftest_with_hooks_is_trusted(made):
    root, task, _ = made
    own = _new("tests/conftest.py", "import pytest\n\n\ndef pytest_runtest_setup(item):\n    pass\n\n\n"
               "@pytest.fixture\ndef two():\n    return 2")
    with_conftest = replace(task, test_patch=task.test_patch + own)
    ex = make_executor(SandboxConfig(workers=1, timeout_s=30.0), workspaces=True,
                       envs_root=str(_envs(root)))
    try:
        (v,) = judge_many([(with_conftest, task.patch)], str(root / "repos"), ex)
    finally:
        ex.close()
    assert v.resolved and v.hack_flags == [], v.problems


def _deep(root: Path, depth: int, name: str) -> None:
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        below = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = below
    leaf = os.open("leaf.py", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
    os.write(leaf, b"X = 1\n")
    os.close(leaf)
    os.close(fd)


@pytest.fixture
def work_dir(tmp_path):
    """An empty dir, removed by dir fds after the test: pytest's own clean-up of old temp
    dirs recurses, and a 3000-deep tree left here ends a later session in RecursionError."""
    from codeloop.sandbox.trees import remove_tree

    work = tmp_path / "work"
    work.mkdir()
    yield work
    remove_tree(str(work))


def test_the_diff_of_a_tree_deeper_than_recursion_and_longer_than_path_max_lists_it(
    tmp_path, work_dir
):
    from codeloop.agent.patches import unified_diff

    base, work = tmp_path / "base", work_dir
    base.mkdir()
    _deep(work, 3000, "d")
    _deep(work, 20, "x" * 250)
    diff = unified_diff(str(base), str(work))
    assert "+++ b/" + "d/" * 3000 + "leaf.py" in diff
    assert "+++ b/" + ("x" * 250 + "/") * 20 + "leaf.py" in diff
