"""reward.visible_subset: each episode sees and is rewarded on a seeded share of the
visible tests; a GRPO group shares it, the next iteration gets another, replay agrees."""

from __future__ import annotations

from dataclasses import replace

import pytest

from codeloop.config import SandboxConfig
from codeloop.data.holdout import visible_subset
from codeloop.rewards import score_trajectories
from codeloop.sandbox import make_executor
from codeloop.schema import Task
from tests._rewards_fixtures import traj

TASK = Task(
    task_id="t/inc",
    source="synthetic",
    prompt="Add one.",
    entry_point="inc",
    reference_solution="def inc(x):\n    return x + 1\n",
    visible_tests=[f"assert inc({i}) == {i + 1}" for i in range(8)],
    hidden_tests=["assert inc(100) == 101"],
)


def test_a_share_keeps_that_many_visible_tests_in_their_order():
    view = visible_subset(TASK, 0.5, iteration=0, seed=0)
    assert len(view.visible_tests) == 4
    assert view.visible_tests == [t for t in TASK.visible_tests if t in view.visible_tests]
    assert view.hidden_tests == TASK.hidden_tests


def test_the_subset_is_the_same_for_a_group_and_changes_with_the_iteration():
    a = visible_subset(TASK, 0.5, iteration=3, seed=1).visible_tests
    assert a == visible_subset(TASK, 0.5, iteration=3, seed=1).visible_tests
    others = {tuple(visible_subset(TASK, 0.5, iteration=i, seed=1).visible_tests) for i in range(6)}
    assert len(others) > 1


def test_share_one_or_a_single_visible_test_keeps_the_task_as_it_is():
    assert visible_subset(TASK, 1.0, 0, 0) is TASK
    one = replace(TASK, visible_tests=TASK.visible_tests[:1])
    assert visible_subset(one, 0.1, 0, 0) is one


@pytest.fixture(scope="module")
def executor():
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=1))
    yield ex
    ex.close()


def test_the_reward_counts_only_the_tests_the_episode_was_shown(executor):
    shown = visible_subset(TASK, 0.25, iteration=2, seed=7).visible_tests
    # right on the shown inputs only: full marks under the subset, not on all visible tests
    cases = "".join(
        f"    if x == {t.split('(')[1].split(')')[0]}:\n        return x + 1\n" for t in shown
    )
    code = f"def inc(x):\n{cases}    return 0\n"
    t = traj(code, task=TASK)
    t.iteration, t.metadata.seed = 2, 7
    subset = replace(t, metadata=replace(t.metadata, visible_subset=0.25))
    [whole] = score_trajectories([t], {TASK.task_id: TASK}, "v1", executor)
    [part] = score_trajectories([subset], {TASK.task_id: TASK}, "v1", executor)
    assert part.reward_components["pass_rate"] == 1.0
    assert whole.reward_components["pass_rate"] == 0.25


def _scored(executor, task: Task, code: str):
    t = traj(code, task=task)
    t.metadata.tests_version = task.metadata.get("tests_version", "")
    return score_trajectories([t], {task.task_id: task}, "v1", executor)[0]


def test_replay_under_the_tests_it_was_scored_on_agrees(executor):
    from codeloop.config import RewardConfig
    from codeloop.rewards.kinds import ScoreContext, replay_all

    old = replace(TASK, metadata={"tests_version": "aaaa"})
    stored = _scored(executor, old, "def inc(x):\n    return x + 1\n")
    report = replay_all([stored], {TASK.task_id: old}, ScoreContext(RewardConfig(), executor))
    assert report.summary()["agree"] == 1 and not report.errors


def test_replay_against_tasks_with_other_tests_is_an_error_naming_both_versions(executor):
    from codeloop.config import RewardConfig
    from codeloop.rewards.kinds import ScoreContext, replay_all

    old = replace(TASK, metadata={"tests_version": "aaaa"})
    new = replace(
        TASK,
        metadata={"tests_version": "bbbb"},
        hidden_tests=[*TASK.hidden_tests, "assert inc(-1) == 0"],
    )
    stored = _scored(executor, old, "def inc(x):\n    return x + 1\n")
    report = replay_all([stored], {TASK.task_id: new}, ScoreContext(RewardConfig(), executor))
    [row] = report.errors
    assert "aaaa" in row.error and "bbbb" in row.error and not report.mismatches
