"""SWE-bench-format instances with a local clone (a real git repository built here):
the base tree without history, quarantine of unbuildable rows, verification in the sandbox."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from codeloop.config import SourceSpec, parse_params
from codeloop.data.curate import curate
from codeloop.data.loaders import load_source
from codeloop.data.repos.diffs import file_diff
from codeloop.data.repos.store import snapshot_path
from codeloop.data.validate import SourceError
from codeloop.io import read_tasks


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


BUGGY = (
    "def mean(xs):\n    return sum(xs) / (len(xs) + 1)\n\n\ndef total(xs):\n    return sum(xs)\n"
)
FIXED = BUGGY.replace("(len(xs) + 1)", "len(xs)")
TESTS = "from pkg.mathx import total\n\n\ndef test_total():\n    assert total([1, 2]) == 3\n"
MORE = TESTS.replace("import total", "import mean, total") + (
    "\n\ndef test_mean():\n    assert mean([2, 4]) == 3\n"
)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "color.ui=never", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


def _commit(repo: Path, files: dict[str, str], msg: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", msg)
    return _git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def instances(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("swebench")
    clone = tmp / "clones" / "acme__mathx"
    clone.mkdir(parents=True)
    _git(clone, "init", "-q")
    base = _commit(clone, {"pkg/__init__.py": "", "pkg/mathx.py": BUGGY,
                           "tests/test_mathx.py": TESTS}, "buggy mean")
    fix = _commit(clone, {"pkg/mathx.py": FIXED, "tests/test_mathx.py": MORE}, "fix mean")
    _commit(clone, {"FUTURE.md": "the answer is in history\n"}, "later work")
    good = {
        "instance_id": "acme__mathx-1", "repo": "acme/mathx", "base_commit": base,
        "patch": _git(clone, "diff", base, fix, "--", "pkg"),
        "test_patch": _git(clone, "diff", base, fix, "--", "tests"),
        "problem_statement": "mean([2, 4]) returns 2.0 instead of 3.",
        "FAIL_TO_PASS": json.dumps(["tests/test_mathx.py::test_mean"]),
        "PASS_TO_PASS": json.dumps(["tests/test_mathx.py::test_total"]),
    }
    rows = [
        good,
        {**good, "instance_id": "acme__mathx-2", "base_commit": "deadbeef" * 5},
        {**good, "instance_id": "other__x-1", "repo": "other/x"},
        {**good, "instance_id": "acme__mathx-3",  # its F2P already passes on the base
         "patch": file_diff("pkg/mathx.py", BUGGY, FIXED + "# total needs no change\n"),
         "problem_statement": "Something about total feels off to me.",
         "FAIL_TO_PASS": json.dumps(["tests/test_mathx.py::test_total"]), "PASS_TO_PASS": "[]"},
    ]
    path = tmp / "instances.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp, path


def _spec(path):
    return SourceSpec(kind="swebench", path=str(path))


def test_the_snapshot_is_the_base_commit_tree_without_history(instances):
    tmp, path = instances
    res = load_source(_spec(path), tmp / "store", str(tmp / "clones"))
    snap = snapshot_path(tmp / "store", res.tasks[0].snapshot)
    assert (snap / "pkg" / "mathx.py").read_text() == BUGGY
    assert not (snap / ".git").exists() and not (snap / "FUTURE.md").exists()


def test_rows_that_cannot_be_built_are_quarantined_with_the_reason(instances):
    tmp, path = instances
    res = load_source(_spec(path), tmp / "store2", str(tmp / "clones"))
    got = {(q["row"], q["field"]) for q in res.quarantine_rows}
    assert got == {(2, "base_commit"), (3, "repo")}
    assert "no local clone other__x" in next(
        q["reason"] for q in res.quarantine_rows if q["row"] == 3
    )
    assert [t.task_id for t in res.tasks] == ["acme__mathx-1", "acme__mathx-3"]


def test_a_swebench_source_needs_the_clones_dir(instances):
    tmp, path = instances
    with pytest.raises(SourceError, match="repos_dir"):
        load_source(_spec(path), tmp / "store3", "")


@pytest.fixture(scope="module")
def cleaned(instances):
    tmp, path = instances
    params = parse_params({
        "clean": {"sources": [{"kind": "swebench", "path": str(path)}], "frozen": [],
                  "repos_dir": str(tmp / "clones"), "verify_runs": 0, "repo_verify_runs": 1,
                  "repo_tasks": {"enabled": False}},
        "sandbox": {"backend": "local", "timeout_s": 30},
    })
    return curate(params, tmp / "out"), tmp / "out"


def test_clean_keeps_the_row_that_fails_before_and_passes_after(cleaned):
    _, out = cleaned
    assert [t.task_id for t in read_tasks(out / "tasks.parquet")] == ["acme__mathx-1"]


def test_a_row_that_does_not_verify_is_quarantined_with_the_reason_not_dropped(cleaned):
    report, out = cleaned
    rows = [q for q in read_jsonl(out / "quarantine.jsonl") if q.get("task_id") == "acme__mathx-3"]
    assert len(rows) == 1 and rows[0]["row"] == 4 and rows[0]["file"] == "instances.jsonl"
    assert rows[0]["reason"].startswith("unverified: fail_to_pass_passes_unfixed")
    assert rows[0]["field"] == "fail_to_pass" and rows[0]["source"] == "swebench"
    assert report["dropped"] == 0 and report["dropped_tasks"] == []


def test_the_report_counts_the_unverified_row_among_the_quarantined_and_balances(cleaned):
    report, _ = cleaned
    assert report["quarantined"] == 3 and report["quarantined_unverified"] == 1
    assert report["balanced"]


def test_the_expert_fixes_a_swebench_task_it_knows_no_function_name_of(instances):
    import re

    from codeloop.data.repos.expert import expert_calls

    tmp, path = instances
    res = load_source(_spec(path), tmp / "store4", str(tmp / "clones"))
    task = res.tasks[0]
    text = BUGGY
    calls = expert_calls(task, tmp / "store4")
    for c in calls:
        if c["tool"] == "search":
            assert re.search(c["args"]["pattern"], text)
        if c["tool"] == "edit":
            assert text.count(c["args"]["old"]) == 1
            text = text.replace(c["args"]["old"], c["args"]["new"])
    assert text == FIXED and "search" in [c["tool"] for c in calls]


def test_a_row_whose_environment_is_a_path_is_quarantined_naming_the_field(instances, tmp_path):
    tmp, path = instances
    row = {**read_jsonl(path)[0], "codeloop_environment": "../../envs"}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    res = load_source(_spec(tmp_path / "rows.jsonl"), tmp_path / "store", str(tmp / "clones"))
    assert not res.tasks
    assert [q["field"] for q in res.quarantine_rows] == ["environment"]
    assert "not one plain dir name" in res.quarantine_rows[0]["reason"]
