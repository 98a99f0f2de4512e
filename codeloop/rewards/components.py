"""Reward components: pure functions of one sandbox result (and the episode's actions).

Every function here is deterministic in its inputs, so a reward can be recomputed from
the stored final code, the task and the reward version (``codeloop replay``). Hidden
tests never reach this module: compositions only see the VISIBLE-test ExecResult.
"""

from __future__ import annotations

import ast
import re

from codeloop.sandbox.base import ExecResult, TestResult
from codeloop.schema import Action


def rounded(x: float) -> float:
    """A reward as stored: rounded so rows read cleanly and replay compares exact decimals."""
    return round(float(x), 6)

# Statuses that mean "the program did not even get to be judged": compile-level failures.
SYNTAX_STATUSES = ("syntax_error", "no_code")
# Statuses counted as an error state for process rewards (an error present in the code).
ERROR_STATUSES = (
    "syntax_error",
    "no_code",
    "runtime_error",
    "timeout",
    "memory_limit",
    "output_limit",
    "crashed",
)

# RLTF-style per-test partial credit (reward from unit-test feedback): right type but wrong
# value beats a wrong type; a TypeError/ValueError means the code parsed, ran and reached the call.
RLTF_PASS = 1.0
RLTF_RIGHT_TYPE = 0.3
RLTF_CONTRACT_ERROR = 0.1
RLTF_CONTRACT_ERRORS = ("TypeError", "ValueError")

_CALL_LIKE = re.compile(r"^([A-Za-z_][\w.]*)\(")


def pass_rate(res: ExecResult) -> float:
    """Share of visible tests passed (0 when the task has none)."""
    return res.tests_passed / res.tests_total if res.tests_total else 0.0


def binary_pass(res: ExecResult) -> float:
    """1.0 only when every visible test passed."""
    return 1.0 if res.status == "passed" and res.tests_passed == res.tests_total else 0.0


def is_syntax_failure(res: ExecResult) -> bool:
    return res.status in SYNTAX_STATUSES


def is_timeout(res: ExecResult) -> bool:
    return res.status == "timeout"


def value_type(text: str) -> str | None:
    """The type name of a value from its repr, or None when it cannot be told.

    Literal reprs are parsed (``[1, 2]`` -> list, ``True`` -> bool); stdlib reprs like
    ``Counter({...})`` or ``deque([...])`` give their constructor name. Never evaluated.
    """
    text = (text or "").strip()
    if not text:
        return None
    try:
        return type(ast.literal_eval(text)).__name__
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    if text in ("inf", "-inf", "nan"):
        return "float"
    m = _CALL_LIKE.match(text)
    return m.group(1).rsplit(".", 1)[-1] if m else None


def test_partial_credit(tr: TestResult, io_style: str = "function") -> float:
    """RLTF credit of one test: 1 pass, 0.3 right type/wrong value, 0.1 TypeError/ValueError.

    Departure from RLTF: stdio tests get no right-type credit (every output is a string,
    so the type says nothing); timeouts and other error kinds get 0.
    """
    if tr.passed:
        return RLTF_PASS
    if tr.status == "runtime_error":
        return RLTF_CONTRACT_ERROR if tr.error_type in RLTF_CONTRACT_ERRORS else 0.0
    if tr.status != "failed" or io_style != "function":
        return 0.0
    got, want = value_type(tr.got), value_type(tr.expected)
    return RLTF_RIGHT_TYPE if got is not None and got == want else 0.0


def rltf_partial_credit(res: ExecResult, io_style: str = "function") -> float:
    """Mean per-test RLTF credit over the visible tests.

    When the program failed before any test ran (no per-test results), credit is the plain
    pass rate, which is then 0.
    """
    if not res.tests_total:
        return 0.0
    if not res.test_results:
        return pass_rate(res)
    credit = sum(test_partial_credit(tr, io_style) for tr in res.test_results)
    return credit / res.tests_total


def length_penalty(code: str, reference: str, *, coef: float = 0.05, floor: int = 400) -> float:
    """Penalty in [0, coef] for code longer than max(floor, 3 x reference) characters.

    Relative to the reference so long tasks are not punished; capped so it can only break
    ties, never outweigh a passing test.
    """
    budget = max(floor, 3 * len(reference or ""))
    excess = len(code or "") - budget
    if excess <= 0:
        return 0.0
    return min(coef, coef * excess / budget)


def _potential(action: Action, w_pass: float, w_error: float) -> float:
    obs = action.observation
    frac = obs.tests_passed / obs.tests_total if obs.tests_total else 0.0
    return w_pass * frac - (w_error if obs.status in ERROR_STATUSES else 0.0)


def process_rewards(
    actions: list[Action], *, w_pass: float = 0.05, w_error: float = 0.05, cap: float = 0.1
) -> list[float]:
    """Per-step rewards: fixing a failing test earns w_pass/total, removing an error w_error.

    Potential-based shaping (Ng et al. 1999): Phi(state) = w_pass * visible pass fraction -
    w_error * [error present], step reward = Phi(after) - Phi(before), with Phi = 0 before
    the first action. Why: the sum telescopes to Phi(final), so oscillating (break a test,
    fix it again) or deliberately failing the first try earns nothing, and the total is
    bounded by w_pass + w_error <= cap, far below the weight of passing. Actions without
    an observed status (no code was run) keep the previous state and get 0.
    """
    out: list[float] = []
    prev = 0.0
    for a in actions:
        if not a.observation.status:
            out.append(0.0)
            continue
        phi = _potential(a, w_pass, w_error)
        out.append(phi - prev)
        prev = phi
    total = sum(out)
    if abs(total) > cap and total:
        out = [v * cap / abs(total) for v in out]
    return out
