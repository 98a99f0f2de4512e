"""score_trajectories against the real sandbox: visible tests decide, hidden only diagnose."""

from __future__ import annotations

import pytest

from codeloop.config import SandboxConfig
from codeloop.rewards import HIDDEN_KEY, score_trajectories
from codeloop.rewards.llm_judge import HttpJudge
from codeloop.sandbox import make_executor
from codeloop.sandbox.base import SandboxError
from tests._rewards_fixtures import ADD_TASK, GOOD, SPECIAL, SYNTAX, WRONG_VALUE, obs, traj

TASKS = {ADD_TASK.task_id: ADD_TASK}


@pytest.fixture(scope="module")
def executor():
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=2))
    yield ex
    ex.close()


class FaultyExecutor:
    """The real executor, except that jobs whose code contains MARK hit an infra fault."""

    MARK = "# infra-fault"

    def __init__(self, inner):
        self.inner = inner

    def run(self, job):
        if self.MARK in job.code:
            raise SandboxError("zygote died")
        return self.inner.run(job)

    def run_many(self, jobs):
        if any(self.MARK in j.code for j in jobs):
            raise SandboxError("worker pool lost")
        return self.inner.run_many(jobs)

    def close(self):
        pass


def test_a_passing_program_earns_the_full_v1_reward(executor):
    [t] = score_trajectories([traj(GOOD)], TASKS, "v1", executor)
    assert t.reward == 1.0 and t.reward_components["binary_pass"] == 1.0


def test_special_casing_passes_visible_but_hidden_tests_only_show_in_diagnostics(executor):
    [t] = score_trajectories([traj(SPECIAL)], TASKS, "v1", executor)
    assert t.reward == 1.0 and t.reward_components[HIDDEN_KEY] == 0.0


def test_v2_takes_credit_away_from_special_casing(executor):
    [t] = score_trajectories([traj(SPECIAL)], TASKS, "v2", executor)
    assert t.reward_components["hack_special_cases_tests"] == 1.0 and t.reward < 0.5


def test_changing_the_version_changes_the_scores(executor):
    trajs = [traj(c, tid=f"t{i}") for i, c in enumerate([GOOD, WRONG_VALUE, SPECIAL])]
    v1 = [t.reward for t in score_trajectories(trajs, TASKS, "v1", executor)]
    v2 = [t.reward for t in score_trajectories(trajs, TASKS, "v2", executor)]
    assert v1 != v2


def test_scoring_stamps_the_version_and_leaves_the_inputs_untouched(executor):
    original = traj(GOOD)
    [t] = score_trajectories([original], TASKS, "v2", executor)
    assert t.metadata.reward_fn_version == "v2"
    assert original.metadata.reward_fn_version == "" and original.reward_components == {}


def test_v2_writes_per_step_rewards_into_the_actions(executor):
    steps = [obs("syntax_error", 0), obs("failed", 1), obs("passed", 2)]
    [t] = score_trajectories([traj(GOOD, steps=steps)], TASKS, "v2", executor)
    assert [a.reward for a in t.actions] == [-0.05, 0.075, 0.025]


def test_empty_code_gets_the_syntax_penalty_without_running(executor):
    [t] = score_trajectories([traj("")], TASKS, "v1", executor)
    assert t.reward == -0.5 and t.reward_components[HIDDEN_KEY] == 0.0


def test_a_syntax_error_is_a_result_not_an_infra_error(executor):
    [t] = score_trajectories([traj(SYNTAX)], TASKS, "v1", executor)
    assert t.reward == -0.5 and not t.infra_error


def test_a_sandbox_fault_marks_only_its_trajectory_as_infra_error(executor):
    bad = traj(GOOD + FaultyExecutor.MARK + "\n", tid="bad")
    good = traj(GOOD, tid="good")
    out = score_trajectories([bad, good], TASKS, "v1", FaultyExecutor(executor))
    assert "zygote died" in out[0].infra_error and out[0].reward_components == {}
    assert out[1].reward == 1.0 and not out[1].infra_error


def test_a_missing_task_is_an_infra_error_naming_the_task(executor):
    t = traj(GOOD)
    t.task_id = "nowhere"
    [out] = score_trajectories([t], TASKS, "v1", executor)
    assert "nowhere" in out.infra_error


def test_a_rollout_infra_error_passes_through_unscored(executor):
    t = traj(GOOD)
    t.infra_error = "rollout: sandbox lost"
    [out] = score_trajectories([t], TASKS, "v1", executor)
    assert out.infra_error == "rollout: sandbox lost" and out.reward_components == {}


def test_an_unreachable_judge_is_an_infra_error_not_a_zero(executor):
    judge = HttpJudge("http://127.0.0.1:9/v1", "m", timeout_s=1)
    [t] = score_trajectories([traj(GOOD)], TASKS, "v2-judge", executor, judge=judge)
    assert t.infra_error.startswith("judge:") and t.reward_components == {}


def test_a_version_needing_a_critic_refuses_to_run_without_one(executor):
    with pytest.raises(ValueError, match="critic"):
        score_trajectories([traj(GOOD)], TASKS, "v2-critic", executor)
