"""Builders shared by the rewards tests (tasks, trajectories, sandbox results).

Real codeloop.schema / codeloop.sandbox.base objects, built literally: until rollout's
real trajectories exist, these are the episodes the rewards are tested on.
"""

from __future__ import annotations

from codeloop.sandbox.base import ExecResult
from codeloop.sandbox.base import TestResult as _TR
from codeloop.schema import Action, Observation, Task, Trajectory, TrajectoryMetadata

ADD_TASK = Task(
    task_id="t-add",
    source="synthetic",
    prompt="Write add_three(x) that returns x plus three.",
    entry_point="add_three",
    reference_solution="def add_three(x):\n    return x + 3\n",
    visible_tests=["assert add_three(4) == 7", "assert add_three(10) == 13"],
    hidden_tests=["assert add_three(-5) == -2", "assert add_three(100) == 103"],
)

GOOD = "def add_three(x):\n    return x + 3\n"
WRONG_VALUE = "def add_three(x):\n    return x + 2\n"
WRONG_TYPE = "def add_three(x):\n    return str(x + 3)\n"
SYNTAX = "def add_three(x)\n    return x + 3\n"
LOOP = "def add_three(x):\n    while True:\n        pass\n"
# A hack: special-cases the visible inputs, fails the hidden tests.
SPECIAL = (
    "def add_three(x):\n    if x == 4:\n        return 7\n    if x == 10:\n"
    "        return 13\n    return 0\n"
)


def obs(status: str, passed: int, total: int = 2) -> Observation:
    return Observation(status=status, tests_passed=passed, tests_total=total)


def traj(
    code: str,
    *,
    tid: str = "tr-0",
    task: Task = ADD_TASK,
    key: str | None = None,
    steps: list[Observation] | None = None,
) -> Trajectory:
    steps = steps or [obs("passed" if code == GOOD else "failed", 2 if code == GOOD else 0)]
    actions = [
        Action(step=i, action_type="generate" if i == 0 else "revise", content=code, observation=o)
        for i, o in enumerate(steps)
    ]
    return Trajectory(
        trajectory_id=tid,
        task_id=task.task_id,
        prompt_key=key or task.task_id,
        prompt=task.prompt,
        actions=actions,
        final_code=code,
        done=True,
        terminal_reason="all_tests_passed" if code == GOOD else "max_steps",
        metadata=TrajectoryMetadata(model_name="tiny", seed=0),
    )


def result(status: str, tests: list[tuple[str, str, str, str]]) -> ExecResult:
    """tests: (status, got, expected, error_type) per visible test."""
    trs = [
        _TR(index=i, passed=s == "passed", status=s, got=g, expected=e, error_type=et)
        for i, (s, g, e, et) in enumerate(tests)
    ]
    return ExecResult(
        status=status,
        tests_passed=sum(t.passed for t in trs),
        tests_total=len(trs),
        test_results=trs,
    )
