"""`codeloop exec` judges SWE-bench-format predictions on repository tasks."""

from __future__ import annotations

import json

import pytest

from codeloop.cli import main
from codeloop.io import write_tasks
from tests._repo_fixture import make_repo_task

HACK = (
    "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/conftest.py\n@@ -0,0 +1,2 @@\n+import calc.ops\n+calc.ops.add = lambda a, b: a + b\n"
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tasks.parquet with repos/ beside it, as the clean stage writes them."""
    root = tmp_path_factory.mktemp("exec")
    task = make_repo_task(root)
    write_tasks(root / "tasks.parquet", [task])
    return root, task


def _exec(root, preds, *extra, fmt="jsonl"):
    samples = root / f"preds.{fmt}"
    if fmt == "json":
        samples.write_text(json.dumps(preds))
    else:
        samples.write_text("".join(json.dumps(p) + "\n" for p in preds))
    out = root / "results.jsonl"
    rc = main(["exec", "--tasks", str(root / "tasks.parquet"), "--samples", str(samples),
               "--out", str(out), "--workers", "2", "--no-progress", *extra])
    rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return rc, rows


def _pred(task, patch, name="m"):
    return {"instance_id": task.task_id, "model_patch": patch, "model_name_or_path": name}


def test_predictions_get_resolved_counts_and_flags_in_input_order(setup):
    root, task = setup
    rc, rows = _exec(root, [_pred(task, task.patch, "gold"), _pred(task, None, "empty"),
                            _pred(task, HACK, "hack")])
    assert rc == 0
    assert [(r["model_name_or_path"], r["resolved"]) for r in rows] == [
        ("gold", True), ("empty", False), ("hack", False)]
    assert (rows[0]["f2p_passed"], rows[0]["f2p_total"], rows[0]["p2p_passed"]) == (1, 1, 3)
    assert rows[2]["hack_flags"] == ["conftest_edit"] and rows[2]["dropped"] == ["conftest.py"]


def test_a_json_list_of_predictions_is_read_as_swe_bench_writes_it(setup):
    root, task = setup
    rc, rows = _exec(root, [_pred(task, task.patch)], fmt="json")
    assert rc == 0 and rows[0]["resolved"] is True


def test_a_patch_that_does_not_apply_is_a_row_not_an_error(setup):
    root, task = setup
    rc, rows = _exec(root, [_pred(task, "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n")])
    assert rc == 0 and rows[0]["applied"] is False and rows[0]["status"] == "not_applied"


def test_an_unknown_instance_is_an_input_error_naming_the_line(setup, capsys):
    root, task = setup
    rc, _ = _exec(root, [_pred(task, ""), {"instance_id": "nope", "model_patch": ""}])
    assert rc == 2 and "preds.jsonl:2: field 'instance_id'" in capsys.readouterr().err


def test_a_missing_snapshot_is_our_failure_not_a_verdict(setup, tmp_path, capsys):
    root, task = setup
    rc, _ = _exec(root, [_pred(task, task.patch)], "--repos", str(tmp_path / "none"))
    assert rc == 3 and "not a verdict" in capsys.readouterr().err


def test_a_function_task_row_is_rejected_with_its_reason(setup, tmp_path):
    root, task = setup
    from dataclasses import replace

    write_tasks(tmp_path / "tasks.parquet", [replace(task, kind="function")])
    samples = tmp_path / "p.jsonl"
    samples.write_text(json.dumps(_pred(task, task.patch)) + "\n")
    out = tmp_path / "r.jsonl"
    rc = main(["exec", "--tasks", str(tmp_path / "tasks.parquet"), "--samples", str(samples),
               "--out", str(out), "--repos", str(root / "repos"), "--strict"])
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert rc == 2 and row["status"] == "task_rejected" and "kind 'function'" in row["detail"]
