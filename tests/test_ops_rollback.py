"""codeloop rollback: finds the commit by tag or reward version and restores its files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from codeloop.ops.rollback import WorkspaceError, find_commit, rollback


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q", "-b", "main")
    for it, version in ((1, "v1"), (2, "v2")):
        (tmp_path / "params.yaml").write_text(f"reward:\n  version: {version}\n")
        (tmp_path / "metrics.json").write_text(f'{{"pass@1": 0.{it}}}\n')
        if it == 2:
            (tmp_path / "added_later.txt").write_text("new\n")
        _git(tmp_path, "add", "-A")
        _git(tmp_path, "commit", "-qm", f"iter {it}")
        _git(tmp_path, "tag", f"iter-000{it}")
    return tmp_path


def test_reward_version_selects_the_newest_commit_with_that_version(repo):
    assert find_commit(repo, reward_version="v1") == _git(repo, "rev-parse", "iter-0001").strip()


def test_rollback_restores_params_and_metrics_and_reports_the_change(repo):
    report = rollback(repo, find_commit(repo, reward_version="v1"), checkout_data=False)
    assert "version: v1" in (repo / "params.yaml").read_text()
    assert "0.1" in (repo / "metrics.json").read_text()
    assert not (repo / "added_later.txt").exists()
    assert report.params_changes == ["reward.version: 'v2' -> 'v1'"]


def test_rollback_refuses_uncommitted_changes(repo):
    (repo / "params.yaml").write_text("reward:\n  version: v3\n")
    with pytest.raises(WorkspaceError, match="uncommitted"):
        rollback(repo, find_commit(repo, to="iter-0001"), checkout_data=False)


def test_an_unknown_tag_is_a_clear_error(repo):
    with pytest.raises(WorkspaceError, match="iter-0009"):
        find_commit(repo, to="iter-0009")


def test_an_unknown_reward_version_is_a_clear_error(repo):
    with pytest.raises(WorkspaceError, match="v7"):
        find_commit(repo, reward_version="v7")
