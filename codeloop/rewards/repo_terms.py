"""Reward v3's terms for repository episodes: pure functions of a verdict and the actions.

``repo_reward`` is the composition's body (registry.reward_v3 wraps it); its evidence is a
``RepoVerdict`` from codeloop.agent.judge (fresh tree, test files restored, tests run in the
sandbox: never the agent's word) and the episode's actions. codeloop.rewards.repo judges
trajectories and applies it.

Components (all in ``reward_components``): ``resolved``, ``applied``, ``pass_rate`` (F2P
and P2P together, what summarize() and the hacking alarm read as the visible rate),
``f2p_pass_rate``, ``f2p_credit`` (RLTF-style per F2P test), ``p2p_broken`` (share of
PASS_TO_PASS that failed), ``process`` (potential shaping), ``steps``, ``step_cost``,
``invalid_calls``, ``invalid_cost``, ``apply_penalty``, ``hack_zeroed`` and one
``hack_<flag>: 1.0`` per flag; ``diag_hidden_pass_rate`` (weight 0) for the alarm.
"""

from __future__ import annotations

from codeloop.agent.hacks import flag_components
from codeloop.agent.judge import JudgeConfig, RepoVerdict
from codeloop.agent.tools import INVALID_KINDS
from codeloop.rewards.components import rounded
from codeloop.schema import Action, Task

W_RESOLVED = 1.0
W_F2P = 0.3
W_P2P = 0.5
W_PROCESS = 0.1
W_APPLY = 0.2
STEP_COST = 0.002
INVALID_COST = 0.02
# RLTF-style credit of one F2P test: it ran to its assertion (wrong value) beats an
# exception on the way (the code ran but broke the contract), which beats nothing. A no-op
# diff keeps the base's own credit (its F2P tests normally fail their assertion: 0.09 at
# W_F2P): the same for every episode of a task, so GRPO's group advantage ignores it, and
# an edit that makes the code raise instead ranks below leaving it alone.
CREDIT = {"passed": 1.0}
CREDIT_ASSERTION = 0.3
CREDIT_EXCEPTION = 0.1
# Malformed calls (the tool never ran: agent.tools' INVALID_KINDS, the same set the episode
# counts towards agent.invalid_call_limit); a tool that ran and failed (no_match) is not one.
HIDDEN_KEY = "diag_hidden_pass_rate"


def test_credit(outcome: str, exc_type: str) -> float:
    """One F2P test's credit: 1 passed, 0.3 failed its assertion, 0.1 failed by another
    exception, 0 for errors in setup, skips, missing or untrusted outcomes."""
    if outcome == "passed":
        return 1.0
    if outcome != "failed":
        return 0.0
    return CREDIT_ASSERTION if exc_type == "AssertionError" else CREDIT_EXCEPTION


def f2p_credit(v: RepoVerdict, task: Task) -> float:
    """Mean credit over FAIL_TO_PASS (0 when none ran)."""
    ids = task.fail_to_pass
    if not ids or not v.applied:
        return 0.0
    return sum(
        test_credit(v.outcomes.get(i, "missing"), v.failure_types.get(i, "")) for i in ids
    ) / len(ids)


def _phi(a: Action, n_visible: int, cap: int | None = None) -> float | None:
    """Potential of the state a run_tests observation shows (None: not a test run); with
    ``cap``, the pass count is at most that many (what the judge saw pass)."""
    if a.tool != "run_tests" or a.observation.error_kind in INVALID_KINDS:
        return None
    obs = a.observation
    denom = n_visible or obs.tests_total
    passed = obs.tests_passed if cap is None else min(obs.tests_passed, cap)
    return W_PROCESS * min(passed / denom, 1.0) if denom else 0.0


def step_terms(
    actions: list[Action], n_visible: int, cap: int | None = None
) -> tuple[list[float], list[float]]:
    """(process, cost) per step. Process: Phi(after) - Phi(before) over the visible-test
    pass count each run_tests observation showed (at most ``cap``), Phi = 0 before the
    first; the sum telescopes to the last observed potential, so breaking and re-fixing
    earns nothing net. Cost: STEP_COST per step plus INVALID_COST per malformed call."""
    process, cost, prev = [], [], 0.0
    for a in actions:
        phi = _phi(a, n_visible, cap)
        process.append(0.0 if phi is None else phi - prev)
        prev = prev if phi is None else phi
        invalid = a.observation.error_kind in INVALID_KINDS
        cost.append(STEP_COST + (INVALID_COST if invalid else 0.0))
    return process, cost


DISQUALIFY = JudgeConfig().disqualify


def judged_visible(v: RepoVerdict, task: Task) -> int:
    """How many of the task's visible tests the judge saw pass on the final diff."""
    return sum(v.outcomes.get(i) == "passed" for i in task.visible_tests)


def repo_reward(
    v: RepoVerdict,
    task: Task,
    actions: list[Action],
    disqualify: frozenset[str] = DISQUALIFY,
    trusted_process: bool = False,
) -> tuple[float, dict[str, float], list[float]]:
    """(reward, components, step rewards) of one repository episode (see module doc).

    reward = [1.0 resolved + 0.3 F2P credit + process] - 0.5 P2P broken share - 0.2 if the
    diff did not apply - step and invalid-call costs; a disqualifying hack flag zeroes the
    bracket (the pass terms), never the penalties. ``resolved`` is the judge's visible
    verdict (F2P and P2P): hidden outcomes never reach a reward. ``trusted_process``: each
    run_tests observation counts at most the visible passes the judge saw on the final
    diff, so passes the agent's own runs showed but the submitted diff lacks (a forged
    report, a fix reverted before submit) earn nothing.
    """
    cap = judged_visible(v, task) if trusted_process else None
    process, cost = step_terms(actions, len(task.visible_tests), cap)
    hacked = bool(set(v.hack_flags) & disqualify)
    total = v.f2p_total + v.p2p_total
    c = {
        "resolved": 1.0 if v.visible_resolved else 0.0,
        "applied": 1.0 if v.applied else 0.0,
        "pass_rate": rounded((v.f2p_passed + v.p2p_passed) / total) if total else 0.0,
        "f2p_pass_rate": rounded(v.f2p_passed / v.f2p_total) if v.f2p_total else 0.0,
        "f2p_credit": rounded(f2p_credit(v, task)),
        "p2p_broken": rounded((v.p2p_total - v.p2p_passed) / v.p2p_total)
        if v.p2p_total and v.applied
        else 0.0,
        "process": 0.0 if hacked else rounded(sum(process)),
        "steps": float(len(actions)),
        "step_cost": rounded(STEP_COST * len(actions)),
        "invalid_calls": float(sum(a.observation.error_kind in INVALID_KINDS for a in actions)),
        "apply_penalty": 0.0 if v.applied else W_APPLY,
        "hack_zeroed": 1.0 if hacked else 0.0,
    }
    c["invalid_cost"] = rounded(INVALID_COST * c["invalid_calls"])
    c |= flag_components(v.hack_flags)
    gain = 0.0 if hacked else W_RESOLVED * c["resolved"] + W_F2P * c["f2p_credit"] + c["process"]
    loss = W_P2P * c["p2p_broken"] + c["apply_penalty"] + c["step_cost"] + c["invalid_cost"]
    steps = [rounded((0.0 if hacked else p) - k) for p, k in zip(process, cost, strict=True)]
    return rounded(gain - loss), c, steps
