"""Episode-mode reward terms: tdd's test quality (real sandbox) and rubber_duck's explanation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from codeloop.config import RewardConfig, SandboxConfig
from codeloop.rewards import score_trajectories
from codeloop.rewards.kinds import ScoreContext, replay_kind, score_by_kind
from codeloop.rewards.modes import EXPLAIN_KEY, TDD_KEY, model_asserts, names_failing_line
from codeloop.sandbox import make_executor
from codeloop.sandbox.base import SandboxError
from codeloop.schema import Action, Observation
from tests._rewards_fixtures import ADD_TASK, GOOD, SYNTAX, WRONG_VALUE, obs, traj

TASKS = {ADD_TASK.task_id: ADD_TASK}
CATCHING = "assert add_three(4) == 7\nassert add_three(0) == 3"


@pytest.fixture(scope="module")
def executor():
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=2))
    yield ex
    ex.close()


def tdd(tests: str, failed: tuple[str, ...] = (WRONG_VALUE,), tid: str = "tdd"):
    """A tdd episode: the model's tests, then its failed codes, then the good one."""
    t = traj(GOOD, tid=tid, steps=[obs("failed", 0)] * len(failed) + [obs("passed", 2)])
    for a, code in zip(t.actions, [*failed, GOOD], strict=True):
        a.content = code
    return replace(t, model_tests=tests)


def score(executor, rows, **reward):
    return score_by_kind(rows, TASKS, ScoreContext(RewardConfig(**reward), executor))


def quality(executor, row) -> float:
    return score(executor, [row])[0].reward_components[TDD_KEY]


def test_tests_that_pass_the_reference_and_catch_the_failed_code_score_one(executor):
    assert quality(executor, tdd(CATCHING)) == 1.0


def test_a_test_wrong_about_the_reference_costs_its_share(executor):
    # add_three(4) == 8 fails on the reference but still catches the wrong variant
    assert quality(executor, tdd("assert add_three(4) == 8\nassert add_three(0) == 3")) == 0.5


def test_tests_that_let_the_wrong_code_through_score_zero(executor):
    assert quality(executor, tdd("assert add_three(0) > 0")) == 0.0


def test_tests_that_assert_nothing_score_zero(executor):
    assert quality(executor, tdd("assert True\nassert 1 == 1")) == 0.0


def test_tests_that_fail_everywhere_score_zero(executor):
    assert quality(executor, tdd("assert False\nassert add_three(0) == 99")) == 0.0


def test_without_any_wrong_variant_the_tests_score_zero(executor):
    assert quality(executor, tdd("assert add_three(1) == 4", ())) == 0.0


def test_a_failed_code_that_never_compiled_is_no_variant(executor):
    row = tdd(CATCHING, (SYNTAX,))
    row.actions[0].observation.status = "syntax_error"
    assert quality(executor, row) == 0.0


def test_a_failed_turn_written_as_a_continuation_of_the_signature_is_a_variant(executor):
    # base-format turns continue the prompt's `def add_three(x):` line
    assert quality(executor, tdd("assert add_three(0) == 3", ("    return x + 2\n",))) == 1.0


def test_a_generated_task_brings_mutants_the_model_did_not_choose(executor):
    from codeloop.data.generator import generate_tasks
    from codeloop.rewards.modes import reference_mutants

    task = generate_tasks(1, seed=3, max_depth=1)[0]
    assert reference_mutants(task)
    tasks = {task.task_id: task}
    good = "\n".join(task.visible_tests)
    rows = [replace(traj(task.reference_solution, tid=i, task=task, steps=[obs("passed", 1)]),
                    model_tests=m)
            for i, m in (("good", good), ("vacuous", "assert True"))]
    for a in (r.actions[0] for r in rows):
        a.content = task.reference_solution
    got = {t.trajectory_id: t.reward_components[TDD_KEY]
           for t in score_by_kind(rows, tasks, ScoreContext(RewardConfig(), executor))}
    assert got["vacuous"] == 0.0 and got["good"] > 0.0


def test_lines_that_are_not_asserts_are_ignored():
    assert model_asserts("# my tests\nassert f(1) == 2\nprint(3)\n") == ["assert f(1) == 2"]


def test_model_tests_without_an_assert_score_zero(executor):
    assert quality(executor, tdd("print('no tests')")) == 0.0


def test_the_reward_gains_tdd_weight_times_test_quality_and_nothing_else_moves(executor):
    row = tdd("assert add_three(4) == 8\nassert add_three(0) == 3")
    (plain,) = score_trajectories([row], TASKS, "v1", executor)
    (scored,) = score(executor, [row], tdd_weight=0.4)
    assert scored.reward == pytest.approx(plain.reward + 0.4 * 0.5)
    assert {k: v for k, v in scored.reward_components.items() if k != TDD_KEY} == (
        plain.reward_components
    )


def test_rows_without_model_tests_are_unchanged_by_the_mode_terms(executor):
    row = traj(WRONG_VALUE, steps=[obs("failed", 0), obs("failed", 0)])
    (plain,) = score_trajectories([row], TASKS, "v1", executor)
    (scored,) = score(executor, [row], explain_weight=0.5)
    assert scored.to_row() == plain.to_row()


class FailingModelTests:
    """An executor whose sandbox fails on any job running the model's own asserts."""

    def __init__(self, inner, asserts):
        self.inner, self.asserts = inner, asserts

    def run(self, job):
        if job.tests == self.asserts:
            raise SandboxError("worker lost")
        return self.inner.run(job)

    def run_many(self, jobs):
        return [self.run(j) for j in jobs]


def test_a_sandbox_failure_on_the_model_tests_is_an_infra_error_not_a_zero(executor):
    row = tdd(CATCHING)
    (t,) = score(FailingModelTests(executor, model_asserts(CATCHING)), [row])
    assert "worker lost" in t.infra_error and t.reward_components == {}


def test_a_tdd_row_replays_and_a_tampered_test_quality_is_a_mismatch(executor):
    ctx = ScoreContext(RewardConfig(), executor)
    (scored,) = score_by_kind([tdd(CATCHING)], TASKS, ctx)
    assert not replay_kind("function", [scored], TASKS, ctx).mismatches
    bad = replace(scored, reward_components={**scored.reward_components, TDD_KEY: 0.5})
    assert replay_kind("function", [bad], TASKS, ctx).mismatches[0].diff_components == [
        f"{TDD_KEY}: 0.5 -> 1.0"
    ]


def duck(explanation: str):
    """A rubber_duck episode: a failed run, its explanation, then the fix."""
    failed = Observation(status="failed", failing_test="assert add_three(4) == 7",
                         tests_passed=1, tests_total=2)
    t = traj(GOOD, steps=[failed, Observation(), obs("passed", 2)])
    t.actions[1] = Action(step=1, action_type="explain", content=explanation)
    return t


def test_an_explanation_quoting_the_failing_call_earns_the_explain_weight(executor):
    (plain,) = score(executor, [duck("ignored")])
    (t,) = score(executor, [duck("add_three(4) returns 6 since I add 2.")], explain_weight=0.1)
    assert t.reward_components[EXPLAIN_KEY] == 1.0 and t.reward == pytest.approx(plain.reward + 0.1)


def test_an_explanation_that_names_nothing_earns_zero(executor):
    (t,) = score(executor, [duck("The code is probably wrong somewhere.")], explain_weight=0.1)
    assert t.reward_components[EXPLAIN_KEY] == 0.0


def test_with_explain_weight_zero_no_component_is_recorded(executor):
    (t,) = score(executor, [duck("add_three(4) returns 6.")])
    assert EXPLAIN_KEY not in t.reward_components


def test_a_pytest_failure_is_named_by_its_test_or_the_source_line_it_points_at():
    out = ("FAILED tests/test_f2p.py::test_add_positive - assert -1 == 5\n"
           ">       return a - b\nE   AssertionError")
    seen = Observation(status="failed", output=out)
    assert names_failing_line("test_add_positive fails: add subtracts.", seen)
    assert names_failing_line("The line `return a - b` subtracts instead.", seen)
    assert not names_failing_line("Something is off in calc.", seen)
