"""Workspace operations: git/dvc calls, the workspace lock, and rollback to an iteration.

Every promoted iteration is one git commit tagged ``iter-NNNN`` holding dvc.lock,
params.yaml, history/ and metrics/ (docs/design.md, "Iterations without cycles"). Rolling
back is therefore: find the commit, ``git checkout`` its files, ``dvc checkout`` its
data and models. We restore *files* (``git checkout <commit> -- .``) rather than moving
HEAD, so the rollback is itself an ordinary commit-able change on the current branch.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

LOCK_PATH = Path(".dvc/tmp/codeloop-nightly.lock")


class WorkspaceError(RuntimeError):
    """The workspace is not in a state we may change (busy, dirty, unknown target)."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DVC_NO_ANALYTICS", "1")
    # dvc.yaml commands say `python -m flows.x`: make that the interpreter running us.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def git(repo: str | os.PathLike, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=_env())
    if check and proc.returncode != 0:
        raise WorkspaceError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def dvc_cmd(*args: str) -> list[str]:
    """The argv of a dvc command run with this interpreter's dvc."""
    return [sys.executable, "-m", "dvc", *args]


def dvc(repo: str | os.PathLike, *args: str) -> str:
    proc = subprocess.run(dvc_cmd(*args), cwd=repo, capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        raise WorkspaceError(f"dvc {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


@contextmanager
def workspace_lock(repo: str | os.PathLike) -> Iterator[Path]:
    """Exclusive, non-blocking lock: two nightly runs never share a workspace."""
    path = Path(repo) / LOCK_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            raise WorkspaceError(
                f"{path}: another run holds this workspace (pid {fh.read().strip() or '?'})"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield path
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def dirty_files(repo: str | os.PathLike) -> list[str]:
    """Tracked files with uncommitted changes (untracked files do not count)."""
    out = git(repo, "status", "--porcelain", "--untracked-files=no")
    return [line[3:] for line in out.splitlines() if line.strip()]


def require_clean(repo: str | os.PathLike, what: str) -> None:
    dirty = dirty_files(repo)
    if dirty:
        raise WorkspaceError(
            f"{what} refused: uncommitted changes in {', '.join(dirty[:10])}"
            + (" ..." if len(dirty) > 10 else "")
            + "; commit or discard them first"
        )


def _params_at(repo: str | os.PathLike, commit: str) -> dict:
    text = git(repo, "show", f"{commit}:params.yaml", check=False)
    return yaml.safe_load(text) or {} if text else {}


def _lock_at(repo: str | os.PathLike, commit: str) -> str:
    return git(repo, "show", f"{commit}:dvc.lock", check=False)


def find_commit(
    repo: str | os.PathLike,
    *,
    to: str = "",
    reward_version: str = "",
    dataset_version: str = "",
) -> str:
    """The commit matching exactly one selector (newest first for versions)."""
    if sum(bool(x) for x in (to, reward_version, dataset_version)) != 1:
        raise WorkspaceError("give exactly one of --to, --reward-version, --dataset-version")
    if to:
        out = git(repo, "rev-parse", "--verify", "--quiet", f"{to}^{{commit}}", check=False)
        if not out.strip():
            raise WorkspaceError(f"--to {to}: no such tag or commit")
        return out.strip()
    if reward_version:
        for commit in git(repo, "log", "--format=%H", "--", "params.yaml").split():
            if str((_params_at(repo, commit).get("reward") or {}).get("version")) == reward_version:
                return commit
        raise WorkspaceError(
            f"--reward-version {reward_version}: no commit of params.yaml has that reward.version"
        )
    return _dataset_commit(repo, dataset_version)


def _dataset_commit(repo: str | os.PathLike, version: str) -> str:
    """Newest promoted iteration whose dataset_version (clean manifest sha256) starts with
    version, from history/iterations.csv; else the newest dvc.lock that mentions it (a DVC
    md5 of data/clean)."""
    if len(version) < 7:
        raise WorkspaceError("--dataset-version: give at least 7 hex characters")
    from codeloop.evaluate.history import read_iterations
    from codeloop.paths import Paths

    hist = Paths(Path(repo)).iterations_csv
    for row in reversed(read_iterations(hist)):
        if str(row.get("dataset_version", "")).startswith(version):
            return find_commit(repo, to=row["tag"])
    for commit in git(repo, "log", "--format=%H", "--", "dvc.lock").split():
        if version in _lock_at(repo, commit):
            return commit
    raise WorkspaceError(
        f"--dataset-version {version}: not in history/iterations.csv nor in any dvc.lock"
    )


@dataclass
class RollbackReport:
    commit: str
    changed_files: list[str] = field(default_factory=list)
    params_changes: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"rolled back to {self.commit[:12]}"]
        lines += [f"  param {c}" for c in self.params_changes] or ["  params: unchanged"]
        lines += [f"  file  {f}" for f in self.changed_files] or ["  files: unchanged"]
        return "\n".join(lines)


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def rollback(repo: str | os.PathLike, commit: str, *, checkout_data: bool = True) -> RollbackReport:
    """Restore code, params, dvc.lock, history and metrics of commit; then its data."""
    require_clean(repo, "rollback")
    before = _flatten(yaml.safe_load((Path(repo) / "params.yaml").read_text()) or {})
    changed = git(repo, "diff", "--name-only", "HEAD", commit).split()
    git(repo, "checkout", commit, "--", ".")
    # Files added after the target commit would survive a path checkout: remove them.
    added = git(repo, "diff", "--name-only", "--diff-filter=A", commit, "HEAD").split()
    for rel in added:
        git(repo, "rm", "-q", "--", rel)
    after = _flatten(yaml.safe_load((Path(repo) / "params.yaml").read_text()) or {})
    diffs = [
        f"{k}: {before.get(k)!r} -> {after.get(k)!r}"
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
    ]
    if checkout_data:
        dvc(repo, "checkout", "--force")
    return RollbackReport(commit=commit, changed_files=changed, params_changes=diffs)
