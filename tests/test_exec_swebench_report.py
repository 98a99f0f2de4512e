"""`codeloop exec` on SWE-bench predictions writes the SWE-bench harness's run report
beside its verdict rows: resolved, unresolved, empty-patch, error and incomplete ids."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from codeloop.cli import main
from codeloop.data.repos.diffs import file_diff
from codeloop.evaluate.harness_report import harness_report
from codeloop.io import write_tasks
from tests._repo_fixture import GOLD_EDIT, OPS, make_repo_task

HARNESS_KEYS = {
    "total_instances",
    "submitted_instances",
    "completed_instances",
    "resolved_instances",
    "unresolved_instances",
    "empty_patch_instances",
    "error_instances",
    "completed_ids",
    "incomplete_ids",
    "empty_patch_ids",
    "submitted_ids",
    "resolved_ids",
    "unresolved_ids",
    "error_ids",
    "schema_version",
}
BUGGY_OPS = OPS.replace(GOLD_EDIT[2], GOLD_EDIT[1])
WRONG = file_diff("calc/ops.py", BUGGY_OPS, BUGGY_OPS.replace("a - b", "a * b"))
STALE = "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n"


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """One exec run: a resolving, a wrong, a non-applying and an empty prediction, one for
    a task the loader rejects (no FAIL_TO_PASS), and a task with no prediction."""
    root = tmp_path_factory.mktemp("report")
    task = make_repo_task(root)
    ids = {k: f"calc__calc-{k}" for k in ("gold", "wrong", "stale", "empty", "bad", "none")}
    tasks = [replace(task, task_id=i) for k, i in ids.items() if k != "bad"]
    tasks.append(replace(task, task_id=ids["bad"], fail_to_pass=[]))
    write_tasks(root / "tasks.parquet", tasks)
    patches = {"gold": task.patch, "wrong": WRONG, "stale": STALE, "empty": "", "bad": task.patch}
    preds = [
        {"instance_id": ids[k], "model_name_or_path": "m", "model_patch": p}
        for k, p in patches.items()
    ]
    (root / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    rc = main(
        [
            "exec",
            "--tasks",
            str(root / "tasks.parquet"),
            "--samples",
            str(root / "preds.jsonl"),
            "--out",
            str(root / "results.jsonl"),
            "--workers",
            "2",
            "--no-progress",
        ]
    )
    return rc, root, ids


def _report(judged) -> dict:
    _, root, _ = judged
    return json.loads((root / "results.report.json").read_text())


def test_the_report_has_the_harness_keys_beside_the_results(judged):
    rc, root, _ = judged
    assert rc == 0 and (root / "results.jsonl").exists()
    assert set(_report(judged)) == HARNESS_KEYS and _report(judged)["schema_version"] == 2


def test_a_resolving_patch_is_resolved_and_completed(judged):
    rep, ids = _report(judged), judged[2]
    assert rep["resolved_ids"] == [ids["gold"]] and ids["gold"] in rep["completed_ids"]


def test_a_wrong_or_non_applying_patch_is_unresolved_not_an_error(judged):
    rep, ids = _report(judged), judged[2]
    assert rep["unresolved_ids"] == sorted([ids["wrong"], ids["stale"]])


def test_an_empty_patch_is_an_empty_patch_instance_not_completed(judged):
    rep, ids = _report(judged), judged[2]
    assert rep["empty_patch_ids"] == [ids["empty"]] and ids["empty"] not in rep["completed_ids"]


def test_a_task_the_loader_rejects_is_an_error(judged):
    rep, ids = _report(judged), judged[2]
    assert rep["error_ids"] == [ids["bad"]]


def test_a_task_without_a_prediction_is_incomplete(judged):
    rep, ids = _report(judged), judged[2]
    assert rep["incomplete_ids"] == [ids["none"]]


def test_the_counts_add_up_as_the_harness_s_do(judged):
    rep = _report(judged)
    assert (rep["total_instances"], rep["submitted_instances"], rep["completed_instances"]) == (
        6,
        5,
        3,
    )
    assert rep["submitted_instances"] == (
        rep["completed_instances"] + rep["empty_patch_instances"] + rep["error_instances"]
    )
    assert all(
        rep[f"{k}_instances"] == len(rep[f"{k}_ids"])
        for k in ("completed", "resolved", "unresolved", "empty_patch", "error")
    )


def test_report_names_where_the_report_goes(judged, tmp_path):
    _, root, ids = judged
    preds = tmp_path / "p.jsonl"
    preds.write_text(json.dumps({"instance_id": ids["empty"], "model_patch": ""}) + "\n")
    rc = main(
        [
            "exec",
            "--tasks",
            str(root / "tasks.parquet"),
            "--samples",
            str(preds),
            "--out",
            str(tmp_path / "r.jsonl"),
            "--report",
            str(tmp_path / "x" / "run.json"),
            "--no-progress",
        ]
    )
    assert rc == 0 and json.loads((tmp_path / "x" / "run.json").read_text())["empty_patch_ids"]


def test_a_repeated_instance_counts_once_with_its_last_prediction():
    preds = [{"instance_id": "a", "model_patch": "x"}, {"instance_id": "a", "model_patch": "y"}]
    rows = [{"resolved": False, "status": "exited"}, {"resolved": True, "status": "exited"}]
    rep = harness_report(preds, rows, ["a"])
    assert (rep["submitted_instances"], rep["resolved_ids"], rep["unresolved_ids"]) == (
        1,
        ["a"],
        [],
    )


def test_a_judge_error_is_an_error_instance():
    rep = harness_report(
        [{"instance_id": "a", "model_patch": "x"}],
        [{"resolved": False, "status": "judge_error"}],
        ["a"],
    )
    assert rep["error_ids"] == ["a"] and rep["completed_ids"] == []


def test_predictions_are_judged_against_the_swebench_instances_file_itself(judged, tmp_path):
    from codeloop.data.repos.swebench_rows import to_swebench
    from codeloop.io import read_tasks

    _, root, ids = judged
    (gold,) = [t for t in read_tasks(root / "tasks.parquet") if t.task_id == ids["gold"]]
    instances = root / "instances.jsonl"
    instances.write_text(json.dumps(to_swebench(gold)) + "\n")
    preds = tmp_path / "p.jsonl"
    preds.write_text(json.dumps({"instance_id": gold.task_id, "model_patch": gold.patch}) + "\n")
    out = tmp_path / "r.jsonl"
    rc = main(
        [
            "exec",
            "--tasks",
            str(instances),
            "--samples",
            str(preds),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert rc == 0 and row["resolved"] is True and row["hidden_total"] == 1
