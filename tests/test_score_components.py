"""Reward components: RLTF partial credit, process rewards, length penalty."""

from __future__ import annotations

from codeloop.rewards import components as C
from codeloop.sandbox.base import ExecResult
from codeloop.sandbox.base import TestResult as _TR
from codeloop.schema import Action
from tests._rewards_fixtures import obs, result


def _tr(status, got="", expected="", error_type="") -> _TR:
    return _TR(0, status == "passed", status, got=got, expected=expected, error_type=error_type)


def test_right_type_wrong_value_earns_partial_credit():
    assert C.test_partial_credit(_tr("failed", "6", "7")) == C.RLTF_RIGHT_TYPE


def test_wrong_type_earns_no_credit():
    assert C.test_partial_credit(_tr("failed", "'7'", "7")) == 0.0


def test_bool_is_not_the_same_type_as_int():
    assert C.test_partial_credit(_tr("failed", "True", "1")) == 0.0


def test_stdlib_reprs_are_typed_by_constructor_name():
    assert C.value_type("Counter({'a': 2})") == "Counter"
    assert C.value_type("deque([1, 2])") == "deque"


def test_type_error_earns_contract_credit_but_index_error_none():
    assert C.test_partial_credit(_tr("runtime_error", error_type="TypeError")) == 0.1
    assert C.test_partial_credit(_tr("runtime_error", error_type="IndexError")) == 0.0


def test_stdio_failures_get_no_type_credit():
    assert C.test_partial_credit(_tr("failed", "'6'", "'7'"), io_style="stdio") == 0.0


def test_rltf_is_the_mean_over_visible_tests():
    res = result("failed", [("passed", "7", "7", ""), ("failed", "12", "13", "")])
    assert C.rltf_partial_credit(res) == (1.0 + 0.3) / 2


def test_rltf_without_per_test_results_is_the_pass_rate():
    assert C.rltf_partial_credit(ExecResult("runtime_error", 0, 3)) == 0.0


def _actions(*observations) -> list[Action]:
    return [
        Action(step=i, action_type="revise", content="", observation=o)
        for i, o in enumerate(observations)
    ]


def test_fixing_a_failing_test_earns_a_positive_step_reward():
    steps = C.process_rewards(_actions(obs("failed", 1), obs("passed", 2)))
    assert steps[1] > 0


def test_removing_an_error_earns_a_positive_step_reward():
    steps = C.process_rewards(_actions(obs("syntax_error", 0), obs("failed", 0)))
    assert steps[1] == 0.05


def test_oscillating_earns_no_more_than_passing_directly():
    direct = sum(C.process_rewards(_actions(obs("passed", 2))))
    wobble = sum(
        C.process_rewards(
            _actions(obs("failed", 1), obs("passed", 2), obs("failed", 1), obs("passed", 2))
        )
    )
    assert abs(wobble - direct) < 1e-12


def test_failing_first_on_purpose_earns_nothing_extra():
    direct = sum(C.process_rewards(_actions(obs("passed", 2))))
    detour = sum(C.process_rewards(_actions(obs("syntax_error", 0), obs("passed", 2))))
    assert abs(detour - direct) < 1e-12


def test_process_total_never_exceeds_the_cap():
    steps = C.process_rewards(
        _actions(obs("syntax_error", 0), obs("passed", 2)), w_pass=1, w_error=1, cap=0.1
    )
    assert abs(sum(steps)) <= 0.1 + 1e-12


def test_actions_without_a_run_get_zero_and_keep_the_state():
    steps = C.process_rewards(_actions(obs("failed", 1), obs("", 0), obs("passed", 2)))
    assert steps[1] == 0.0 and steps[2] > 0


def test_short_code_has_no_length_penalty():
    assert C.length_penalty("x" * 100, "y" * 50) == 0.0


def test_length_penalty_is_capped():
    assert C.length_penalty("x" * 100_000, "y" * 10) == 0.05
