"""Rollback to an iteration: find its commit, restore its files, data and models.

Every promoted iteration is one git commit tagged ``iter-NNNN`` holding dvc.lock,
params.yaml, history/ and metrics/ (docs/design.md, "Iterations without cycles"). Rolling
back is therefore: find the commit, ``git checkout`` its files, ``dvc checkout`` its
data and models. We restore *files* (``git checkout <commit> -- .``) rather than moving
HEAD, so the rollback is itself an ordinary commit-able change on the current branch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from codeloop.ops.vcs import WorkspaceError, dvc, git, require_clean


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
