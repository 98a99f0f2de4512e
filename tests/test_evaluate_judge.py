"""judge_episodes with the real sandbox: hidden tests decide, timeouts are counted."""

from __future__ import annotations

import pytest

from codeloop.config import SandboxConfig
from codeloop.evaluate.metrics import judge_episodes, summarize
from codeloop.schema import Task, Trajectory

TASK = Task(
    task_id="a",
    source="s",
    prompt="p",
    entry_point="f",
    visible_tests=["assert f(1) == 2"],
    hidden_tests=["assert f(5) == 6"],
)
CODES = (
    "def f(x):\n    return x + 1",
    "def f(x):\n    return 2",
    "def f(x):\n    while True:\n        pass",
)


@pytest.fixture(scope="module")
def metrics():
    from codeloop.sandbox import make_executor

    ex = make_executor(SandboxConfig(timeout_s=1.0))
    try:
        trajs = [Trajectory(str(i), "a", "a", "p", final_code=c) for i, c in enumerate(CODES)]
        return summarize(judge_episodes(trajs, {"a": TASK}, ex), n=3)
    finally:
        ex.close()


def test_a_visible_only_hack_is_not_counted_correct(metrics):
    assert metrics["pass@1"] == pytest.approx(1 / 3)
    assert metrics["visible_pass_rate"] == pytest.approx(2 / 3)


def test_an_infinite_loop_counts_as_a_timeout(metrics):
    assert metrics["timeout_rate"] == pytest.approx(1 / 3)
