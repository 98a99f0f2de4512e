"""The repository-clustered SE of a mean: tasks planted in one repository share its
difficulty, so their paired changes are not independent draws."""

from __future__ import annotations

import math
import random

import pytest

from codeloop.evaluate.paired import cluster_se


def _task_se(values: list[float]) -> float:
    n = len(values)
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def test_one_task_per_repository_gives_exactly_the_task_level_se():
    rng = random.Random(0)
    values = [rng.choice([-1.0, 0.0, 0.0, 1.0]) for _ in range(40)]
    labels = [f"repo{i}" for i in range(40)]
    assert cluster_se(values, labels) == pytest.approx(_task_se(values), rel=1e-12)


def test_tasks_that_move_together_within_a_repository_give_a_larger_se():
    # 20 repositories of 3 tasks each; every task of a repository has the repository's value
    rng = random.Random(1)
    per_repo = [rng.choice([-1.0, 0.0, 1.0]) for _ in range(20)]
    values = [v for v in per_repo for _ in range(3)]
    labels = [f"repo{g}" for g in range(20) for _ in range(3)]
    assert cluster_se(values, labels) > 1.5 * _task_se(values)


def test_the_se_matches_a_hand_computed_example():
    # mean 0.6; cluster sums of deviations: a -0.2, b -0.6, c 0.8 -> squares sum 1.04;
    # sqrt(3/2 * 1.04) / 5
    values = [1.0, 0.0, 0.0, 1.0, 1.0]
    assert cluster_se(values, ["a", "a", "b", "c", "c"]) == pytest.approx(math.sqrt(1.56) / 5)


def test_two_repositories_of_opposite_outcomes_give_half():
    # mean 0.5; sums +1 and -1; sqrt(2/1 * 2) / 4
    assert cluster_se([1.0, 1.0, 0.0, 0.0], ["a", "a", "b", "b"]) == pytest.approx(0.5)


def test_a_single_repository_has_no_measurable_spread():
    assert cluster_se([1.0, 0.0, 1.0], ["a", "a", "a"]) == 0.0


def test_labels_of_another_length_are_refused():
    with pytest.raises(ValueError, match="2 values but 3 cluster labels"):
        cluster_se([1.0, 0.0], ["a", "b", "c"])
