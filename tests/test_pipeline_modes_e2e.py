"""The episode modes through the whole pipeline: `dvc repro` in a temp git copy of the repo on
tiny params with rollout.mode tdd (function tasks) and, on repository tasks too,
rubber_duck: every stage runs, and the rows carry the mode's actions."""

from __future__ import annotations

import pytest
import yaml

from codeloop.io import read_json, read_trajectories
from codeloop.paths import Paths
from tests._tiny_repo import TINY
from tests._tiny_repo import copy_repo as _copy_repo
from tests._tiny_repo import git as _git
from tests._tiny_repo import merge as _merge
from tests.test_pipeline_agent_e2e import AGENT_TINY
from tests.test_pipeline_e2e import _dvc

pytestmark = pytest.mark.slow

MODES = {
    "tdd": _merge(TINY, {"rollout": {"mode": "tdd"}}),
    "rubber_duck": _merge(AGENT_TINY, {
        "rollout": {"mode": "rubber_duck", "agent_mode": "rubber_duck"},
        "evaluate": {"max_steps": 2},
    }),
}


@pytest.fixture(scope="module", params=sorted(MODES))
def repro(request, tmp_path_factory, repo_root, prefect_harness):
    work = tmp_path_factory.mktemp(request.param)
    _copy_repo(repo_root, work)
    params = yaml.safe_load((work / "params.yaml").read_text())
    merged = _merge(params, MODES[request.param])
    (work / "params.yaml").write_text(yaml.safe_dump(merged, sort_keys=False))
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", f"tiny {request.param}")
    _dvc(work, "repro")
    return request.param, work


def _rows(work):
    return read_trajectories(Paths(work).trajectories_dir)


def test_every_stage_ran_and_the_candidate_was_evaluated(repro):
    _, work = repro
    assert read_json(Paths(work).metrics("evaluate"))["sets"]
    assert _rows(work)


def test_rows_carry_the_mode_that_sampled_them(repro):
    mode, work = repro
    assert {t.metadata.episode_mode for t in _rows(work)} == {mode}


def test_tdd_rows_begin_with_the_models_tests(repro):
    mode, work = repro
    if mode != "tdd":
        pytest.skip("tdd only")
    rows = [t for t in _rows(work) if t.actions and t.actions[0].observation.status != "prompt_too_long"]
    assert rows and all(t.actions[0].action_type == "write_tests" for t in rows)
    wrote = [t for t in rows if t.model_tests]
    assert all("test_quality" in t.reward_components for t in wrote)


def test_rubber_duck_rows_hold_explanations_after_failures(repro):
    mode, work = repro
    if mode != "rubber_duck":
        pytest.skip("rubber_duck only")
    rows = _rows(work)
    for t in rows:
        for prev, act in zip(t.actions, t.actions[1:], strict=False):
            if act.action_type == "explain":
                assert prev.observation.status not in ("passed", "no_code")
    assert any(a.action_type == "explain" for t in rows for a in t.actions)
