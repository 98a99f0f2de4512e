"""SWE-bench-format instances (``instances.jsonl``) with local clones, as repository tasks.

Each row names ``repo`` (owner/name), whose clone is ``<clones_dir>/owner__name``; the
tree at ``base_commit`` is exported with ``git archive`` (the tree only: no ``.git``, so
no future history reaches a workspace) and stored content-addressed. SWE-bench's base is
the buggy tree itself, so ``bug_patch`` is empty; ``test_patch`` adds the tests
FAIL_TO_PASS names and ``patch`` is the reference fix. Whether FAIL_TO_PASS fails before
and passes after ``patch`` is the clean stage's executability filter (a drop with its
reason); rows that cannot even be built (no clone, unknown commit, malformed fields) are
quarantined with file, row, field and reason.
"""

from __future__ import annotations

import io as _io
import json
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

from codeloop.data.repos import store
from codeloop.data.repos.checks import RepoLoad, check_repo_task
from codeloop.data.validate import SourceError, iter_records, quarantine_row
from codeloop.schema import Task

_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{7,40}$")


class _Bad(ValueError):
    def __init__(self, field: str, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


def _text(rec: dict, name: str, required: bool = True) -> str:
    v = rec.get(name)
    if v is None or v == "":
        if required:
            raise _Bad(name, f"missing field {name!r}")
        return ""
    if not isinstance(v, str):
        raise _Bad(name, f"wrong JSON type: expected string, found {type(v).__name__}")
    return v


def _ids(rec: dict, name: str) -> list[str]:
    """SWE-bench stores the test lists as JSON strings (or plain lists in some dumps)."""
    v = rec.get(name, [])
    if isinstance(v, str):
        try:
            v = json.loads(v) if v.strip() else []
        except json.JSONDecodeError as exc:
            raise _Bad(name, f"{name} is not a JSON list: {exc}") from None
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _Bad(name, f"{name} must be a list of strings")
    return v


def export_tree(clone: Path, commit: str, dest: Path) -> None:
    """Write the tree of ``commit`` (and nothing of its history) under ``dest``."""
    proc = subprocess.run(["git", "-C", str(clone), "archive", "--format=tar", commit],
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise _Bad("base_commit", f"commit {commit} is not in {clone.name}: "
                   f"{proc.stderr.decode(errors='replace').strip()[:200]}")
    with tarfile.open(fileobj=_io.BytesIO(proc.stdout)) as tar:
        tar.extractall(dest, filter="data")


def _task(rec: dict, row: int, clones_dir: Path, repos_dir, cache: dict) -> Task:
    iid = _text(rec, "instance_id")
    repo = _text(rec, "repo")
    if not _REPO.match(repo):
        raise _Bad("repo", f"repo must be owner/name, found {repo!r}")
    commit = _text(rec, "base_commit")
    if not _COMMIT.match(commit):
        raise _Bad("base_commit", f"not a commit id: {commit!r}")
    clone = clones_dir / repo.replace("/", "__")
    if not (clone / ".git").exists() and not (clone / "HEAD").exists():
        raise _Bad("repo", f"no local clone {clone.name} under {clones_dir}")
    f2p, p2p = _ids(rec, "FAIL_TO_PASS"), _ids(rec, "PASS_TO_PASS")
    if (clone, commit) not in cache:
        with tempfile.TemporaryDirectory(prefix="codeloop-swebench-") as tmp:
            export_tree(clone, commit, Path(tmp))
            cache[(clone, commit)] = store.store_snapshot(tmp, repos_dir)
    return Task(
        task_id=iid,
        source="swebench",
        prompt=_text(rec, "problem_statement"),
        kind="repo",
        repo=repo,
        snapshot=cache[(clone, commit)],
        patch=_text(rec, "patch"),
        test_patch=_text(rec, "test_patch", required=False),
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        visible_tests=sorted({*f2p, *p2p}),
        environment=_text(rec, "codeloop_environment", required=False),
        metadata={
            "license": _text(rec, "license", required=False) or "unknown",
            "provenance": {"base_commit": commit, "version": str(rec.get("version", ""))},
        },
    )


def load_swebench(path: str, clones_dir: str, repos_dir):
    """Instances of a SWE-bench-format file as checked repository tasks (RepoLoad)."""

    if not clones_dir:
        raise SourceError("swebench: set clean.repos_dir to the dir of local clones (owner__name)")
    res, cache = RepoLoad(), {}
    for row, rec, bad in iter_records(path, "swebench"):
        res.rows_in += 1
        if bad is not None:
            res.quarantine_rows.append(bad)
            continue
        try:
            task = _task(rec, row, Path(clones_dir), repos_dir, cache)
        except _Bad as exc:
            res.quarantine_rows.append(quarantine_row("swebench", path, row, exc.field, exc.reason, rec))
            continue
        task.metadata["provenance"].update({"file": Path(path).name, "row": row})
        problem = check_repo_task(task, repos_dir)
        if problem:
            res.quarantine_rows.append(quarantine_row("swebench", path, row, *problem, rec))
        else:
            res.tasks.append(task)
    return res
