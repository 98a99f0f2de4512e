"""SWE-bench-format instances (``instances.jsonl``) with local clones, as repository tasks.

Each row names ``repo`` (owner/name), whose clone is ``<clones_dir>/owner__name``; the
tree at ``base_commit`` is exported with ``git archive`` (the tree only: no ``.git``, so
no future history reaches a workspace) and stored content-addressed. SWE-bench's base is
the buggy tree itself, so ``bug_patch`` is empty; ``test_patch`` adds the tests
FAIL_TO_PASS names and ``patch`` is the reference fix. Whether FAIL_TO_PASS fails before
and passes after ``patch`` is the clean stage's executability filter (a drop with its
reason); rows that cannot even be built (no clone, unknown commit, malformed fields) are
quarantined with file, row, field and reason.

SWE-Gym rows are SWE-bench rows (``version`` and ``environment_setup_commit`` may be
absent: neither is read). SWE-smith rows carry an ``image_name`` and no ``test_patch``:
their ``patch`` plants the bug in the tree at ``base_commit`` (or the commit their
``repo``/``instance_id`` name ends with, ``owner__name.<commit>``), whose tests already
hold FAIL_TO_PASS. That is codeloop's minted layout: the tree is the snapshot, the patch
is ``bug_patch`` and the reference fix is its reverse; the image name is kept in the
provenance. Columns and types: codeloop.data.repos.swebench_rows.
"""

from __future__ import annotations

import io as _io
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from codeloop.agent.patches import PatchError, apply_patch, unified_diff
from codeloop.data.repos import store
from codeloop.data.repos.checks import RepoLoad, check_repo_task
from codeloop.data.repos.swebench_rows import RowError, from_swebench, id_list, text
from codeloop.data.validate import SourceError, iter_records, quarantine_row
from codeloop.schema import Task

_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{7,40}$")


def export_tree(clone: Path, commit: str, dest: Path) -> None:
    """Write the tree of ``commit`` (and nothing of its history) under ``dest``."""
    proc = subprocess.run(["git", "-C", str(clone), "archive", "--format=tar", commit],
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise RowError("base_commit", f"commit {commit} is not in {clone.name}: "
                   f"{proc.stderr.decode(errors='replace').strip()[:200]}")
    with tarfile.open(fileobj=_io.BytesIO(proc.stdout)) as tar:
        tar.extractall(dest, filter="data")


def _smith_commit(rec: dict, repo: str) -> str:
    """The commit a SWE-smith row's bug patch applies to: ``base_commit`` when given, else
    the ``.<commit>`` suffix of its repository name (``swesmith/owner__name.1a2b3c4d``) or
    of its instance id (``owner__name.1a2b3c4d.op_name__x``)."""
    given = text(rec, "base_commit", required=False)
    if given:
        return given
    for part in (repo.rsplit("/", 1)[-1].rsplit(".", 1)[-1],
                 *text(rec, "instance_id").split(".")[1:2]):
        if _COMMIT.match(part):
            return part
    raise RowError("base_commit", "missing field 'base_commit' (and no .<commit> in repo or "
                   "instance_id)")


def _clone(clones_dir: Path, repo: str) -> Path:
    """The local clone of ``repo``: ``owner__name``, or for a SWE-smith mirror name
    (``swesmith/owner__name.<commit>``) ``owner__name.<commit>`` or ``owner__name``."""
    name = repo.rsplit("/", 1)[-1]
    for cand in (repo.replace("/", "__"), name, name.rsplit(".", 1)[0]):
        clone = clones_dir / cand
        if (clone / ".git").exists() or (clone / "HEAD").exists():
            return clone
    raise RowError("repo", f"no local clone {repo.replace('/', '__')} under {clones_dir}")


def _reverse(snapshot: Path, bug_patch: str) -> str:
    """The fix of a bug patch: the diff from the tree with it applied back to the snapshot."""
    with tempfile.TemporaryDirectory(prefix="codeloop-swesmith-") as tmp:
        buggy = Path(tmp, "tree")
        shutil.copytree(snapshot, buggy, symlinks=True)
        try:
            apply_patch(str(buggy), bug_patch)
        except PatchError as exc:
            raise RowError("patch", f"the bug patch does not apply to the base: {exc}") from None
        return unified_diff(str(buggy), str(snapshot))


def _task(rec: dict, clones_dir: Path, repos_dir, cache: dict) -> Task:
    repo = text(rec, "repo")
    if not _REPO.match(repo):
        raise RowError("repo", f"repo must be owner/name, found {repo!r}")
    # SWE-smith's rows (an image_name, no test_patch): ``patch`` plants the bug in a tree
    # whose tests already hold FAIL_TO_PASS, so the base is that tree plus the patch
    smith = bool(rec.get("image_name")) and not rec.get("test_patch")
    commit = _smith_commit(rec, repo) if smith else text(rec, "base_commit")
    if not _COMMIT.match(commit):
        raise RowError("base_commit", f"not a commit id: {commit!r}")
    clone = _clone(clones_dir, repo)
    for name in ("instance_id", "problem_statement"):
        text(rec, name)  # a missing field is named before any tree is built
    for name in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        id_list(rec, name)
    if (clone, commit) not in cache:
        with tempfile.TemporaryDirectory(prefix="codeloop-swebench-") as tmp:
            export_tree(clone, commit, Path(tmp))
            cache[(clone, commit)] = store.store_snapshot(tmp, repos_dir)
    sha = cache[(clone, commit)]
    row = dict(rec)
    if smith:
        bug = text(rec, "patch")
        row.update(codeloop_bug_patch=bug,
                   patch=_reverse(store.snapshot_path(repos_dir, sha), bug))
    else:  # a test patch that does not apply would stop the clean stage's verification
        try:
            apply_patch(str(store.snapshot_path(repos_dir, sha)),
                        text(rec, "test_patch", required=False), check=True)
        except PatchError as exc:
            raise RowError("test_patch", f"the test patch does not apply to the base: {exc}"
                           ) from None
    task = from_swebench(row, snapshot=sha, source="swebench")
    prov = task.metadata.setdefault("provenance", {})
    prov["base_commit"] = commit
    if smith:
        prov["image_name"] = str(rec["image_name"])
    return task


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
            task = _task(rec, Path(clones_dir), repos_dir, cache)
        except RowError as exc:
            res.quarantine_rows.append(quarantine_row("swebench", path, row, exc.field, exc.reason, rec))
            continue
        task.metadata["provenance"].update({"file": Path(path).name, "row": row})
        problem = check_repo_task(task, repos_dir)
        if problem:
            res.quarantine_rows.append(quarantine_row("swebench", path, row, *problem, rec))
        else:
            res.tasks.append(task)
    return res
