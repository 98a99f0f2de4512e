"""tdd on repository tasks through the real env and judge: the model's test files are scored
on the reference tree and the buggy tree, and the expert's tdd demo writes such a file."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from codeloop.agent.judge import judge_patch
from codeloop.agent.model_tests import MODEL_TEST_PATH
from codeloop.config import RewardConfig
from codeloop.data.repos.expert import expert_calls, model_test_module
from codeloop.rewards.kinds import ScoreContext, score_by_kind
from codeloop.rewards.modes import TDD_KEY
from codeloop.rewards.repo import score_repo_trajectories
from codeloop.rollout.demos import expert_demos
from codeloop.rollout.repo_env import model_test_files
from codeloop.schema import Action, Trajectory
from tests._repo_fixture import F2P, open_agent_env

PASSES_EVERYWHERE = "def test_x():\n    assert True\n"
FAILS_EVERYWHERE = "def test_x():\n    assert False\n"
SYNTAX_ERROR = "def test_x(:\n    assert True\n"
IMPORT_ERROR = "from calc.nowhere import add\n\n\ndef test_x():\n    assert add(2, 3) == 5\n"
AS_A_CLASS = ("from calc.ops import add\n\n\nclass TestAdd:\n    def test_positive(self):\n"
              "        assert add(2, 3) == 5\n")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo-tdd")
    agent_env, ex, task = open_agent_env(root, max_steps=50)
    yield root, agent_env, ex, task
    ex.close()


def row(task, tid: str, files: dict[str, str] | None = None) -> Trajectory:
    """A repo row submitting the reference fix, with the model's test files (None: none)."""
    return Trajectory(trajectory_id=tid, task_id=task.task_id, prompt_key=task.task_id,
                      prompt=task.prompt, final_diff=task.patch,
                      model_tests=json.dumps(files, sort_keys=True) if files else "")


def score(env, rows, **reward):
    root, _, ex, task = env
    ctx = ScoreContext(RewardConfig(**reward), ex, repos_dir=str(root / "repos"))
    return score_by_kind(rows, {task.task_id: task}, ctx)


@pytest.fixture(scope="module")
def scored(env):
    task = env[3]
    good, _ = model_test_module(task, env[0] / "repos")
    files = {"good": {MODEL_TEST_PATH: good}, "always": {MODEL_TEST_PATH: PASSES_EVERYWHERE},
             "never": {MODEL_TEST_PATH: FAILS_EVERYWHERE}, "syntax": {MODEL_TEST_PATH: SYNTAX_ERROR},
             "import": {MODEL_TEST_PATH: IMPORT_ERROR}, "class": {MODEL_TEST_PATH: AS_A_CLASS},
             "over_own": {"tests/test_visible.py": F2P}, "plain": None}
    rows = [row(task, tid, f) for tid, f in files.items()]
    return {t.trajectory_id: t for t in score(env, rows, tdd_weight=0.5)}


def quality(scored, tid: str) -> float:
    assert not scored[tid].infra_error
    return scored[tid].reward_components[TDD_KEY]


def test_a_test_that_fails_on_the_bug_and_passes_on_the_fix_scores_one(scored):
    assert quality(scored, "good") == 1.0


def test_a_test_that_passes_everywhere_scores_zero(scored):
    assert quality(scored, "always") == 0.0


def test_a_test_that_fails_everywhere_scores_zero(scored):
    assert quality(scored, "never") == 0.0


def test_a_file_that_does_not_compile_has_no_tests_and_scores_zero(scored):
    assert quality(scored, "syntax") == 0.0


def test_a_file_that_errors_at_collection_passes_nowhere(scored):
    assert quality(scored, "import") == 0.0


def test_test_methods_of_a_test_class_count(scored):
    assert quality(scored, "class") == 1.0


def test_a_file_written_over_one_of_the_tasks_own_is_judged_as_the_model_wrote_it(scored):
    assert quality(scored, "over_own") == 1.0


def test_the_reward_rises_by_the_weighted_test_quality(scored):
    plain = scored["plain"].reward
    assert scored["good"].reward == pytest.approx(plain + 0.5 * 1.0)
    assert scored["always"].reward == pytest.approx(plain)
    assert scored["syntax"].reward == pytest.approx(plain)


def test_a_row_without_model_tests_is_scored_as_the_repo_scorer_scores_it(env, scored):
    root, _, ex, task = env
    alone = score_repo_trajectories([row(task, "plain")], {task.task_id: task}, "v3", ex,
                                    str(root / "repos"))[0]
    plain = scored["plain"]
    assert TDD_KEY not in plain.reward_components
    assert (plain.reward, plain.reward_components) == (alone.reward, alone.reward_components)


def test_model_tests_that_are_not_a_json_object_are_an_infra_error_not_a_reward(env):
    bad = replace(row(env[3], "bad"), model_tests="[1, 2]")
    out = score(env, [bad])[0]
    assert out.infra_error.startswith("judge (model tests): ValueError")
    assert out.reward_components == {}


@pytest.fixture(scope="module")
def demo(env):
    """The expert's tdd episode played through the real env: (calls, observations, diff)."""
    root, agent_env, _, task = env
    calls = expert_calls(task, root / "repos", tdd=True)
    ep = agent_env.reset(task)
    try:
        obs = [ep.step(c) for c in calls]
        diff = ep.final_diff()
    finally:
        ep.close()
    return calls, obs, diff


def test_the_tdd_demo_first_writes_its_test_file(demo):
    calls, obs, _ = demo
    assert calls[0]["tool"] == "write_file" and calls[0]["args"]["path"] == MODEL_TEST_PATH
    assert "def test_add_positive" in calls[0]["args"]["content"]
    assert [o.error_kind for o in obs] == [""] * len(obs)


def test_the_demos_test_file_fails_on_the_buggy_tree(demo):
    calls, obs, _ = demo
    assert calls[1]["args"]["selection"] == [f"{MODEL_TEST_PATH}::test_add_positive"]
    assert obs[1].output.startswith("1 failed")
    assert f"FAILED   {MODEL_TEST_PATH}::test_add_positive" in obs[1].output


def test_the_demo_submits_a_diff_without_its_test_file_that_resolves(env, demo):
    root, _, ex, task = env
    calls, obs, diff = demo
    assert calls[-1]["tool"] == "submit" and obs[-1].status != "error"
    assert MODEL_TEST_PATH not in diff
    assert judge_patch(task, diff, str(root / "repos"), ex).resolved


def test_the_tdd_demo_is_kept_for_sft(env):
    root, agent_env, _, task = env
    kept, report = expert_demos([task], agent_env,
                                lambda t: expert_calls(t, root / "repos", tdd=True))
    assert report["demos"] == 1 and report["rejected"] == 0


def test_the_demos_test_file_as_the_rollout_keeps_it_scores_one(env, demo):
    calls, obs, _ = demo
    acts = [Action(step=i, action_type="tool", content="", tool=c["tool"],
                   args=json.dumps(c["args"], sort_keys=True), observation=o)
            for i, (c, o) in enumerate(zip(calls, obs, strict=True))]
    kept = replace(row(env[3], "collected"), model_tests=model_test_files(acts))
    assert json.loads(kept.model_tests) == {MODEL_TEST_PATH: calls[0]["args"]["content"]}
    assert score(env, [kept])[0].reward_components[TDD_KEY] == 1.0



def test_a_task_test_file_at_the_experts_own_path_keeps_its_other_tests(env):
    from codeloop.agent.patches import file_diff

    text = F2P + "\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n"
    added = file_diff(MODEL_TEST_PATH, None, text.encode(), 0o100644, 0o100644)
    task = replace(env[3], test_patch=added,
                   fail_to_pass=[f"{MODEL_TEST_PATH}::test_add_positive"])
    assert model_test_module(task) == (text, task.fail_to_pass)


def test_the_experts_test_module_drops_the_other_tests_of_its_source_file(env):
    task = replace(env[3], test_patch=env[3].test_patch.replace("+    assert add(2, 3) == 5\n",
                   "+    assert add(2, 3) == 5\n+\n+\n+def test_add_zero():\n"
                   "+    assert add(0, 0) == 0\n"))
    assert "def test_add_zero" in task.test_patch
    content, ids = model_test_module(task)
    assert "def test_add_positive" in content and "test_add_zero" not in content
    assert ids == [f"{MODEL_TEST_PATH}::test_add_positive"]
