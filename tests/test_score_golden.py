"""Golden outputs of the released reward versions on fixed inputs.

A released version is immutable. If one of these numbers has to change, the change is a
new reward version in codeloop/rewards/registry.py, never an edit of these literals.
"""

from __future__ import annotations

import pytest

from codeloop.rewards.registry import REGISTRY, RewardInput
from codeloop.sandbox.base import ExecResult
from codeloop.schema import Action
from tests._repo_golden import CASES as CASES_V3
from tests._rewards_fixtures import (
    ADD_TASK,
    GOOD,
    LOOP,
    SPECIAL,
    SYNTAX,
    WRONG_TYPE,
    WRONG_VALUE,
    obs,
    result,
)


def _acts(*observations) -> list[Action]:
    return [
        Action(step=i, action_type="revise", content="", observation=o)
        for i, o in enumerate(observations)
    ]


P, P2 = ("passed", "7", "7", ""), ("passed", "13", "13", "")
TYPE_ERR = GOOD.replace("x + 3", "x + '3'")
CASES = {
    "pass": (GOOD, result("passed", [P, P2]), _acts(obs("passed", 2))),
    "wrong_value": (
        WRONG_VALUE,
        result("failed", [("failed", "6", "7", ""), ("failed", "12", "13", "")]),
        _acts(obs("failed", 0)),
    ),
    "half_wrong_type": (
        WRONG_TYPE,
        result("failed", [P, ("failed", "'13'", "13", "")]),
        _acts(obs("failed", 1)),
    ),
    "syntax": (SYNTAX, ExecResult("syntax_error", 0, 2), _acts(obs("syntax_error", 0))),
    "timeout": (LOOP, ExecResult("timeout", 0, 2), _acts(obs("timeout", 0))),
    "special_case": (SPECIAL, result("passed", [P, P2]), _acts(obs("passed", 2))),
    "multi_turn": (
        GOOD,
        result("passed", [P, P2]),
        _acts(obs("syntax_error", 0), obs("failed", 1), obs("passed", 2)),
    ),
    "type_errors": (
        TYPE_ERR,
        result("runtime_error", [("runtime_error", "", "7", "TypeError")] * 2),
        _acts(obs("runtime_error", 0)),
    ),
}

GOLDEN = {
    # version, case: (reward, step rewards)
    ("v1", "pass"): (1.0, [0.0]),
    ("v1", "wrong_value"): (0.0, [0.0]),
    ("v1", "half_wrong_type"): (0.5, [0.0]),
    ("v1", "syntax"): (-0.5, [0.0]),
    ("v1", "timeout"): (0.0, [0.0]),
    ("v1", "special_case"): (1.0, [0.0]),
    ("v1", "multi_turn"): (1.0, [0.0, 0.0, 0.0]),
    ("v1", "type_errors"): (0.0, [0.0]),
    ("v2", "pass"): (0.85, [0.05]),
    ("v2", "wrong_value"): (0.15, [0.0]),
    ("v2", "half_wrong_type"): (0.275, [0.025]),
    ("v2", "syntax"): (-0.55, [-0.05]),
    ("v2", "timeout"): (-0.05, [-0.05]),
    ("v2", "special_case"): (0.35, [0.05]),
    ("v2", "multi_turn"): (0.85, [-0.05, 0.075, 0.025]),
    ("v2", "type_errors"): (0.0, [-0.05]),
}


def _run(version: str, case: str):
    code, res, actions = CASES[case]
    return REGISTRY[version].compute(RewardInput(ADD_TASK, code, res, actions))


@pytest.mark.parametrize(("version", "case"), sorted(GOLDEN))
def test_released_version_reproduces_its_golden_reward(version, case):
    out = _run(version, case)
    assert (out.reward, out.step_rewards) == GOLDEN[(version, case)]


def test_v1_components_are_pinned():
    assert _run("v1", "half_wrong_type").components == {
        "pass_rate": 0.5,
        "binary_pass": 0.0,
        "syntax_penalty": 0.0,
        "timeout": 0.0,
    }


def test_v2_components_are_pinned():
    assert _run("v2", "special_case").components == {
        "pass_rate": 1.0,
        "binary_pass": 1.0,
        "rltf": 1.0,
        "syntax_penalty": 0.0,
        "timeout": 0.0,
        "process": 0.05,
        "length_penalty": 0.0,
        "hack_constant_output": 0.0,
        "hack_print_not_return": 0.0,
        "hack_special_cases_tests": 1.0,
        "hack_tampering": 0.0,
        "hack_penalty": 0.5,
    }


def test_every_released_version_has_golden_cases():
    released = {name for name, comp in REGISTRY.items() if comp.released}
    # v3 and v4 (repository tasks) are pinned in test_rewards_repo_golden on
    # tests/_repo_golden's cases
    assert released == {v for v, _ in GOLDEN} | {"v3", "v4"}
    assert CASES_V3
