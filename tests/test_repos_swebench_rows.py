"""Repository tasks as SWE-bench instance rows: SWE-bench's column names and types, the
way back, and `codeloop export --format swebench` read by pandas."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from codeloop.cli import main
from codeloop.data.repos.swebench_rows import (
    SWEBENCH_COLUMNS,
    RowError,
    from_swebench,
    to_swebench,
)
from codeloop.io import write_tasks
from tests._repo_fixture import make_repo_task


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    t = make_repo_task(tmp_path_factory.mktemp("rows"))
    return replace(
        t,
        environment="calc-deps-0123abcd",
        difficulty=3,
        metadata={"license": "MIT", "provenance": {"generator": "test"}},
    )


def test_a_row_has_every_swebench_column_as_a_string(task):
    row = to_swebench(task)
    assert set(SWEBENCH_COLUMNS) <= set(row)
    assert all(isinstance(row[c], str) for c in SWEBENCH_COLUMNS)


def test_the_test_lists_are_json_encoded_strings(task):
    row = to_swebench(task)
    assert json.loads(row["FAIL_TO_PASS"]) == task.fail_to_pass
    assert json.loads(row["PASS_TO_PASS"]) == task.pass_to_pass


def test_base_commit_is_the_snapshot_and_the_env_is_the_setup_commit(task):
    row = to_swebench(task)
    assert (row["base_commit"], row["environment_setup_commit"]) == (
        task.snapshot,
        task.environment,
    )
    assert (row["instance_id"], row["problem_statement"]) == (task.task_id, task.prompt)
    assert (row["patch"], row["test_patch"]) == (task.patch, task.test_patch)


def test_a_task_without_an_env_names_its_snapshot_as_the_setup_commit(task):
    row = to_swebench(replace(task, environment=""))
    assert row["environment_setup_commit"] == task.snapshot


def test_version_is_the_snapshot_prefix_unless_the_provenance_has_one(task):
    assert to_swebench(task)["version"] == task.snapshot[:12]
    dated = replace(task, metadata={"provenance": {"version": 3.1}})
    assert to_swebench(dated)["version"] == "3.1"


def test_the_bug_patch_travels_beside_the_swebench_columns(task):
    assert to_swebench(task)["codeloop_bug_patch"] == task.bug_patch


def test_a_task_round_trips_through_its_row(task):
    assert from_swebench(to_swebench(task)) == task


def test_a_function_task_has_no_swebench_row(task):
    with pytest.raises(ValueError, match="kind 'function'"):
        to_swebench(replace(task, kind="function"))


def test_a_plain_swebench_row_shows_its_tests_and_keeps_its_version(task):
    row = {c: v for c, v in to_swebench(task).items() if not c.startswith("codeloop_")}
    got = from_swebench({**row, "version": "0.12"})
    assert got.visible_tests == sorted({*task.fail_to_pass, *task.pass_to_pass})
    assert got.hidden_tests == [] and got.bug_patch == "" and got.source == "swebench"
    assert got.metadata["provenance"]["version"] == "0.12"


def test_a_malformed_test_list_is_named_by_its_column(task):
    with pytest.raises(RowError) as err:
        from_swebench({**to_swebench(task), "PASS_TO_PASS": "[not json"})
    assert err.value.field == "PASS_TO_PASS"


@pytest.fixture(scope="module")
def exported(task, tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    other = replace(task, task_id="calc__calc-2", fail_to_pass=[], pass_to_pass=[])
    write_tasks(root / "tasks.parquet", [task, other, replace(task, task_id="f", kind="function")])
    rc = main(
        [
            "export",
            "--tasks",
            str(root / "tasks.parquet"),
            "--format",
            "swebench",
            "--out",
            str(root / "out"),
        ]
    )
    return rc, root / "out"


def test_export_writes_one_swebench_row_per_repository_task(exported):
    rc, out = exported
    df = pd.read_parquet(out / "test.parquet")
    assert rc == 0 and list(df["instance_id"]) == ["calc__calc-1", "calc__calc-2"]


def test_every_exported_swebench_column_reads_back_as_a_string(exported):
    _, out = exported
    df = pd.read_parquet(out / "test.parquet")
    assert set(SWEBENCH_COLUMNS) <= set(df.columns)
    assert all(isinstance(v, str) for c in SWEBENCH_COLUMNS for v in df[c])


def test_the_exported_fail_to_pass_is_a_json_string_list(exported, task):
    _, out = exported
    df = pd.read_parquet(out / "test.parquet")
    assert [json.loads(v) for v in df["FAIL_TO_PASS"]] == [task.fail_to_pass, []]


def test_the_exported_jsonl_matches_the_parquet_rows(exported):
    _, out = exported
    lines = [json.loads(x) for x in (out / "instances.jsonl").read_text().splitlines()]
    assert lines == pd.read_parquet(out / "test.parquet").to_dict("records")


def test_export_of_tasks_with_no_repository_task_is_bad_input(tmp_path, task, capsys):
    write_tasks(tmp_path / "tasks.parquet", [replace(task, kind="function")])
    rc = main(
        [
            "export",
            "--tasks",
            str(tmp_path / "tasks.parquet"),
            "--format",
            "swebench",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert rc == 2 and "no repository task" in capsys.readouterr().err


def test_synthetic_repository_tasks_round_trip_through_their_rows():
    from codeloop.data.repos.synth import generate_repo_tasks

    tasks, _ = generate_repo_tasks(6, seed=7)
    assert [from_swebench(to_swebench(t)) for t in tasks] == tasks
    assert all(to_swebench(t)["codeloop_bug_patch"] for t in tasks)
