"""Deterministic splits: visible vs hidden tests per task, and the held-out task split.

Both are keyed by sha256 of stable strings (task_id, test text), never by a process
RNG, so the same tasks give the same split on every machine and in every order.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace

from codeloop.schema import Task


def _rank(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def split_tests(task: Task, visible_fraction: float, min_visible: int) -> Task:
    """Copy of task with its tests split into visible (feed rewards) and hidden (eval only).

    ``round(fraction * n)`` tests, at least ``min_visible``, chosen by a hash of
    task_id + test so the visible set is not just the first (often easiest) tests; the
    original order is kept within each side. When fewer than two tests exist, all are
    visible and ``metadata.few_tests`` flags the task (no hidden check is possible).
    """
    tests = task.all_tests()
    n = len(tests)
    k = min(n, max(min_visible, round(visible_fraction * n)))
    if n >= 2 and k >= n:
        k = n - 1  # keep at least one hidden test whenever there are two
    order = sorted(range(n), key=lambda i: _rank(task.task_id, str(i), tests[i]))
    visible_idx = set(order[:k])
    meta = dict(task.metadata)
    few = n < 2 or k < min_visible
    if few:
        meta["few_tests"] = True
    else:
        meta.pop("few_tests", None)
    return replace(
        task,
        visible_tests=[t for i, t in enumerate(tests) if i in visible_idx],
        hidden_tests=[t for i, t in enumerate(tests) if i not in visible_idx],
        metadata=meta,
    )


def visible_subset(task: Task, share: float, iteration: int, seed: int) -> Task:
    """Copy of a function task showing only a seeded share of its visible tests (at least
    one), by a hash of task id, iteration, seed and test: every episode of a GRPO group
    sees the same ones, the next iteration others, and a replay recomputes them from
    the trajectory's iteration and seed. share >= 1 (or one visible test) keeps all."""
    tests = task.visible_tests
    if share >= 1 or len(tests) <= 1 or task.kind != "function":
        return task
    k = max(1, round(share * len(tests)))
    order = sorted(range(len(tests)),
                   key=lambda i: _rank("subset", task.task_id, str(iteration), str(seed), tests[i]))
    keep = set(order[:k])
    return replace(task, visible_tests=[t for i, t in enumerate(tests) if i in keep])


def heldout_split(tasks: list[Task], fraction: float) -> tuple[list[Task], list[Task]]:
    """(train, heldout): ``ceil(fraction * n)`` tasks by task_id hash go to heldout."""
    if fraction <= 0 or not tasks:
        return list(tasks), []
    k = math.ceil(fraction * len(tasks))
    chosen = set(sorted((_rank("heldout", t.task_id), t.task_id) for t in tasks)[:k])
    ids = {tid for _, tid in chosen}
    return [t for t in tasks if t.task_id not in ids], [t for t in tasks if t.task_id in ids]
