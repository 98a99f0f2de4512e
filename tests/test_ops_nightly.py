"""The nightly flow's mechanics on a toy DVC pipeline: real git, real dvc, real Prefect.

The toy stages (tests/_toy_pipeline.py) stand in for the ML; what is tested is the
orchestration itself: promotion, tag, history, night-number bump, lock, and that a
refused or failed night changes nothing. Three nights run once, in order, on one shared
repo (module scope: each night costs several dvc calls); each test asserts one property
of the snapshot taken after the night it is about.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from codeloop.evaluate.history import read_iterations
from codeloop.ops.nights import nights_table, read_nights
from codeloop.ops.vcs import WorkspaceError, workspace_lock
from codeloop.paths import Paths
from tests._toy_pipeline import git, make_toy_repo, set_toy, stage_env

pytestmark = pytest.mark.slow


def _snapshot(repo: Path, out=None, error=None) -> dict:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    weights = Paths(repo).candidate_model / "weights.txt"
    return {
        "out": out,
        "error": error,
        "head": git(repo, "rev-parse", "HEAD"),
        "tags": git(repo, "tag").split(),
        "status": git(repo, "status", "--porcelain", "--untracked-files=no"),
        "params_text": (repo / "params.yaml").read_text(),
        "rollout_iteration": params["rollout"]["iteration"],
        "weights": weights.read_text() if weights.exists() else None,
    }


def _attempt(run, repo: Path) -> dict:
    try:
        return _snapshot(repo, out=run(repo))
    except Exception as exc:  # the failing nights are part of the scenario
        return _snapshot(repo, error=exc)


@pytest.fixture(scope="module")
def nights(tmp_path_factory, prefect_harness) -> dict:
    """pass -> refused -> failing stage -> dirty workspace, on one repo."""
    from flows.nightly import nightly

    root = tmp_path_factory.mktemp("nightly")
    repo = make_toy_repo(root)
    os.environ["TOY_CANDIDATES_LOG"] = str(root / "candidates.log")

    def run(r: Path):
        return nightly(repo=str(r), pull=False)

    try:
        with stage_env():  # dvc.yaml says `python`: the venv's python first on PATH
            snaps = {"passed": _attempt(run, repo)}
            set_toy(repo, score=10)  # pass@1 0.5 -> 0.1: beyond tolerance
            snaps["refused_head"] = git(repo, "rev-parse", "HEAD")
            snaps["refused"] = _attempt(run, repo)
            set_toy(repo, fail=True)
            snaps["failed_head"] = git(repo, "rev-parse", "HEAD")
            snaps["failed"] = _attempt(run, repo)
            (repo / "params.yaml").write_text((repo / "params.yaml").read_text() + "\n# edit\n")
            snaps["dirty"] = _attempt(run, repo)
            git(repo, "checkout", "--", "params.yaml")
    finally:
        del os.environ["TOY_CANDIDATES_LOG"]
    snaps["repo"] = repo
    snaps["candidates"] = (root / "candidates.log").read_text().split()
    return snaps


def test_a_passing_night_promotes_and_tags_the_iteration(nights):
    out = nights["passed"]["out"]
    assert out["promoted"] and out["tag"] == "iter-0001"
    assert nights["passed"]["tags"] == ["iter-0001"]


def test_a_passing_night_points_the_checkpoint_at_the_promoted_model(nights):
    assert (nights["repo"] / "models/iter-0001.dvc").exists()
    assert "checkpoint: models/iter-0001" in nights["passed"]["params_text"]


def test_a_passing_night_appends_its_metrics_to_history(nights):
    rows = read_iterations(Paths(nights["repo"]).iterations_csv)
    assert [r["pass_at_1"] for r in rows] == [{"heldout": 0.5}]


def test_a_passing_night_commits_everything_it_changed(nights):
    assert nights["passed"]["status"] == ""
    assert "iteration: 1  # bumped nightly" in nights["passed"]["params_text"]


def test_a_passing_night_pushes_its_data_to_the_remote(nights):
    assert any((nights["repo"].parent / "remote").rglob("*"))


def test_a_refused_night_says_which_frozen_set_dropped(nights):
    out = nights["refused"]["out"]
    assert not out["promoted"] and "heldout" in out["decision"]["reasons"][0]


def test_a_refused_night_commits_and_tags_nothing(nights):
    snap = nights["refused"]
    assert snap["head"] == nights["refused_head"] and snap["tags"] == ["iter-0001"]
    assert snap["status"] == ""


def test_a_refused_night_restores_the_last_good_data_and_params(nights):
    snap = nights["refused"]
    assert snap["weights"] == "50@1" and snap["rollout_iteration"] == 1


def test_each_night_samples_with_the_next_night_number(nights):
    numbers = [nights[k]["out"]["rollout_iteration"] for k in ("passed", "refused")]
    assert numbers == [1, 2]


def test_the_night_after_a_refusal_builds_a_new_candidate(nights):
    # passed, refused, then the failing night (its train stage ran before evaluate failed)
    assert nights["refused"]["out"]["candidate"] == "m10@2"
    assert nights["candidates"] == ["50@1", "10@2", "10@3"]


def test_a_failing_stage_fails_the_run_naming_the_stage(nights):
    assert nights["failed"]["error"] is not None and "evaluate" in str(nights["failed"]["error"])


def test_a_failing_stage_promotes_nothing_and_restores_params(nights):
    snap = nights["failed"]
    assert snap["tags"] == ["iter-0001"] and snap["head"] == nights["failed_head"]
    assert snap["status"] == "" and snap["rollout_iteration"] == 1


def test_nightly_refuses_a_workspace_with_uncommitted_changes(nights):
    err = nights["dirty"]["error"]
    assert isinstance(err, WorkspaceError) and "uncommitted" in str(err)


def test_a_second_run_on_a_locked_workspace_is_refused(tmp_path):
    with workspace_lock(tmp_path), pytest.raises(WorkspaceError, match="another run"):
        with workspace_lock(tmp_path):
            pass


def test_every_night_promoted_refused_or_failed_is_in_the_nights_log(nights):
    rows = read_nights(nights["repo"])
    assert [r["outcome"] for r in rows] == ["promoted", "refused", "failed", "failed"]
    assert rows[0]["tag"] == "iter-0001" and rows[1]["tag"] == ""
    assert rows[0]["night"] is not None and rows[3]["night"] is None  # dirty: never began


def test_the_nights_log_keeps_the_refusal_reason_and_the_failure(nights):
    rows = read_nights(nights["repo"])
    assert any("heldout" in r or "humaneval" in r for r in rows[1]["reasons"])
    assert "uncommitted changes" in rows[3]["reasons"][0]


def test_the_nights_table_shows_one_row_a_night_with_minutes(nights):
    table = nights_table(read_nights(nights["repo"]))
    assert len(table) == 4 and all(r["minutes"] >= 0 for r in table)
