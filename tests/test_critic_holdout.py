"""The critic's held-out figures: computed only on a split where both classes stand on
enough rows and tasks, otherwise reported as degenerate with the reason."""

from __future__ import annotations

import random

import pytest

from codeloop.data.generator import generate_tasks
from codeloop.rewards.critic import (
    MIN_HOLDOUT_ROWS_PER_CLASS,
    Critic,
    fit_with_holdout,
    in_holdout,
    mutants,
    roc_auc,
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


def _failing_night(seed: int) -> list:
    """A night where most samples fail: four failing variants of every task's reference,
    and the reference itself (passing) for about one task in sixteen."""
    rng = random.Random(0)
    rows = []
    for t in generate_tasks(100, seed=seed):
        rows += [(t, m, 0.0) for m in mutants(t.reference_solution)[:4]]
        if rng.random() < 0.06:
            rows.append((t, t.reference_solution, 1.0))
    return rows


def _leave_passing_task_out_aucs(rows) -> list[float]:
    """Per passing task: hold it out with 19 all-failing tasks, fit on the rest, and rank the
    held-out rows (its passing row against every held-out failing row, as the stage pools)."""
    passing = [t.task_id for t, _, y in rows if y]
    failing = sorted({t.task_id for t, _, _ in rows} - set(passing))
    aucs = []
    for k, tid in enumerate(passing):
        held_ids = {tid, *failing[k * 19 : (k + 1) * 19]}
        probe = Critic.fit([e for e in rows if e[0].task_id not in held_ids])
        held = [e for e in rows if e[0].task_id in held_ids]
        aucs.append(roc_auc([probe.predict(t, c) for t, c, _ in held], [y for *_, y in held]))
    return aucs


def test_a_critic_fit_on_mostly_failing_nights_ranks_unseen_passing_code_above_chance():
    aucs = [a for seed in (3, 5, 7, 11) for a in _leave_passing_task_out_aucs(_failing_night(seed))]
    assert len(aucs) >= 6
    assert sum(aucs) / len(aucs) > 0.5
