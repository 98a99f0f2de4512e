"""Minted tasks hide single test functions, not whole files: the hidden tests' code is absent
from the agent's workspace, and the judge restores and runs them."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from codeloop.agent.workspace import materialize_base
from codeloop.data.repos.hide import choose_hidden, split_file
from codeloop.data.repos.mint import MintConfig, mint_repo
from tests._repo_fixture import write_files

SRC = {
    "calc/__init__.py": "",
    "calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef limit(x):\n    if x > 10:\n        return 10\n    return x\n",  # noqa: E501
    "tests/test_ops.py": (
        "import pytest\n\nfrom calc.ops import add, limit\n\nTEN = 10\n\n\n"
        "@pytest.fixture\ndef big():\n    return 12\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_add_negative():\n    assert add(-2, -3) == -5\n\n\n"
        "@pytest.mark.parametrize('n', [11, 50])\ndef test_limit_clamps_big_numbers(n):\n    assert limit(n) == TEN\n\n\n"  # noqa: E501
        "def test_limit_keeps_small(big):\n    assert limit(3) == 3 and limit(big) == TEN\n\n\n"
        "def test_limit_at_ten():\n    assert limit(10) == 10\n\n\n"
        "def test_add_zero():\n    assert add(0, 7) == 7\n"
    ),
}


@pytest.fixture(scope="module")
def minted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hide")
    src = write_files(tmp / "calc-repo", SRC)
    cfg = MintConfig(max_tasks=8, seed=0, workers=2, hidden_fraction=0.5)
    res = mint_repo(src, tmp / "out", cfg)
    hid = [t for t in res.tasks if t.hidden_tests]
    assert hid, "the 0.5 fraction hid a test of some task with two failing functions"
    return tmp, res, hid


def test_hidden_node_ids_are_single_tests_moved_to_a_hidden_file(minted):
    _, _, hid = minted
    for t in hid:
        for n in t.hidden_tests:
            assert re.fullmatch(r"tests/test_hidden_test_ops\.py::test_\w+(\[\w+\])?", n), n
        # the file the hidden tests came from still holds visible tests
        assert any(v.startswith("tests/test_ops.py::") for v in t.visible_tests)


def test_the_quoted_test_stays_visible_and_some_failing_test_is_visible(minted):
    _, _, hid = minted
    for t in hid:
        quoted = re.match(r"The test `([^`]+)` fails", t.prompt).group(1)
        assert quoted in t.fail_to_pass and t.metadata["hidden_fail_to_pass"]


def test_no_hidden_tests_source_is_in_the_workspace(minted, tmp_path):
    tmp, _, hid = minted
    for i, t in enumerate(hid):
        ws = tmp_path / f"ws{i}"
        materialize_base(t, str(tmp / "out" / "repos"), str(ws))
        names = {n.split("::")[1].split("[")[0] for n in t.hidden_tests}
        for name in names:
            grep = subprocess.run(["grep", "-rn", f"def {name}\\b", str(ws)],
                                  capture_output=True, text=True)
            assert grep.returncode == 1, grep.stdout  # 1: no line matched
        assert not list(ws.rglob("test_hidden_*"))


def test_the_judge_restores_the_hidden_tests_and_runs_them(minted):
    from codeloop.agent.executor import copy_task_envs
    from codeloop.agent.judge import judge_many
    from codeloop.config import SandboxConfig
    from codeloop.sandbox import make_executor

    tmp, _, hid = minted
    envs = tmp / "judge-envs"
    envs.mkdir(exist_ok=True)
    copy_task_envs(hid, str(tmp / "out" / "envs"), str(envs))  # as the stages do
    ex = make_executor(SandboxConfig(workers=2, timeout_s=30.0), workspaces=True,
                       envs_root=str(envs))
    try:
        items = [(t, p) for t in hid for p in (t.patch, "")]
        verdicts = judge_many(items, str(tmp / "out" / "repos"), ex)
    finally:
        ex.close()
    for (t, p), v in zip(items, verdicts, strict=True):
        assert v.hidden_total == len(t.hidden_tests) > 0
        hidden_f2p = set(t.metadata["hidden_fail_to_pass"])
        ran = {n: o for n, o in v.outcomes.items() if n in hidden_f2p}
        assert len(ran) == len(hidden_f2p)
        assert set(ran.values()) == ({"passed"} if p else {"failed"}), (t.task_id, ran)


def _clean_minted(src, out):
    """The clean stage on one minted directory (a fresh output dir), its report."""
    from codeloop.config import parse_params
    from codeloop.data.curate import curate

    params = parse_params({
        "clean": {"sources": [{"kind": "repo", "path": str(src)}], "frozen": [],
                  "verify_runs": 0, "repo_verify_runs": 1, "repo_tasks": {"enabled": False}},
        "sandbox": {"backend": "local", "timeout_s": 30},
    })
    shutil.rmtree(out, ignore_errors=True)
    return curate(params, out)


def test_clean_reverifies_tasks_with_hidden_tests_and_keeps_them(minted):
    tmp, res, _ = minted
    report = _clean_minted(tmp / "out", tmp / "clean")
    assert report["kept_repo"] == len(res.tasks) and report["dropped"] == 0, report["dropped_tasks"]


def test_split_file_keeps_helpers_in_both_and_each_test_in_one():
    text = SRC["tests/test_ops.py"]
    visible, hidden = split_file(text, {"test_limit_keeps_small"})
    assert "def test_limit_keeps_small" in hidden and "def test_limit_keeps_small" not in visible
    assert "def big():" in hidden and "TEN = 10" in hidden and "def big():" in visible
    assert "def test_add(" in visible and "def test_add(" not in hidden
    compile(visible, "v", "exec")
    compile(hidden, "h", "exec")


def test_never_every_failing_function_is_hidden(tmp_path):
    write_files(tmp_path, SRC)
    f2p = ["tests/test_ops.py::test_add", "tests/test_ops.py::test_add_zero"]
    got = choose_hidden(f2p, 1.0, "k", f2p[0], tmp_path)
    assert got == {"tests/test_ops.py": {"test_add_zero"}}


def test_a_minted_row_that_fails_clean_reverification_is_quarantined_with_the_reason(minted):
    import json

    from codeloop.io import read_tasks, write_tasks

    tmp, res, _ = minted
    bad = tmp / "tampered"
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(tmp / "out", bad)
    tasks = read_tasks(bad / "tasks.parquet")
    t = next(t for t in tasks if t.pass_to_pass)
    moved = t.pass_to_pass.pop(0)  # passes on the base: the empty patch would "resolve" it
    t.fail_to_pass.append(moved)
    write_tasks(bad / "tasks.parquet", tasks)
    out = tmp / "clean-tampered"
    report = _clean_minted(bad, out)
    rows = [json.loads(x) for x in (out / "quarantine.jsonl").read_text().splitlines()]
    assert [(q["task_id"], q["source"], q["file"]) for q in rows] == [
        (t.task_id, "repo", "tasks.parquet")
    ]
    assert rows[0]["reason"].startswith("unverified: fail_to_pass_passes_unfixed")
    assert report["kept_repo"] == len(tasks) - 1 and report["dropped"] == 0
    assert report["quarantined"] == 1 and report["balanced"]
