"""The score stage's false-pass rate: paid rows that fail hidden tests, with and without
the augmented hidden tests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from codeloop.config import SandboxConfig
from codeloop.rewards import HIDDEN_KEY, HIDDEN_OWN_KEY, score_trajectories
from codeloop.rewards.summary import false_pass_rates
from codeloop.sandbox import make_executor
from codeloop.schema import Task
from tests._rewards_fixtures import traj

# one own hidden test, then one augmented: a program right at 5 and 7 only
TASK = Task(
    task_id="t/dbl",
    source="synthetic",
    prompt="Double it.",
    entry_point="dbl",
    reference_solution="def dbl(x):\n    return 2 * x\n",
    visible_tests=["assert dbl(5) == 10"],
    hidden_tests=["assert dbl(7) == 14", "assert dbl(-3) == -6"],
    metadata={"augmented_hidden": 1, "augmented_visible": 0},
)
LUCKY = "def dbl(x):\n    return x + (5 if x == 5 else 7)\n"


@pytest.fixture(scope="module")
def executor():
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=1))
    yield ex
    ex.close()


def test_a_wrong_program_the_own_tests_pass_is_caught_only_by_the_augmented_one(executor):
    [t] = score_trajectories([traj(LUCKY, task=TASK)], {TASK.task_id: TASK}, "v1", executor)
    assert t.reward_components["pass_rate"] == 1.0
    assert t.reward_components[HIDDEN_OWN_KEY] == 1.0 and t.reward_components[HIDDEN_KEY] == 0.5
    assert false_pass_rates([t]) == {
        "false_pass_n": 1,
        "false_pass_rate": 1.0,
        "false_pass_rate_own": 0.0,
    }


def test_tasks_without_augmented_hidden_tests_carry_no_own_rate(executor):
    plain = replace(TASK, metadata={})
    [t] = score_trajectories([traj(LUCKY, task=plain)], {TASK.task_id: plain}, "v1", executor)
    assert HIDDEN_OWN_KEY not in t.reward_components
    assert false_pass_rates([t])["false_pass_rate_own"] == 1.0  # own = all hidden here
