"""Loaders and validation: canonical tasks out, every malformed row quarantined with a reason."""

from __future__ import annotations

import json

import pytest

from codeloop.config import SourceSpec
from codeloop.data.loaders import (
    detect_and_load,
    load_apps,
    load_canonical,
    load_humaneval,
    load_mbpp,
    load_source,
    split_humaneval_check,
)
from codeloop.data.validate import SourceError

GOOD = {
    "task_id": 1,
    "text": "Write a function to add two numbers.",
    "code": "def add(a, b):\r\n    return a + b",
    "test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"],
    "test_setup_code": "",
    "challenge_test_list": [],
}


def _write(path, lines: list[bytes]) -> str:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return str(path)


def test_humaneval_loads_all_164_tasks_with_tests_from_check(tmp_path):
    res = load_humaneval()
    assert res.rows_in == 164 and len(res.tasks) == 164 and not res.quarantine_rows
    assert all(t.visible_tests and t.entry_point for t in res.tasks)
    assert not any("candidate" in s for t in res.tasks for s in t.visible_tests)


def test_humaneval_check_keeps_loops_whole_and_hoists_fixtures_into_setup():
    src = (
        "def check(candidate):\n    import random\n    assert candidate(1) == 2\n"
        "    lst = [1, 2]\n    for x in lst:\n        assert candidate(x) > x\n"
    )
    setup, tests = split_humaneval_check(src, "inc")
    assert setup == "import random\nlst = [1, 2]"
    assert tests == ["assert inc(1) == 2", "for x in lst:\n    assert inc(x) > x"]


def test_mbpp_row_becomes_canonical_task_with_entry_point_and_license(tmp_path):
    res = load_mbpp(_write(tmp_path / "m.jsonl", [json.dumps(GOOD).encode()]))
    (t,) = res.tasks
    assert (t.task_id, t.entry_point, t.source) == ("mbpp/1", "add", "mbpp")
    assert t.metadata["license"] == "CC-BY-4.0" and t.metadata["provenance"]["row"] == 1
    assert "\r" not in t.reference_solution


@pytest.mark.parametrize(
    ("line", "field", "reason"),
    [
        (b'{"text": "x", "code": ', "", "bad JSON"),
        (b'{"text": "caf\xe9"}', "", "not UTF-8"),
        (json.dumps({**GOOD, "code": ""}).encode(), "code", "empty solution"),
        (json.dumps({**GOOD, "code": "def add(:"}).encode(), "reference_solution", "parse"),
        (json.dumps({**GOOD, "test_list": ["assert add(1,"]}).encode(), "tests[0]", "parse"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "text"}).encode(), "text", "missing"),
        (b"[1, 2]", "", "not an object"),
    ],
)
def test_malformed_mbpp_row_is_quarantined_with_row_field_and_reason(tmp_path, line, field, reason):
    path = _write(tmp_path / "m.jsonl", [json.dumps(GOOD).encode(), line])
    res = load_mbpp(path)
    assert res.rows_in == 2 and len(res.tasks) == 1
    (q,) = res.quarantine_rows
    assert (q["row"], q["field"], q["file"]) == (2, field, path)
    assert reason in q["reason"]


def test_missing_file_stops_with_a_message_naming_it(tmp_path):
    with pytest.raises(SourceError, match="nope.jsonl"):
        load_mbpp(str(tmp_path / "nope.jsonl"))


def test_unknown_source_kind_stops_with_the_allowed_kinds():
    with pytest.raises(SourceError, match="unknown source kind 'mbpq'.*mbpp"):
        load_source(SourceSpec(kind="mbpq", path="x"))


def test_apps_stdio_row_becomes_json_io_tests(tmp_path):
    row = {
        "problem_id": 7,
        "question": "Read n, print 2n.",
        "solutions": json.dumps(["n = int(input())\nprint(2 * n)"]),
        "input_output": json.dumps({"inputs": ["1\n", "5\n"], "outputs": ["2\n", "10\n"]}),
    }
    (t,) = load_apps(_write(tmp_path / "a.jsonl", [json.dumps(row).encode()])).tasks
    assert t.io_style == "stdio" and t.task_id == "apps/7"
    assert json.loads(t.visible_tests[1]) == {"input": "5\n", "output": "10\n"}


def test_codecontests_row_uses_the_python3_solution_and_all_test_groups(tmp_path):
    row = {
        "name": "cc1",
        "description": "Echo.",
        "public_tests": {"input": ["a\n"], "output": ["a\n"]},
        "private_tests": {"input": ["b\n"], "output": ["b\n"]},
        "solutions": {"language": [2, 3], "solution": ["cpp", "print(input())"]},
    }
    (t,) = load_apps(_write(tmp_path / "c.jsonl", [json.dumps(row).encode()])).tasks
    assert t.reference_solution == "print(input())" and len(t.visible_tests) == 2


def test_detect_and_load_recognises_mbpp_fields(tmp_path):
    res = detect_and_load(_write(tmp_path / "x.jsonl", [json.dumps(GOOD).encode()]))
    assert res.tasks[0].source == "mbpp"


def test_canonical_rows_round_trip_through_the_canonical_loader(tmp_path):
    from codeloop.io import write_tasks

    tasks = load_mbpp(_write(tmp_path / "m.jsonl", [json.dumps(GOOD).encode()])).tasks
    write_tasks(tmp_path / "t.parquet", tasks)
    (t,) = load_canonical(str(tmp_path / "t.parquet")).tasks
    assert t.visible_tests == tasks[0].visible_tests and t.metadata["license"] == "CC-BY-4.0"


def test_real_mbpp_loads_without_quarantine(mbpp_path):
    res = load_mbpp(str(mbpp_path))
    assert res.rows_in == len(res.tasks) + len(res.quarantine_rows) and len(res.tasks) > 900
