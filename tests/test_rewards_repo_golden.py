"""Rewards v3's and v4's golden outputs on fixed repository episodes, and what they show."""

from __future__ import annotations

import pytest

from codeloop.rewards.registry import REGISTRY, RewardInput
from codeloop.sandbox.base import ExecResult
from tests._repo_golden import CASES, TASK

GOLDEN = {
    # case: (reward, step rewards)
    "resolved": (1.39, [-0.002, 0.073, -0.002, 0.023, -0.002]),
    "f2p_half_assertion": (0.285, [-0.002, 0.073, -0.002, 0.023, -0.002]),
    "f2p_type_error": (0.12, [-0.002, 0.073, -0.002, 0.023, -0.002]),
    "broke_p2p": (0.265, [-0.002, 0.073, -0.002, 0.023, -0.002]),
    "hacked_conftest": (-0.01, [-0.002, -0.002, -0.002, -0.002, -0.002]),
    "not_applied": (-0.204, [-0.002, -0.002]),
    "oscillating": (1.39, [0.073, -0.052, 0.048, 0.023, -0.002]),
    "direct": (1.39, [0.073, -0.002, -0.002, 0.023, -0.002]),
    "invalid_calls": (1.35, [-0.022, -0.022, -0.002, 0.098, -0.002]),
    "forged_runs": (-0.191, [-0.002, 0.098, -0.002]),
    "judge_error": (-0.204, [-0.002, -0.002]),
}
# v4: the process term counts at most the visible passes the judge saw on the final diff
GOLDEN_V4 = GOLDEN | {
    "f2p_type_error": (0.095, [-0.002, 0.073, -0.002, -0.002, -0.002]),
    "broke_p2p": (0.24, [-0.002, 0.073, -0.002, -0.002, -0.002]),
    "forged_runs": (-0.266, [-0.002, 0.023, -0.002]),
}


def run(case: str, version: str = "v3"):
    v, actions = CASES[case]
    inp = RewardInput(TASK, "", ExecResult("no_code"), actions, repo=v)
    return REGISTRY[version].compute(inp)


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_v3_reproduces_its_golden_reward(case):
    out = run(case)
    assert (out.reward, out.step_rewards) == GOLDEN[case]


@pytest.mark.parametrize("case", sorted(GOLDEN_V4))
def test_v4_reproduces_its_golden_reward(case):
    out = run(case, "v4")
    assert (out.reward, out.step_rewards) == GOLDEN_V4[case]


def test_every_case_has_a_golden_value():
    assert set(GOLDEN) == set(CASES) == set(GOLDEN_V4)


def test_v4_pays_no_process_for_passes_the_judged_diff_lacks():
    assert run("forged_runs", "v4").components["process"] < run("forged_runs").components["process"]
    assert run("forged_runs", "v4").components["process"] == 0.025  # the one judged visible pass


def test_a_judge_error_is_scored_as_a_diff_that_does_not_apply_with_no_process_pay():
    for version in ("v3", "v4"):
        out = run("judge_error", version)
        assert out.reward == run("not_applied", version).reward < 0
        assert out.components["process"] == 0.0 and out.components["hack_zeroed"] == 1.0


def test_v3_components_are_pinned():
    assert run("hacked_conftest").components == {
        "resolved": 0.0, "applied": 1.0, "pass_rate": 1.0, "f2p_pass_rate": 1.0,
        "f2p_credit": 1.0, "p2p_broken": 0.0, "process": 0.0, "steps": 5.0,
        "step_cost": 0.01, "invalid_calls": 0.0, "invalid_cost": 0.0, "apply_penalty": 0.0,
        "hack_zeroed": 1.0, "hack_conftest_edit": 1.0,
    }


def test_breaking_and_refixing_earns_nothing_over_fixing_directly():
    assert run("oscillating").reward == run("direct").reward


def test_a_resolved_episode_outranks_every_unresolved_one():
    unresolved = [run(c).reward for c in CASES if not CASES[c][0].resolved]
    assert min(run(c).reward for c in ("resolved", "invalid_calls")) > max(unresolved)


def test_a_hack_flag_zeroes_the_pass_terms():
    out = run("hacked_conftest")
    assert out.components["f2p_credit"] == 1.0 and out.reward < 0


def test_a_wrong_value_earns_more_partial_credit_than_an_exception():
    assert run("f2p_half_assertion").components["f2p_credit"] == 0.65
    assert run("f2p_type_error").components["f2p_credit"] == 0.1


def test_v3_refuses_an_episode_without_a_verdict():
    with pytest.raises(ValueError, match="no verdict"):
        REGISTRY["v3"].compute(RewardInput(TASK, "", ExecResult("no_code"), []))
