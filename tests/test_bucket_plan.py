"""Buckets from proxies and pass rates, test splits, and the sampling plan."""

from __future__ import annotations

from codeloop.config import parse_params
from codeloop.data.difficulty import assign_buckets, difficulty_scores, proportions_for
from codeloop.data.holdout import heldout_split, split_tests
from codeloop.io import read_tasks, write_json, write_tasks
from codeloop.paths import Paths
from codeloop.schema import Task
from codeloop.stages import bucket


def _tasks(n: int) -> list[Task]:
    return [
        Task(task_id=f"t{i}", source="x", prompt="p" * (10 + i), entry_point="f",
             reference_solution="def f(x):\n" + "    x = x + 1\n" * (i + 1) + "    return x",
             visible_tests=[f"assert f({k}) == {k + i + 1}" for k in range(1 + i % 4)])
        for i in range(n)
    ]


def test_longer_tasks_get_harder_buckets_from_proxies():
    ids = assign_buckets(difficulty_scores(_tasks(9), {}, 0.8), 3)
    assert ids[0] == 0 and ids[-1] == 2 and ids[:3].mean() < ids[-3:].mean()


def test_a_low_pass_rate_moves_an_easy_task_into_the_hardest_bucket():
    tasks = _tasks(9)
    ids = assign_buckets(difficulty_scores(tasks, {"t0": 0.0, "t8": 1.0}, 0.8), 3)
    assert ids[0] == 2 and ids[8] == 0


def test_curriculum_stage_applies_until_its_iteration_then_defaults():
    cfg = parse_params({"bucket": {"curriculum": [{"until": 1, "proportions": [1, 0, 0]}]}}).bucket
    assert proportions_for(cfg, 1) == [1.0, 0.0, 0.0]
    assert proportions_for(cfg, 2) == [0.4, 0.4, 0.2]


def test_split_is_deterministic_keeps_a_hidden_test_and_flags_single_test_tasks():
    t = _tasks(4)[3]  # four tests
    a, b = split_tests(t, 0.5, 1), split_tests(t, 0.5, 1)
    assert a.visible_tests == b.visible_tests and len(a.visible_tests) == 2
    assert sorted(a.visible_tests + a.hidden_tests) == sorted(t.visible_tests)
    one = split_tests(_tasks(1)[0], 0.5, 1)
    assert one.metadata["few_tests"] and one.hidden_tests == []


def test_heldout_split_is_disjoint_and_sized_by_fraction():
    train, held = heldout_split(_tasks(20), 0.15)
    assert len(held) == 3 and not {t.task_id for t in train} & {t.task_id for t in held}


def test_the_bucket_stage_writes_plan_by_proportions_and_bucket_ids(tmp_path):
    paths = Paths(tmp_path)
    write_tasks(paths.clean_tasks, _tasks(30))
    write_json(paths.pass_rates, {})
    params = parse_params({"bucket": {"tasks_per_iteration": 10, "curriculum": []}})
    plan = bucket.run(params, paths)
    assert plan["counts"] == [4, 4, 2] and len(set(plan["task_ids"])) == 10
    out = read_tasks(paths.bucket_tasks)
    assert {t.difficulty for t in out} == {0, 1, 2}
    assert "solution_nodes" in out[0].metadata["difficulty_proxies"]


def test_plan_never_asks_more_than_a_bucket_holds(tmp_path):
    paths = Paths(tmp_path)
    write_tasks(paths.clean_tasks, _tasks(6))
    params = parse_params({"bucket": {"tasks_per_iteration": 5, "proportions": [0, 0, 1],
                                      "curriculum": []}})
    plan = bucket.run(params, paths)
    assert plan["counts"][2] == 2 and sum(plan["counts"]) == 5


def _repo_tasks(n: int) -> list[Task]:
    return [
        Task(task_id=f"r{i}", source="synthetic_repo", kind="repo", prompt="fix " * (50 + i),
             entry_point="", reference_solution="", visible_tests=[], snapshot=f"s{i}")
        for i in range(n)
    ]


def test_repo_tasks_planned_apart_come_on_top_of_the_function_tasks(tmp_path):
    paths = Paths(tmp_path)
    write_tasks(paths.clean_tasks, _tasks(30) + _repo_tasks(12))
    params = parse_params({"bucket": {"tasks_per_iteration": 10, "repo_tasks_per_iteration": 6,
                                      "curriculum": []}})
    plan = bucket.run(params, paths)
    ids = plan["task_ids"]
    assert len(set(ids)) == 16 and plan["repo_tasks"] == 6
    assert sum(i.startswith("r") for i in ids) == 6 and ids[-6:] == sorted(ids[-6:])


def test_planned_apart_each_kind_fills_every_bucket_of_its_own(tmp_path):
    paths = Paths(tmp_path)
    write_tasks(paths.clean_tasks, _tasks(30) + _repo_tasks(12))
    params = parse_params({"bucket": {"repo_tasks_per_iteration": 6}})
    bucket.run(params, paths)
    out = read_tasks(paths.bucket_tasks)
    for kind in ("function", "repo"):
        assert {t.difficulty for t in out if t.kind == kind} == {0, 1, 2}

