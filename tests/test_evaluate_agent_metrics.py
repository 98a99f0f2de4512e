"""Repository-set metrics (codeloop.evaluate.agent_metrics): resolved rate from the judge's
verdicts, unbiased pass@k, tool-call success and invalid-call rates, the UI episode."""

from __future__ import annotations

import pytest

from codeloop.evaluate.agent_metrics import (
    agent_set_metrics,
    failure_steps,
    render_episode,
    tool_mix,
)
from codeloop.schema import Action, Observation, Trajectory


def _act(step, tool, kind="", raw=None, out="ok"):
    obs = Observation(output=out, error_kind=kind)
    return Action(
        step=step, action_type="tool", content="", tool=tool, raw=raw or tool, observation=obs
    )


def _traj(tid, task, tools, reason="submitted", infra=""):
    acts = [_act(i, *t) if isinstance(t, tuple) else _act(i, t) for i, t in enumerate(tools)]
    return Trajectory(
        trajectory_id=tid, task_id=task, prompt_key=task, prompt="p", actions=acts,
        terminal_reason=reason, infra_error=infra, loss_mask=[0, 1, 1, 0, 1],
    )


TRAJS = [
    _traj("a0", "A", ["run_tests", "read_file", "edit", "run_tests", "submit"]),
    _traj("a1", "A", ["read_file", ("edit", "no_match"), "submit"]),
    _traj("b0", "B", [("x", "parse_error"), ("x", "parse_error")], "invalid_action_limit"),
    _traj("b1", "B", ["run_tests", ("run_tests", "timeout")], "max_steps"),
]
RESOLVED = [True, False, False, False]


@pytest.fixture(scope="module")
def m():
    return agent_set_metrics(TRAJS, RESOLVED, n=2)


def test_agent_metrics_resolved_rate_is_the_share_of_judged_resolved_episodes(m):
    assert m["resolved_rate"] == 0.25 and m["pass@1"] == 0.25


def test_agent_metrics_pass_at_2_is_unbiased_per_task(m):
    assert m["pass@2"] == 0.5  # task A has one of two resolved, B none


def test_agent_metrics_tool_call_success_rate_counts_calls_without_error(m):
    assert m["avg_steps"] == 12 / 4 and m["tool_call_success_rate"] == 8 / 12


def test_agent_metrics_invalid_call_rate_counts_unparsed_calls(m):
    assert m["invalid_call_rate"] == 2 / 12


def test_agent_metrics_timeout_rate_counts_episodes_with_a_timed_out_call(m):
    assert m["timeout_rate"] == 0.25


def test_agent_metrics_tests_before_submit_only_when_tests_ran_first(m):
    assert m["tests_before_submit_rate"] == 0.25


def test_agent_metrics_infra_failed_episodes_are_excluded_and_counted():
    trajs = TRAJS[:1] + [_traj("z", "A", ["run_tests"], "infra_error", infra="SandboxError")]
    out = agent_set_metrics(trajs, [True, False], n=1)
    assert out["infra_errors"] == 1 and out["resolved_rate"] == 1.0


def test_agent_metrics_verdict_count_must_match():
    with pytest.raises(ValueError):
        agent_set_metrics(TRAJS, RESOLVED[:2], n=1)


def test_agent_metrics_tool_mix_counts_calls_and_errors_per_tool():
    mix = tool_mix(TRAJS)
    assert mix["edit"] == {"calls": 2, "errors": 1} and mix["run_tests"]["calls"] == 4


def test_agent_metrics_rendered_episode_shows_every_step_in_order():
    text = render_episode(TRAJS[1])
    assert (
        text.index("step 0: `read_file`")
        < text.index("step 1: `edit`")
        < text.index("step 2: `submit`")
    )
    assert "error `no_match`" in text


def test_failure_steps_name_the_first_failed_call_else_whether_anything_was_edited():
    edited = _traj("c0", "C", ["read_file", "edit", "submit"])
    edited.final_diff = "--- a/p.py\n+++ b/p.py\n"
    untouched = _traj("c1", "C", ["run_tests", "submit"])
    trajs = [*TRAJS, edited, untouched]
    assert failure_steps(trajs, [*RESOLVED, False, False]) == {
        "edit:no_match": 1, "no_edit": 1, "resolved": 1, "run_tests:timeout": 1,
        "wrong_fix": 1, "x:parse_error": 1,
    }
