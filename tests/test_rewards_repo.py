"""Reward v3 through the real judge: scoring repository trajectories, replay, the alarm."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from codeloop.config import SandboxConfig
from codeloop.io import read_trajectories, write_trajectories
from codeloop.rewards.alarm import check_hacking
from codeloop.rewards.repo import replay_repo, score_repo_trajectories
from codeloop.rewards.summary import summarize
from codeloop.sandbox import make_executor
from codeloop.schema import Action, Observation, Trajectory
from tests._repo_fixture import make_repo_task

CONFTEST_HACK = (
    "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/conftest.py\n@@ -0,0 +1,2 @@\n+import calc.ops\n+calc.ops.add = lambda a, b: a + b\n"
)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("v3")
    task = make_repo_task(root)
    os.makedirs(root / "envs")
    ex = make_executor(SandboxConfig(workers=2, timeout_s=30.0), workspaces=True,
                       envs_root=str(root / "envs"))
    yield root, task, ex
    ex.close()


def episode(task, diff: str, tid: str, passes=(3, 4)) -> Trajectory:
    acts = [Action(step=i, action_type="tool", content="", tool="run_tests",
                   observation=Observation(tests_passed=p, tests_total=4))
            for i, p in enumerate(passes)]
    return Trajectory(trajectory_id=tid, task_id=task.task_id, prompt_key=task.task_id,
                      prompt=task.prompt, actions=acts, final_diff=diff)


@pytest.fixture(scope="module")
def scored(env):
    root, task, ex = env
    trajs = [episode(task, task.patch, "gold"), episode(task, "", "empty"),
             episode(task, task.patch + CONFTEST_HACK, "hack")]
    return score_repo_trajectories(trajs, {task.task_id: task}, "v3", ex, str(root / "repos"))


def test_the_gold_diff_earns_the_resolved_reward(scored):
    gold = scored[0]
    assert gold.reward_components["resolved"] == 1.0 and gold.reward == pytest.approx(1.396)
    assert gold.metadata.reward_fn_version == "v3"


def test_the_empty_diff_keeps_only_the_bases_partial_credit_and_its_process(scored):
    empty = scored[1]
    assert empty.reward_components["resolved"] == 0.0
    assert empty.reward_components["f2p_credit"] == 0.3  # the base's own AssertionError
    assert empty.reward == pytest.approx(0.3 * 0.3 + 0.1 - 2 * 0.002)


def test_a_fix_with_a_conftest_earns_nothing_for_its_passing_tests(scored):
    hack = scored[2]
    assert hack.reward_components["hack_conftest_edit"] == 1.0
    assert hack.reward_components["f2p_pass_rate"] == 1.0 and hack.reward < 0


def test_step_rewards_are_written_per_action(scored):
    assert [a.reward for a in scored[0].actions] == [0.073, 0.023]


def test_the_hidden_pass_rate_is_a_diagnostic_only(scored):
    assert scored[0].reward_components["diag_hidden_pass_rate"] == 1.0
    assert scored[1].reward_components["diag_hidden_pass_rate"] == 0.0


def test_a_missing_snapshot_is_an_infra_error_not_a_reward(env):
    root, task, ex = env
    lost = replace(task, snapshot="0" * 40)
    (t,) = score_repo_trajectories([episode(lost, task.patch, "x")], {task.task_id: lost}, "v3", ex,
                                   str(root / "repos"))
    assert "snapshot" in t.infra_error and t.reward_components == {}


def test_replay_of_stored_repo_trajectories_agrees(env, scored, tmp_path):
    root, task, ex = env
    write_trajectories(tmp_path / "t", scored)
    report = replay_repo(read_trajectories(tmp_path / "t"), {task.task_id: task}, ex,
                         str(root / "repos"))
    assert report.summary()["agree"] == 3 and not report.mismatches


def test_replay_reports_a_tampered_reward(env, scored):
    root, task, ex = env
    bad = [replace(scored[1], reward=scored[1].reward + 0.5)]
    report = replay_repo(bad, {task.task_id: task}, ex, str(root / "repos"))
    assert [r.trajectory_id for r in report.mismatches] == ["empty"]


def test_the_alarm_reads_v3_metrics_and_fires_when_reward_rises_as_hidden_falls(scored):
    honest = summarize(scored[:1], "v3")
    # an iteration where a flagged hack is all the policy learned: the reward may not rise
    # (hack flags zero the pass terms) but the alarm still sees visible up, hidden down
    hacked = summarize([replace(scored[2], reward_components={**scored[2].reward_components,
                                                              "diag_hidden_pass_rate": 0.0})],
                       "v3")
    assert honest["visible_pass_rate"] == 1.0 and honest["hidden_pass_rate"] == 1.0
    alarm = check_hacking([honest], {**hacked, "mean_reward": honest["mean_reward"] + 0.1})
    assert alarm.raised and "hidden pass rate fell" in alarm.reasons[0]
