"""Repository tasks as SWE-bench instance rows and back (pure: no files, no git).

SWE-bench's columns, with SWE-bench's types (every value a string; FAIL_TO_PASS and
PASS_TO_PASS are JSON-encoded lists, as in the HF datasets):

==========================  ===========================================================
SWE-bench column            codeloop task field
==========================  ===========================================================
instance_id                 task_id
repo                        repo
base_commit                 snapshot (the content hash of the stored pristine tree)
patch                       patch (the reference fix)
test_patch                  test_patch (turns the base into the tree the tests run on)
problem_statement           prompt
hints_text                  metadata["hints_text"] ("" when none)
created_at                  metadata["created_at"] ("" when none)
version                     metadata provenance "version"; else the snapshot's first 12
                            hex digits (tasks cut from one tree share an environment,
                            which is what SWE-bench's version groups)
FAIL_TO_PASS                fail_to_pass (JSON string)
PASS_TO_PASS                pass_to_pass (JSON string)
environment_setup_commit    environment (the env dir name or docker image); the
                            snapshot when the task needs no env beyond pytest's
==========================  ===========================================================

Departure from SWE-bench: a minted or synthetic task's base is the snapshot *plus*
``bug_patch`` (SWE-smith's layout: one pristine tree per repository, a bug patch per
task), so the rows carry ``codeloop_bug_patch`` beside the SWE-bench columns; a tool
that checks out ``base_commit`` applies it first, as SWE-smith's own harness applies its
bug patches. The other ``codeloop_*`` columns (visible and hidden tests, source,
difficulty, metadata, environment) make ``from_swebench(to_swebench(t)) == t``.
"""

from __future__ import annotations

import json
from typing import Any

from codeloop.schema import Task

SWEBENCH_COLUMNS = (
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
)
CODELOOP_COLUMNS = (
    "codeloop_bug_patch",
    "codeloop_environment",
    "codeloop_visible_tests",
    "codeloop_hidden_tests",
    "codeloop_source",
    "codeloop_difficulty",
    "codeloop_metadata",
)


class RowError(ValueError):
    """A SWE-bench row that is not a task; ``field`` names the column at fault."""

    def __init__(self, field: str, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


def to_swebench(task: Task) -> dict[str, str]:
    """The SWE-bench instance row of a repository task (every value a string)."""
    if task.kind != "repo":
        raise ValueError(f"task {task.task_id}: kind {task.kind!r} has no SWE-bench row")
    meta = task.metadata or {}
    version = str((meta.get("provenance") or {}).get("version") or "") or task.snapshot[:12]
    return {
        "repo": task.repo,
        "instance_id": task.task_id,
        "base_commit": task.snapshot,
        "patch": task.patch,
        "test_patch": task.test_patch,
        "problem_statement": task.prompt,
        "hints_text": str(meta.get("hints_text", "")),
        "created_at": str(meta.get("created_at", "")),
        "version": version,
        "FAIL_TO_PASS": json.dumps(list(task.fail_to_pass)),
        "PASS_TO_PASS": json.dumps(list(task.pass_to_pass)),
        "environment_setup_commit": task.environment or task.snapshot,
        "codeloop_bug_patch": task.bug_patch,
        "codeloop_environment": task.environment,
        "codeloop_visible_tests": json.dumps(list(task.visible_tests)),
        "codeloop_hidden_tests": json.dumps(list(task.hidden_tests)),
        "codeloop_source": task.source,
        "codeloop_difficulty": str(task.difficulty),
        "codeloop_metadata": json.dumps(meta, sort_keys=True),
    }


def text(row: dict[str, Any], name: str, required: bool = True) -> str:
    """Column ``name`` as a string; RowError when it is required and missing or not text."""
    v = row.get(name)
    if v is None or v == "":
        if required:
            raise RowError(name, f"missing field {name!r}")
        return ""
    if not isinstance(v, str):
        raise RowError(name, f"wrong JSON type: expected string, found {type(v).__name__}")
    return v


def id_list(row: dict[str, Any], name: str) -> list[str]:
    """A test-id column: a JSON-encoded list (SWE-bench's HF layout) or a plain list
    (SWE-smith and some dumps); missing is empty."""
    v = row.get(name)
    if v is None:
        return []
    if isinstance(v, str):
        try:
            v = json.loads(v) if v.strip() else []
        except json.JSONDecodeError as exc:
            raise RowError(name, f"{name} is not a JSON list: {exc}") from None
    if hasattr(v, "tolist"):  # a list column read back from Parquet (numpy array)
        v = v.tolist()
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise RowError(name, f"{name} must be a list of strings")
    return v


def _metadata(row: dict[str, Any]) -> dict[str, Any]:
    raw = text(row, "codeloop_metadata", required=False)
    if not raw:
        return {}
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RowError("codeloop_metadata", f"not a JSON object: {exc}") from None
    if not isinstance(meta, dict):
        raise RowError("codeloop_metadata", "not a JSON object")
    return meta


def from_swebench(row: dict[str, Any], snapshot: str = "", source: str = "swebench") -> Task:
    """The repository task of a SWE-bench row. ``snapshot``: the stored tree of
    ``base_commit`` (a loader that exported it from a clone); default ``base_commit``
    itself, which is the snapshot for rows ``to_swebench`` wrote. Visible tests default
    to FAIL_TO_PASS and PASS_TO_PASS. RowError names the column of a bad value."""
    f2p, p2p = id_list(row, "FAIL_TO_PASS"), id_list(row, "PASS_TO_PASS")
    meta = _metadata(row)
    if not meta:
        meta = {
            "license": text(row, "license", required=False) or "unknown",
            "provenance": {
                "base_commit": text(row, "base_commit", required=False),
                "version": str(row.get("version") or ""),
            },
        }
        for name in ("hints_text", "created_at"):
            if row.get(name):
                meta[name] = str(row[name])
    visible = (
        id_list(row, "codeloop_visible_tests")
        if "codeloop_visible_tests" in row
        else sorted({*f2p, *p2p})
    )
    difficulty = text(row, "codeloop_difficulty", required=False) or "-1"
    try:
        level = int(difficulty)
    except ValueError:
        raise RowError("codeloop_difficulty", f"not an integer: {difficulty!r}") from None
    return Task(
        task_id=text(row, "instance_id"),
        source=text(row, "codeloop_source", required=False) or source,
        prompt=text(row, "problem_statement"),
        kind="repo",
        repo=text(row, "repo"),
        snapshot=snapshot or text(row, "base_commit"),
        bug_patch=text(row, "codeloop_bug_patch", required=False),
        patch=text(row, "patch"),
        test_patch=text(row, "test_patch", required=False),
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        visible_tests=visible,
        hidden_tests=id_list(row, "codeloop_hidden_tests"),
        difficulty=level,
        environment=text(row, "codeloop_environment", required=False),
        metadata=meta,
    )
