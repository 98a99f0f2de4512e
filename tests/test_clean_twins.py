"""The bench's natural-duplicate truth (bench/plant.natural_twins) labels by behaviour only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from codeloop.config import SandboxConfig
from codeloop.schema import Task

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from plant import natural_twins  # noqa: E402


def _task(tid: str, entry: str, code: str, tests: list[str]) -> Task:
    return Task(task_id=tid, source="t", prompt=f"task {tid}", entry_point=entry,
                reference_solution=code, visible_tests=tests)


@pytest.fixture(scope="module")
def executor():
    from codeloop.sandbox import make_executor

    ex = make_executor(SandboxConfig(timeout_s=5.0, workers=1))
    yield ex
    ex.close()


def test_natural_twins_pairs_tasks_whose_references_pass_each_others_tests(executor):
    tasks = [
        _task("add", "add", "def add(a, b):\n    return a + b", ["assert add(1, 2) == 3"]),
        _task("sub", "sub", "def sub(a, b):\n    return a - b", ["assert sub(3, 1) == 2"]),
        _task("plus", "plus", "def plus(x, y):\n    return y + x", ["assert plus(2, 5) == 7"]),
        _task("neg", "neg", "def neg(a):\n    return -a", ["assert neg(2) == -2"]),
    ]
    assert natural_twins(tasks, executor) == {(0, 2)}


def test_natural_twins_needs_both_directions_to_pass(executor):
    # "first" passes the tests of "head" (both give 1 on [1, 2]), but not the reverse
    tasks = [
        _task("head", "head", "def head(xs):\n    return xs[0]", ["assert head([1, 2]) == 1"]),
        _task(
            "first",
            "first",
            "def first(xs):\n    return min(xs)",
            ["assert first([1, 2]) == 1", "assert first([3, 0]) == 0"],
        ),
    ]
    assert natural_twins(tasks, executor) == set()
