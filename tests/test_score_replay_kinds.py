"""Scoring and replay by task kind: function and agent rows through one table, `codeloop replay`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from codeloop.agent.executor import open_executor
from codeloop.cli import main
from codeloop.config import AgentConfig, RewardConfig, SandboxConfig
from codeloop.io import read_trajectories, write_tasks, write_trajectories
from codeloop.rewards import score_trajectories
from codeloop.rewards.kinds import ScoreContext, replay_all, score_by_kind
from codeloop.schema import Action, Observation, Trajectory
from tests._repo_fixture import make_repo_task
from tests._rewards_fixtures import ADD_TASK, GOOD, WRONG_VALUE, obs, traj

ROOT = Path(__file__).parents[1]
SANDBOX = {"timeout_s": 30.0, "workers": 2}


def agent_episode(task, diff: str, tid: str) -> Trajectory:
    acts = [Action(step=0, action_type="tool", content="", tool="run_tests",
                   observation=Observation(tests_passed=3, tests_total=4))]
    return Trajectory(trajectory_id=tid, task_id=task.task_id, prompt_key=task.task_id,
                      prompt=task.prompt, actions=acts, final_diff=diff)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Both kinds of task, an executor that serves both, and their scored rows on disk."""
    root = tmp_path_factory.mktemp("kinds")
    repo_task = make_repo_task(root)
    tasks = {ADD_TASK.task_id: ADD_TASK, repo_task.task_id: repo_task}
    ex = open_executor(SandboxConfig(**SANDBOX), AgentConfig(), list(tasks.values()),
                       envs_dir=str(root / "envs"), clean_envs=str(root / "clean_envs"))
    ctx = ScoreContext(RewardConfig(), ex, repos_dir=str(root / "repos"))
    rows = [traj(GOOD, tid="fn-good"), agent_episode(repo_task, repo_task.patch, "agent-gold"),
            traj(WRONG_VALUE, tid="fn-wrong"), agent_episode(repo_task, "", "agent-empty")]
    scored = score_by_kind(rows, tasks, ctx)
    write_trajectories(root / "trajectories", scored)
    write_tasks(root / "tasks.parquet", list(tasks.values()))
    (root / "params.yaml").write_text(yaml.safe_dump({"sandbox": SANDBOX}))
    yield root, tasks, ctx, scored
    ex.close()


def replay_cli(root: Path, trajectories: Path) -> int:
    return main(["replay", "--trajectories", str(trajectories),
                 "--tasks", str(root / "tasks.parquet"), "--params", str(root / "params.yaml"),
                 "--repos", str(root / "repos"), "--envs", str(root / "envs"),
                 "--clean-envs", str(root / "clean_envs"), "--sample", "0"])


def tampered(root: Path, tmp_path: Path, tid: str) -> Path:
    rows = read_trajectories(root / "trajectories")
    for t in rows:
        if t.trajectory_id == tid:
            t.reward = round(t.reward + 0.25, 6)
    write_trajectories(tmp_path / "tampered", rows)
    return tmp_path / "tampered"


def test_each_kind_is_scored_under_the_version_params_give_it(world):
    *_, scored = world
    assert [t.metadata.reward_fn_version for t in scored] == ["v1", "v4", "v1", "v4"]
    assert scored[1].reward_components["resolved"] == 1.0


def test_rows_come_back_in_input_order_whatever_their_kind(world):
    *_, scored = world
    assert [t.trajectory_id for t in scored] == ["fn-good", "agent-gold", "fn-wrong", "agent-empty"]


def test_function_rows_score_exactly_as_the_plain_function_scorer_does(world):
    _, tasks, ctx, scored = world
    plain = score_trajectories([traj(GOOD, tid="fn-good")], tasks, "v1", ctx.executor)
    assert scored[0].to_row() == plain[0].to_row()


def test_replay_of_both_kinds_agrees_in_the_library(world):
    root, tasks, ctx, _ = world
    report = replay_all(read_trajectories(root / "trajectories"), tasks, ctx)
    assert report.summary()["agree"] == 4 and not report.mismatches and not report.errors


def test_codeloop_replay_exits_zero_on_function_and_agent_rows_alike(world, capsys):
    root, *_ = world
    rc = replay_cli(root, root / "trajectories")
    assert rc == 0 and "4 agree, 0 mismatch" in capsys.readouterr().out


def test_a_tampered_function_reward_exits_non_zero_naming_the_row(world, tmp_path, capsys):
    root, *_ = world
    rc = replay_cli(root, tampered(root, tmp_path, "fn-wrong"))
    out = capsys.readouterr().out
    assert rc == 1 and re.search(r"^fn-wrong .*MISMATCH", out, re.M)


def test_a_tampered_agent_reward_exits_non_zero_naming_the_row(world, tmp_path, capsys):
    root, *_ = world
    rc = replay_cli(root, tampered(root, tmp_path, "agent-empty"))
    out = capsys.readouterr().out
    assert rc == 1 and re.search(r"^agent-empty .*MISMATCH", out, re.M)


def test_a_row_whose_task_kind_is_unknown_is_bad_input_naming_task_and_field(world, tmp_path, capsys):
    root, tasks, *_ = world
    odd = {**tasks, ADD_TASK.task_id: ADD_TASK.__class__(**{**vars(ADD_TASK), "kind": "odd"})}
    write_tasks(tmp_path / "tasks.parquet", list(odd.values()))
    rc = main(["replay", "--trajectories", str(root / "trajectories"),
               "--tasks", str(tmp_path / "tasks.parquet"), "--params", str(root / "params.yaml"),
               "--repos", str(root / "repos"), "--envs", str(root / "envs")])
    assert rc == 2 and f"task {ADD_TASK.task_id}: field kind 'odd'" in capsys.readouterr().err


@pytest.mark.parametrize("path", ["codeloop/stages/score.py", "codeloop/commands/replay.py"])
def test_only_the_kinds_table_compares_task_kinds(path):
    src = (ROOT / path).read_text()
    # a task's kind compared against a literal, or named as one
    assert not re.search(r"\.kind\s*(==|!=)|[\"'](repo|function)[\"']", src)


def test_a_step_reward_written_for_a_function_row_is_checked_too(world):
    root, tasks, ctx, _ = world
    rows = read_trajectories(root / "trajectories")
    fn = next(t for t in rows if t.trajectory_id == "fn-good")
    fn.actions = [Action(step=0, action_type="generate", content=GOOD,
                         observation=obs("passed", 2), reward=0.5)]
    assert replay_all([fn], tasks, ctx).mismatches[0].diff_components == ["step_rewards"]


@pytest.fixture(scope="module")
def stage_run(tmp_path_factory):
    """The score stage itself over a rollout of both kinds (two runner threads)."""
    from codeloop.config import Params
    from codeloop.paths import Paths
    from codeloop.stages import score as stage

    root = tmp_path_factory.mktemp("stage")
    paths = Paths(root)
    repo_task = make_repo_task(paths.clean_dir)  # its snapshots land in paths.repos_dir
    write_tasks(paths.bucket_tasks, [ADD_TASK, repo_task])
    write_trajectories(paths.rollouts_dir, [
        traj(GOOD, tid="fn-good", key="g1"), traj(WRONG_VALUE, tid="fn-wrong", key="g1"),
        agent_episode(repo_task, repo_task.patch, "agent-gold"),
        agent_episode(repo_task, "", "agent-empty"),
    ])
    params = Params.model_validate({"sandbox": SANDBOX, "runner": {"workers": 2},
                                    "score": {"replay_sample": 4, "resume": False}})
    return paths, stage.run(params, paths)


def test_the_stage_scores_both_kinds_with_their_versions(stage_run):
    paths, _ = stage_run
    rows = {t.trajectory_id: t for t in read_trajectories(paths.trajectories_dir)}
    assert rows["fn-good"].metadata.reward_fn_version == "v1" and rows["fn-good"].reward == 1.0
    assert rows["agent-gold"].metadata.reward_fn_version == "v4"
    assert rows["agent-gold"].reward_components["resolved"] == 1.0


def test_the_stage_replays_each_kind_and_reports_it_apart(stage_run):
    _, metrics = stage_run
    assert metrics["replay"]["replayed"] == 4 and metrics["replay"]["mismatches"] == 0
    assert {k: m["replay"]["agree"] for k, m in metrics["kinds"].items()} == {
        "function": 2, "repo": 2
    }
