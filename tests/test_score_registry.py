"""The registry: version selection, documented weights, shaping that never outweighs passing."""

from __future__ import annotations

import itertools

import pytest

from codeloop.rewards.registry import REGISTRY, RewardInput, UnknownRewardVersion, get_composition
from codeloop.sandbox.base import ExecResult
from codeloop.schema import Action, Task
from tests._rewards_fixtures import ADD_TASK, GOOD, obs, result


def test_unknown_version_error_lists_the_known_ones():
    with pytest.raises(UnknownRewardVersion, match="v1, v2"):
        get_composition("v0")


def test_every_composition_documents_why():
    for comp in REGISTRY.values():
        assert "Why" in comp.doc, comp.name


def test_changing_the_version_changes_the_score():
    inp = RewardInput(
        ADD_TASK, GOOD, result("failed", [("passed", "7", "7", ""), ("failed", "12", "13", "")])
    )
    assert REGISTRY["v1"].compute(inp).reward != REGISTRY["v2"].compute(inp).reward


def test_hidden_tests_are_not_an_input_of_any_composition():
    assert not any("hidden" in f for f in RewardInput.__dataclass_fields__)


_LONG = "def add_three(x):\n" + "    y = x\n" * 400 + "    return x + 3\n"


def _v2(code: str, res: ExecResult, steps) -> float:
    actions = [
        Action(step=i, action_type="revise", content="", observation=o) for i, o in enumerate(steps)
    ]
    return REGISTRY["v2"].compute(RewardInput(ADD_TASK, code, res, actions)).reward


def test_v2_worst_honest_pass_beats_best_failure():
    """Shaping is capped: no mix of process/length terms lets a failure outrank a pass."""
    passing = result("passed", [("passed", "7", "7", ""), ("passed", "13", "13", "")])
    almost = result("failed", [("passed", "7", "7", ""), ("failed", "12", "13", "")])
    histories = [
        [obs("passed", 2)],
        [obs("syntax_error", 0)],
        [obs("timeout", 0)],
        [obs("syntax_error", 0), obs("passed", 2)],
        [obs("passed", 2), obs("failed", 1)],
    ]
    worst_pass = min(_v2(c, passing, h) for c, h in itertools.product([GOOD, _LONG], histories))
    best_fail = max(_v2(GOOD, almost, h) for h in histories)
    assert worst_pass > best_fail


def test_v2_scores_a_many_test_near_miss_below_a_pass():
    n = 50
    task = Task(
        "t", "s", "p", entry_point="f", visible_tests=[f"assert f({i}) == {i}" for i in range(n)]
    )
    tests = [("passed", "1", "1", "")] * (n - 1) + [("failed", "2", "3", "")]
    near = REGISTRY["v2"].compute(
        RewardInput(task, "def f(x):\n    return x\n", result("failed", tests))
    )
    full = REGISTRY["v2"].compute(
        RewardInput(
            task, "def f(x):\n    return x\n", result("passed", [("passed", "1", "1", "")] * n)
        )
    )
    assert full.reward - near.reward >= 0.3


def test_v2_penalises_special_casing_below_honest_passing():
    from tests._rewards_fixtures import SPECIAL

    passing = result("passed", [("passed", "7", "7", ""), ("passed", "13", "13", "")])
    assert _v2(SPECIAL, passing, [obs("passed", 2)]) < _v2(GOOD, passing, [obs("passed", 2)])


def test_config_accepts_exactly_the_registered_reward_versions():
    from codeloop.config import REWARD_VERSIONS

    assert sorted(REWARD_VERSIONS) == sorted(REGISTRY)
