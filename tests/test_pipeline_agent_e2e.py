"""The whole pipeline with repository tasks on: `dvc repro` in a temp git copy of the repo on
tiny params runs function and agent episodes end to end (clean's synthetic repos, expert
SFT demos, agent rollout, the judged score at params' reward.repo_version, the heldout_repo
frozen set's resolved rate)."""

from __future__ import annotations

import json

import pytest
import yaml

from codeloop.io import read_tasks, read_trajectories
from codeloop.paths import Paths
from tests._tiny_repo import TINY
from tests._tiny_repo import copy_repo as _copy_repo
from tests._tiny_repo import git as _git
from tests._tiny_repo import merge as _merge
from tests.test_pipeline_e2e import _dvc

pytestmark = pytest.mark.slow

AGENT_TINY = _merge(
    TINY,
    {
        "policy_init": {"n_positions": 1024, "vocab_size": 600},
        "clean": {
            "repo_tasks": {
                "enabled": True,
                "n": 6,
                "heldout_n": 2,
                "tasks_per_repo": 2,
                "max_modules": 2,
            },
        },
        "sft": {"agent_fraction": 0.3, "max_len": 1024},
        "bucket": {"tasks_per_iteration": 10},
        "agent": {"max_steps": 6, "observation_chars": 400},
        "rollout": {"agent_max_new_tokens": 48},
        "evaluate": {"agent_max_new_tokens": 48},
    },
)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, repo_root, prefect_harness):
    work = tmp_path_factory.mktemp("repo")
    _copy_repo(repo_root, work)
    params = yaml.safe_load((work / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(_merge(params, AGENT_TINY), sort_keys=False))
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "tiny agent")
    first = _dvc(work, "repro")
    return work, first


def _repo_ids(work) -> set[str]:
    return {t.task_id for t in read_tasks(Paths(work).bucket_tasks) if t.kind == "repo"}


def test_agent_e2e_rollout_holds_agent_episodes_with_tool_actions(pipeline):
    work, _ = pipeline
    ids = _repo_ids(work)
    trajs = [t for t in read_trajectories(Paths(work).rollouts_dir) if t.task_id in ids]
    assert trajs and all(a.action_type == "tool" and a.raw for t in trajs for a in t.actions)


def test_agent_e2e_repo_trajectories_are_scored_by_the_configured_repo_reward(pipeline):
    work, _ = pipeline
    ids = _repo_ids(work)
    version = yaml.safe_load((work / "params.yaml").read_text())["reward"]["repo_version"]
    trajs = [t for t in read_trajectories(Paths(work).trajectories_dir) if t.task_id in ids]
    assert version == "v4"
    assert trajs and {t.metadata.reward_fn_version for t in trajs} == {version}
    assert all("resolved" in t.reward_components for t in trajs)


def test_agent_e2e_function_trajectories_keep_their_reward_version(pipeline):
    work, _ = pipeline
    ids = _repo_ids(work)
    trajs = [t for t in read_trajectories(Paths(work).trajectories_dir) if t.task_id not in ids]
    assert trajs and {t.metadata.reward_fn_version for t in trajs} == {"v1"}


def test_agent_e2e_sft_mixed_in_expert_demonstrations(pipeline):
    work, _ = pipeline
    sft = json.loads(Paths(work).metrics("sft").read_text())
    assert sft["agent_demos"] > 0 and sft["expert"]["rejected"] == 0


def test_agent_e2e_evaluate_reports_the_heldout_repo_resolved_rate(pipeline):
    work, _ = pipeline
    ev = json.loads(Paths(work).metrics("evaluate").read_text())
    repo = ev["sets"]["heldout_repo"]
    assert repo["kind"] == "repo" and repo["pass@1"] == repo["resolved_rate"]
    assert repo["n_tasks"] == 2 and "tool_call_success_rate" in repo


def test_agent_e2e_rollout_metrics_carry_the_tool_mix(pipeline):
    work, _ = pipeline
    m = json.loads(Paths(work).metrics("rollout").read_text())
    assert m["agent"]["episodes"] > 0 and m["agent"]["tool_mix"]


def test_agent_e2e_a_second_repro_runs_no_stage(pipeline):
    work, _ = pipeline
    assert "Running stage" not in _dvc(work, "repro").stdout


def _replay(work, trajectories) -> int:
    from codeloop.cli import main

    p = Paths(work)
    return main([
        "replay", "--trajectories", str(trajectories), "--tasks", str(p.bucket_tasks),
        "--params", str(work / "params.yaml"), "--repos", str(p.repos_dir),
        "--envs", str(p.agent_envs_dir), "--clean-envs", str(p.clean_envs_dir), "--sample", "0",
    ])


def test_agent_e2e_replay_agrees_with_every_stored_reward(pipeline):
    work, _ = pipeline
    assert _replay(work, Paths(work).trajectories_dir) == 0


def test_agent_e2e_replay_fails_once_a_stored_reward_is_changed(pipeline, tmp_path):
    from codeloop.io import write_trajectories

    work, _ = pipeline
    ids = _repo_ids(work)
    rows = read_trajectories(Paths(work).trajectories_dir)
    for kind_is_repo in (True, False):
        # one task's group, as stored (it replays clean) and with one reward changed
        task = next(t.task_id for t in rows if (t.task_id in ids) == kind_is_repo)
        group = [t for t in rows if t.task_id == task]
        kept, changed = tmp_path / f"kept-{kind_is_repo}", tmp_path / f"changed-{kind_is_repo}"
        write_trajectories(kept, group, jsonl_export=False)
        group[0].reward += 0.5
        write_trajectories(changed, group, jsonl_export=False)
        group[0].reward -= 0.5
        assert _replay(work, kept) == 0
        assert _replay(work, changed) != 0
