"""An episode's workspace: a private copy of the task's base tree, cheap to make and reset.

The base of a repository task is its stored snapshot (``repos_dir/<snapshot>/``) with the
task's ``bug_patch`` and then its ``test_patch`` applied, every hidden test file removed
and no ``.git`` at all (agents mine history for the fix). ``BaseCache`` materializes
each distinct (snapshot, bug_patch, test_patch, hidden files) once; a ``Workspace`` is a
plain copy of that cached base into a fresh unguessable dir the executor handed out (both
on /dev/shm where it is a tmpfs: cmdjobs.fast_tmp), so setting one up never starts a
container and costs a few ms for a small repository.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

from codeloop.agent.patches import apply_patch, is_test_path, unified_diff
from codeloop.sandbox import trees
from codeloop.sandbox.cmdjobs import fast_tmp, release_workspace
from codeloop.schema import Task


def node_file(node_id: str) -> str:
    """The file part of a pytest node id (``tests/test_a.py::test_x`` -> ``tests/test_a.py``)."""
    return node_id.split("::", 1)[0]


def hidden_files(task: Task) -> list[str]:
    """Files of the task's hidden tests; ValueError if a visible test lives in one of them
    (then hiding the file would hide the visible test, or showing it would show the hidden)."""
    hidden = {node_file(n) for n in task.hidden_tests}
    shared = hidden & {node_file(n) for n in task.visible_tests}
    if shared:
        raise ValueError(
            f"task {task.task_id}: hidden and visible tests share {sorted(shared)}; "
            "hidden tests must live in files of their own"
        )
    return sorted(hidden)


def _safe_rel(rel: str) -> str:
    norm = os.path.normpath(rel)
    if os.path.isabs(norm) or norm == ".." or norm.startswith("../"):
        raise ValueError(f"path {rel!r} leaves the tree")
    return norm


def materialize_base(task: Task, repos_dir: str, dest: str) -> None:
    """Build the task's base tree at ``dest`` (must not exist): snapshot copy without
    ``.git``, bug_patch, test_patch, hidden test files removed. PatchError if a patch fails."""
    src = os.path.join(repos_dir, task.snapshot)
    if not task.snapshot or not os.path.isdir(src):
        raise FileNotFoundError(
            f"task {task.task_id}: snapshot {task.snapshot!r} not in {repos_dir}"
        )
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    apply_patch(dest, task.bug_patch)
    apply_patch(dest, task.test_patch)
    for rel in hidden_files(task):
        path = os.path.join(dest, _safe_rel(rel))
        if os.path.lexists(path):
            os.unlink(path)
    for top, dirs, _ in os.walk(dest):  # a .git anywhere (a submodule's) goes too
        for d in [d for d in dirs if d == ".git"]:
            shutil.rmtree(os.path.join(top, d))
            dirs.remove(d)


def base_key(task: Task) -> str:
    """Content key of a task's base tree."""
    h = hashlib.sha256()
    for part in (task.snapshot, task.bug_patch, task.test_patch, "\0".join(hidden_files(task))):
        h.update(part.encode("utf-8", "surrogatepass") + b"\0\1")
    return h.hexdigest()[:32]


class BaseCache:
    """Materialized bases, one dir per ``base_key`` under ``cache_dir`` (made atomically)."""

    def __init__(self, repos_dir: str, cache_dir: str | None = None) -> None:
        self.repos_dir = repos_dir
        self.cache_dir = cache_dir or tempfile.mkdtemp(prefix="codeloop-bases-", dir=fast_tmp())
        os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)

    def get(self, task: Task) -> str:
        """The cached base dir of ``task`` (built on first use; never modified after)."""
        path = os.path.join(self.cache_dir, base_key(task))
        if os.path.isdir(path):
            return path
        tmp = tempfile.mkdtemp(prefix=".build-", dir=self.cache_dir)
        try:
            materialize_base(task, self.repos_dir, os.path.join(tmp, "tree"))
            try:
                os.rename(os.path.join(tmp, "tree"), path)
            except OSError:  # another process built it first
                if not os.path.isdir(path):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return path


def copy_tree(src: str, dest: str) -> None:
    """Copy the contents of ``src`` into the existing dir ``dest``. In-process: for a small
    tree on tmpfs a ``cp --reflink`` child costs more (fork + exec) than the copy itself."""
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True, copy_function=shutil.copy)


def remove_tree(path: str) -> None:
    """Remove a workspace (or anything in one) whatever the agent made of it: any depth,
    paths past PATH_MAX, links (removed, never followed), dirs it made unreadable
    (trees.remove_tree). A workspace that is a tmpfs of its own (a quota'd
    WorkspaceRoot's) is unmounted first: its files go with it, and its dir is left empty."""
    release_workspace(path)
    trees.remove_tree(path)


class Workspace:
    """One episode's tree at ``path`` (a dir from the executor's WorkspaceRoot)."""

    def __init__(self, path: str, base: str) -> None:
        self.path, self.base = path, base

    @classmethod
    def create(cls, task: Task, cache: BaseCache, new_dir) -> Workspace:
        """A workspace holding ``task``'s base; ``new_dir()`` gives a fresh empty dir."""
        ws = cls(new_dir(), cache.get(task))
        copy_tree(ws.base, ws.path)
        os.chmod(ws.path, 0o700)  # cp -a gave it the base's mode
        return ws

    def reset(self) -> None:
        """Back to the base: everything the episode changed is gone."""
        trees.empty_tree(self.path)
        copy_tree(self.base, self.path)
        os.chmod(self.path, 0o700)

    def diff(self) -> str:
        """The episode's edit: git-style diff base -> workspace, test files excluded."""
        return unified_diff(self.base, self.path, exclude=is_test_path)

    def destroy(self) -> None:
        remove_tree(self.path)
