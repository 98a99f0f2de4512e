"""What every repository task must satisfy before it enters the pipeline, and the result
type of a repository source (shared by codeloop.data.repos.load and .swebench)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeloop.data.repos import store
from codeloop.data.repos.diffs import split_files
from codeloop.sandbox.env_trust import name_problem
from codeloop.schema import Task


@dataclass
class RepoLoad:
    """Tasks of one repository source, its quarantined rows and its row count (the
    fields of codeloop.data.loaders.LoadResult, which wraps it: loaders imports this)."""

    tasks: list[Task] = field(default_factory=list)
    quarantine_rows: list[dict[str, Any]] = field(default_factory=list)
    rows_in: int = 0


_NODE = re.compile(r"^[^\s:][^:]*\.py::\S.*$")


def check_repo_task(task: Task, repos_dir: str | Path | None = None) -> tuple[str, str] | None:
    """``(field, reason)`` for the first problem of a repository task, or None if sound."""
    if not task.task_id:
        return "task_id", "missing task_id"
    if task.kind != "repo":
        return "kind", f"expected kind 'repo', found {task.kind!r}"
    if not task.prompt.strip():
        return "prompt", "empty problem statement"
    if not task.snapshot:
        return "snapshot", "missing snapshot"
    if task.environment and name_problem(task.environment):
        return "environment", name_problem(task.environment)
    if repos_dir is not None:
        try:
            store.snapshot_path(repos_dir, task.snapshot)
        except store.SnapshotError as exc:
            return "snapshot", str(exc)
    for name in ("patch", "bug_patch", "test_patch"):
        text = getattr(task, name)
        if (text or name == "patch") and not split_files(text):
            return name, f"{name} is not a git-style diff (no 'diff --git' header)"
    if not task.fail_to_pass:
        return "fail_to_pass", "no FAIL_TO_PASS test"
    for name in ("fail_to_pass", "pass_to_pass", "visible_tests", "hidden_tests"):
        for i, node in enumerate(getattr(task, name)):
            if not isinstance(node, str) or not _NODE.match(node):
                return f"{name}[{i}]", f"not a pytest node id (path.py::name): {node!r}"
    if set(task.fail_to_pass) & set(task.pass_to_pass):
        return "pass_to_pass", "a test is in both FAIL_TO_PASS and PASS_TO_PASS"
    if set(task.hidden_tests) & set(task.visible_tests):
        return "hidden_tests", "a test is both visible and hidden"
    hidden_files = {h.split("::")[0] for h in task.hidden_tests}
    shown = {v.split("::")[0] for v in task.visible_tests}
    if hidden_files & shown:
        return "hidden_tests", f"hidden tests share a file with visible ones: {sorted(hidden_files & shown)}"
    return None
