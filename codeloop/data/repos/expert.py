"""A scripted expert: the tool calls that solve a repository task, for SFT demonstrations.

It is an expert because it may read the task's reference patch to know the fix; it acts
only through the agent's own tools (schema.TOOLS), in the order a careful person would:
run the tests, read the module the failing test exercises, search for the function the
fix lies in when that is another module and read that module too, make the exact edit,
re-run the tests, submit. Every edit's ``old`` text is on screen when it is written: an
expert that edits code it never read teaches a model to invent the text it replaces
(SFT'd policies did exactly that on cross-module tasks).
The agentloop stage plays these calls through the real environment to record real
observations; nothing here fakes one.
"""

from __future__ import annotations

import re
from pathlib import Path

from codeloop.data.repos.diffs import apply_file_diff, hunks, split_files
from codeloop.data.repos.store import snapshot_path
from codeloop.schema import Task


def _buggy_text(task: Task, repos_dir: str | Path, path: str) -> str:
    """The file as the agent's workspace holds it: the snapshot's with bug_patch applied."""
    text = (snapshot_path(repos_dir, task.snapshot) / path).read_text()
    bug = split_files(task.bug_patch).get(path)
    return apply_file_diff(text, bug) if bug else text


def _edit_strings(hunk: list[str], base: str | None) -> tuple[str, str]:
    """(old, new) for ``edit``: the changed lines, widened by context lines of the hunk
    until ``old`` occurs exactly once in ``base`` (the whole hunk when base is unknown)."""
    body = [x for x in hunk if x[:1] in (" ", "-", "+")]
    changed = [i for i, x in enumerate(body) if x[0] != " "]
    lo, hi = changed[0], changed[-1] + 1

    def sides(a: int, b: int) -> tuple[str, str]:
        part = body[a:b]
        old = "".join(x[1:] for x in part if x[0] in " -")
        new = "".join(x[1:] for x in part if x[0] in " +")
        return old.rstrip("\n"), new.rstrip("\n")

    if base is None:
        return sides(0, len(body))
    while True:
        old, new = sides(lo, hi)
        if old and base.count(old) == 1 or (lo == 0 and hi == len(body)):
            return old, new
        if lo > 0 and (hi == len(body) or (changed[0] - lo) <= (hi - changed[-1] - 1)):
            lo -= 1
        else:
            hi += 1


def _pattern(function: str, lines: list[str]) -> str:
    """What to search for: the function the fix lies in when the task knows it, else the
    first line the fix removes (SWE-bench rows name no function)."""
    if function:
        return f"def {function}"  # names are unique in a synthetic package; no regex escape
    removed = next((x[1:].strip() for x in lines if x.startswith("-") and not x.startswith("---")
                    and x[1:].strip()), "")  # fmt: skip
    return re.escape(removed[:60]) if removed else "def "


def _module_of(node_id: str, task: Task) -> str:
    """The product module a failing test exercises (what a person opens first)."""
    return task.metadata.get("symptom_path") or node_id.split("::", 1)[0]


def expert_calls(task: Task, repos_dir: str | Path | None = None) -> list[dict]:
    """Tool calls ``{"tool": ..., "args": {...}}`` that solve ``task`` with its reference patch.

    With ``repos_dir`` the edits are the smallest unique ones (the base file is read from
    the snapshot); without it each edit replaces a whole hunk of the patch."""
    files = split_files(task.patch)
    if not files:
        raise ValueError(f"task {task.task_id}: reference patch names no file")
    symptom = _module_of(task.fail_to_pass[0] if task.fail_to_pass else "", task)
    calls: list[dict] = [{"tool": "run_tests", "args": {}}]
    calls.append({"tool": "read_file", "args": {"path": symptom}})
    function = task.metadata.get("mutation", {}).get("function", "").rsplit(".", 1)[-1]
    for path, lines in files.items():
        if path != symptom:
            calls.append({"tool": "search", "args": {"pattern": _pattern(function, lines)}})
            calls.append({"tool": "read_file", "args": {"path": path}})
        base = _buggy_text(task, repos_dir, path) if repos_dir is not None else None
        for hunk in hunks(lines):
            old, new = _edit_strings(hunk, base)
            calls.append({"tool": "edit", "args": {"path": path, "old": old, "new": new}})
    calls.append({"tool": "run_tests", "args": {}})
    calls.append({"tool": "submit", "args": {}})
    return calls
