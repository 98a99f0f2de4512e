"""The critic's held-out figures: computed only on a split where both classes stand on
enough rows and tasks, otherwise reported as degenerate with the reason."""

from __future__ import annotations

import pytest

from codeloop.data.generator import generate_tasks
from codeloop.rewards.critic import (
    MIN_HOLDOUT_ROWS_PER_CLASS,
    fit_with_holdout,
    in_holdout,
    mutants,
)

FRACTION, SEED = 0.2, 0


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(60, seed=11)


def _balanced(tasks):
    """Each task's reference (labelled passing) and its mutants (labelled failing)."""
    out = []
    for t in tasks:
        out.append((t, t.reference_solution, 1.0))
        out += [(t, m, 0.0) for m in mutants(t.reference_solution)]
    return out


def _mostly_passing(tasks, failing_task):
    """A memorising policy's night: six passing samples per task, one failing sample of one
    held-out task (a held-out split about 98% one class)."""
    out = [(t, t.reference_solution, 1.0) for t in tasks for _ in range(6)]
    return out + [(failing_task, mutants(failing_task.reference_solution)[0], 0.0)]


def _fit(examples):
    return fit_with_holdout(examples, holdout_fraction=FRACTION, seed=SEED, epochs=20)[1]


def test_a_split_with_both_classes_on_many_tasks_gets_an_auc_and_an_accuracy(tasks):
    m = _fit(_balanced(tasks))
    assert m["holdout_status"] == "ok"
    assert m["holdout_auc"] > 0.6
    assert 0 < m["holdout_accuracy"] <= 1


def test_a_one_class_held_out_split_gets_no_auc_and_says_degenerate(tasks):
    m = _fit([(t, t.reference_solution, 1.0) for t in tasks])
    assert (m["holdout_auc"], m["holdout_accuracy"]) == (None, None)
    assert m["holdout_status"].startswith("degenerate: 0 failing rows from 0 tasks")


def test_a_mostly_one_class_split_gets_no_accuracy_that_only_counts_the_majority(tasks):
    held = next(t for t in tasks if in_holdout(t.task_id, FRACTION, SEED))
    m = _fit(_mostly_passing(tasks, held))
    assert m["n_holdout"] - m["n_holdout_passing"] == 1
    assert (m["holdout_auc"], m["holdout_accuracy"]) == (None, None)
    assert "1 failing rows from 1 tasks" in m["holdout_status"]


def test_a_minority_class_from_too_few_tasks_is_degenerate_however_many_its_rows(tasks):
    held = [t for t in tasks if in_holdout(t.task_id, FRACTION, SEED)]
    passing = [(t, t.reference_solution, 1.0) for t in tasks for _ in range(3)]
    failing = [(t, m, 0.0) for t in held[:2] for m in mutants(t.reference_solution) * 3]
    assert len(failing) >= MIN_HOLDOUT_ROWS_PER_CLASS
    m = _fit(passing + failing)
    assert m["holdout_auc"] is None
    assert "failing rows from 2 tasks" in m["holdout_status"]
