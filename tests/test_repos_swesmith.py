"""SWE-smith and SWE-Gym style rows through the ``swebench`` source, with a local clone
(a real git repository built here): the bug patch planted on the clean tree, its reverse
as the fix, bad rows quarantined by file, row and field, verification in the sandbox."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from codeloop.agent.patches import apply_patch
from codeloop.config import SourceSpec, parse_params
from codeloop.data.curate import curate
from codeloop.data.loaders import load_source
from codeloop.data.repos.diffs import file_diff
from codeloop.data.repos.store import snapshot_path
from codeloop.io import read_tasks

CLEAN = "def mean(xs):\n    return sum(xs) / len(xs)\n\n\ndef total(xs):\n    return sum(xs)\n"
BUGGY = CLEAN.replace("len(xs)", "(len(xs) + 1)")
TESTS = (
    "from pkg.mathx import mean, total\n\n\ndef test_total():\n    assert total([1, 2]) == 3\n"
    "\n\ndef test_mean():\n    assert mean([2, 4]) == 3\n"
)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "color.ui=never", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """(tmp dir, instances file): SWE-smith rows over a clone of acme/mathx, a SWE-Gym row."""
    tmp = tmp_path_factory.mktemp("swesmith")
    clone = tmp / "clones" / "acme__mathx"
    clone.mkdir(parents=True)
    _git(clone, "init", "-q")
    for rel, body in {
        "pkg/__init__.py": "",
        "pkg/mathx.py": CLEAN,
        "tests/test_mathx.py": TESTS,
    }.items():
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        (clone / rel).write_text(body)
    _git(clone, "add", "-A")
    _git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clean")
    commit = _git(clone, "rev-parse", "HEAD").strip()
    short = commit[:8]
    smith = {
        "instance_id": f"acme__mathx.{short}.func_pm_op_change__k3v1",
        "repo": f"swesmith/acme__mathx.{short}",
        "patch": file_diff("pkg/mathx.py", CLEAN, BUGGY),
        "FAIL_TO_PASS": ["tests/test_mathx.py::test_mean"],
        "PASS_TO_PASS": ["tests/test_mathx.py::test_total"],
        "image_name": f"swebench/swesmith.x86_64.acme_1776_mathx.{short}",
        "problem_statement": "mean([2, 4]) returns 2.0 instead of 3.",
        "created_at": "2025-04-01T00:00:00",
    }
    gym = {  # SWE-Gym: SWE-bench's fields, no version or environment_setup_commit
        "instance_id": "acme__mathx-7",
        "repo": "acme/mathx",
        "base_commit": commit,
        "patch": file_diff("pkg/mathx.py", CLEAN, CLEAN + "\n# mean is fine\n"),
        "test_patch": "diff --git a/tests/test_extra.py b/tests/test_extra.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/test_extra.py\n@@ -0,0 +1,2 @@\n+def test_one():\n+    assert 1\n",
        "problem_statement": "A note is missing.",
        "FAIL_TO_PASS": json.dumps(["tests/test_extra.py::test_one"]),
        "PASS_TO_PASS": "[]",
    }
    bad = [
        {**smith, "instance_id": "acme__mathx.nohex.x", "repo": "swesmith/acme__mathx"},
        {
            **smith,
            "instance_id": f"acme__mathx.{short}.y",
            "patch": file_diff("pkg/mathx.py", "nothing like it\n", "x\n"),
        },
        {**smith, "instance_id": f"acme__mathx.{short}.z", "FAIL_TO_PASS": 3},
        {
            **gym,
            "instance_id": "acme__mathx-8",  # its test file is already there
            "test_patch": gym["test_patch"].replace("test_extra", "test_mathx"),
        },
    ]
    path = tmp / "swesmith.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [smith, gym, *bad]))
    return tmp, path


def _load(tmp: Path, path: Path, store: str):
    return load_source(
        SourceSpec(kind="swebench", path=str(path)), tmp / store, str(tmp / "clones")
    )


def _smith(res):
    return next(t for t in res.tasks if ".func_pm_op_change__" in t.task_id)


def test_a_swe_smith_row_s_base_is_the_clean_tree_its_repo_name_ends_with(rows):
    tmp, path = rows
    res = _load(tmp, path, "store1")
    snap = snapshot_path(tmp / "store1", _smith(res).snapshot)
    assert (snap / "pkg" / "mathx.py").read_text() == CLEAN and not (snap / ".git").exists()


def test_a_swe_smith_patch_becomes_the_bug_and_its_reverse_the_fix(rows, tmp_path):
    tmp, path = rows
    task = _smith(_load(tmp, path, "store2"))
    tree = tmp_path / "tree"
    shutil.copytree(snapshot_path(tmp / "store2", task.snapshot), tree)
    apply_patch(str(tree), task.bug_patch)
    assert (tree / "pkg" / "mathx.py").read_text() == BUGGY
    apply_patch(str(tree), task.patch)
    assert (tree / "pkg" / "mathx.py").read_text() == CLEAN


def test_a_swe_smith_row_keeps_its_image_name_and_plain_test_lists(rows):
    tmp, path = rows
    task = _smith(_load(tmp, path, "store3"))
    assert task.metadata["provenance"]["image_name"].startswith("swebench/swesmith.")
    assert task.fail_to_pass == ["tests/test_mathx.py::test_mean"] and task.test_patch == ""


def test_a_swe_gym_row_without_version_or_setup_commit_loads(rows):
    tmp, path = rows
    res = _load(tmp, path, "store4")
    gym = next(t for t in res.tasks if t.task_id == "acme__mathx-7")
    assert gym.bug_patch == "" and gym.fail_to_pass == ["tests/test_extra.py::test_one"]


def test_bad_rows_are_quarantined_naming_file_row_and_field(rows):
    tmp, path = rows
    res = _load(tmp, path, "store5")
    got = {(q["file"], q["row"], q["field"]) for q in res.quarantine_rows}
    assert got == {
        (str(path), 3, "base_commit"),
        (str(path), 4, "patch"),
        (str(path), 5, "FAIL_TO_PASS"),
        (str(path), 6, "test_patch"),
    }
    assert len(res.tasks) == 2


def test_a_bug_patch_that_does_not_apply_says_so(rows):
    tmp, path = rows
    res = _load(tmp, path, "store6")
    (q,) = [q for q in res.quarantine_rows if q["row"] == 4]
    assert q["reason"].startswith("the bug patch does not apply to the base")


@pytest.fixture(scope="module")
def cleaned(rows):
    tmp, path = rows
    params = parse_params(
        {
            "clean": {
                "sources": [{"kind": "swebench", "path": str(path)}],
                "frozen": [],
                "repos_dir": str(tmp / "clones"),
                "verify_runs": 0,
                "repo_verify_runs": 1,
                "repo_tasks": {"enabled": False},
            },
            "sandbox": {"backend": "local", "timeout_s": 30},
        }
    )
    return curate(params, tmp / "out"), tmp / "out"


def test_a_test_patch_that_does_not_apply_is_quarantined_not_a_crash_of_clean(cleaned):
    report, _ = cleaned
    # the four bad rows and the SWE-Gym row whose F2P passes unfixed; the stage went on
    assert report["quarantined"] == 5 and report["quarantined_unverified"] == 1


def test_clean_verifies_a_swe_smith_task_fails_with_the_bug_and_passes_with_the_fix(cleaned):
    _, out = cleaned
    kept = {t.task_id for t in read_tasks(out / "tasks.parquet")}
    assert any(".func_pm_op_change__" in k for k in kept)
    assert "acme__mathx-7" not in kept  # its F2P passes unfixed: verification did run
