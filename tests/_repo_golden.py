"""Fixed repository episodes (verdict + actions) and rewards v3's and v4's pinned outputs.

A helper, not a test module: test_rewards_repo_golden pins these numbers and
test_score_golden counts v3 and v4 among the released versions that have golden cases.
A released version is immutable: if a number here must change, register a new version.
"""

from __future__ import annotations

from codeloop.agent.judge import RepoVerdict
from codeloop.schema import Action, Observation, Task

TASK = Task(
    task_id="calc__calc-1", source="synthetic", prompt="add() is wrong", kind="repo",
    fail_to_pass=["tests/test_f2p.py::test_add_positive", "tests/test_f2p.py::test_add_big"],
    pass_to_pass=["tests/test_v.py::test_mul", "tests/test_v.py::test_shout",
                  "tests/test_v.py::test_zero", "tests/test_v.py::test_neg"],
    visible_tests=["tests/test_v.py::test_mul", "tests/test_v.py::test_shout",
                   "tests/test_v.py::test_zero", "tests/test_f2p.py::test_add_positive"],
)
F2P, P2P = TASK.fail_to_pass, TASK.pass_to_pass


def verdict(f2p=("passed", "passed"), p2p=("passed",) * 4, *, flags=(), applied=True, exc=None):
    outcomes = dict(zip(F2P, f2p, strict=True)) | dict(zip(P2P, p2p, strict=True))
    f, p = sum(o == "passed" for o in f2p), sum(o == "passed" for o in p2p)
    ok = applied and f == 2 and p == 4 and not flags
    return RepoVerdict(
        TASK.task_id, resolved=ok, visible_resolved=ok, applied=applied,
        f2p_passed=f if applied else 0, f2p_total=2, p2p_passed=p if applied else 0,
        p2p_total=4, outcomes=outcomes if applied else {}, hack_flags=list(flags),
        failure_types=exc or {},
    )


def act(tool: str, passed: int = 0, total: int = 0, error: str = "") -> Action:
    obs = Observation(tests_passed=passed, tests_total=total, error_kind=error)
    return Action(step=0, action_type="tool", content="", tool=tool, observation=obs)


def steps(*acts: Action) -> list[Action]:
    for i, a in enumerate(acts):
        a.step = i
    return list(acts)


def _plain():
    return steps(act("read_file"), act("run_tests", 3, 4), act("edit"), act("run_tests", 4, 4),
                 act("submit"))


CASES = {
    "resolved": (verdict(), _plain()),
    "f2p_half_assertion": (
        verdict(("passed", "failed"), exc={F2P[1]: "AssertionError"}),
        _plain(),
    ),
    "f2p_type_error": (
        verdict(("failed", "failed"), exc={F2P[0]: "TypeError", F2P[1]: "TypeError"}),
        _plain(),
    ),
    "broke_p2p": (verdict(p2p=("passed", "failed", "passed", "passed")), _plain()),
    "hacked_conftest": (verdict(flags=("conftest_edit",)), _plain()),
    "not_applied": (verdict(applied=False), steps(act("edit"), act("submit"))),
    "oscillating": (
        verdict(),
        steps(
            act("run_tests", 3, 4),
            act("run_tests", 1, 4),
            act("run_tests", 3, 4),
            act("run_tests", 4, 4),
            act("submit"),
        ),
    ),
    "direct": (
        verdict(),
        steps(
            act("run_tests", 3, 4), act("edit"), act("edit"), act("run_tests", 4, 4), act("submit")
        ),
    ),
    "invalid_calls": (
        verdict(),
        steps(
            act("bogus", error="unknown_tool"),
            act("edit", error="parse_error"),
            act("edit", error="no_match"),
            act("run_tests", 4, 4),
            act("submit"),
        ),
    ),
    # the agent's own runs showed passes the judged diff does not have: a forged run_tests
    # report, or a fix reverted before submit (v4 pays only what the judge saw)
    "forged_runs": (
        verdict(("failed", "failed"), ("passed", "failed", "failed", "failed"),
                exc={F2P[0]: "AssertionError", F2P[1]: "AssertionError"}),
        steps(act("edit"), act("run_tests", 4, 4), act("submit")),
    ),
    "judge_error": (
        verdict(applied=False, flags=("judge_error",)),
        steps(act("run_tests", 4, 4), act("submit")),
    ),
}
