"""`codeloop mint` on a real package from the registry (inflection 0.5.1's sdist, fetched
by scripts/setup.sh) and on a small local repository: validated tasks, an honest report,
statements that never show the bug."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from codeloop.config import parse_params
from codeloop.data.curate import curate
from codeloop.data.repos.mint import MintConfig, mint_repo
from codeloop.io import read_json, read_tasks
from tests._repo_fixture import write_files

REPO = Path(__file__).resolve().parents[1]
SDIST = REPO / ".cache" / "mint" / "inflection-0.5.1.tar.gz"
SDIST_SHA256 = "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417"


@pytest.fixture(scope="module")
def minted(tmp_path_factory):
    if not SDIST.exists():
        pytest.skip(f"{SDIST} absent: scripts/setup.sh fetches it from the package registry")
    assert hashlib.sha256(SDIST.read_bytes()).hexdigest() == SDIST_SHA256
    out = tmp_path_factory.mktemp("mint") / "inflection"
    from codeloop.cli import main

    rc = main(["mint", "--repo", str(SDIST), "--out", str(out), "--max", "5", "--seed", "1",
               "--workers", "2", "--license", "MIT"])
    assert rc == 0
    return out


def test_the_real_package_mints_the_tasks_asked_for(minted):
    tasks = read_tasks(minted / "tasks.parquet")
    assert len(tasks) == 5 and {t.kind for t in tasks} == {"repo"}
    assert len({t.snapshot for t in tasks}) == 1  # one pristine snapshot for all
    assert [p.name for p in (minted / "repos").iterdir()] == [tasks[0].snapshot]


def test_the_report_accounts_for_every_candidate_tried(minted):
    r = read_json(minted / "report.json")
    assert r["tried"] == r["kept"] + sum(r["rejected"].values())
    assert sum(v["tried"] for v in r["per_operator"].values()) == r["tried"]
    assert sum(v["kept"] for v in r["per_operator"].values()) == r["kept"] == 5
    assert r["tests"]["stable"] > 400 and read_json(minted / "manifest.json")["tasks"] == 5


def test_every_minted_reference_resolves_and_no_empty_patch_does(minted, tmp_path):
    params = parse_params({
        "clean": {"sources": [{"kind": "repo", "path": str(minted)}], "frozen": [],
                  "verify_runs": 0, "repo_verify_runs": 1, "repo_tasks": {"enabled": False}},
        "sandbox": {"backend": "local", "timeout_s": 60},
    })
    report = curate(params, tmp_path / "clean")
    assert report["kept_repo"] == 5 and report["dropped"] == 0, report["dropped_tasks"]


def test_a_minted_statement_never_shows_the_changed_line(minted):
    for t in read_tasks(minted / "tasks.parquet"):
        changed = [x[1:].strip() for x in t.bug_patch.splitlines()
                   if x[:1] in "+-" and not x.startswith(("+++", "---"))]
        telling = [x for x in changed if len(x) >= 10]  # "))" and "pass" name nothing
        assert changed and not any(line in t.prompt for line in telling), t.task_id
        quoted = re.match(r"The test `([^`]+)` fails", t.prompt).group(1)
        assert "Failure:" in t.prompt and quoted in t.fail_to_pass


SMALL = {
    "calc/__init__.py": "",
    "calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef limit(x):\n    if x > 10:\n        return 10\n    return x\n",  # noqa: E501
    "tests/test_add.py": "from calc.ops import add, limit\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_limit():\n    assert limit(12) == 10\n    assert limit(3) == 3\n",  # noqa: E501
    "tests/test_more.py": "from calc.ops import add, limit\n\n\ndef test_add_more():\n    assert add(4, 1) == 5\n\n\ndef test_limit_more():\n    assert limit(11) == 10\n",  # noqa: E501
    "tests/test_broken.py": "def test_always_fails():\n    assert 1 == 2\n",
}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("small")
    src = write_files(tmp / "calc-repo", SMALL)
    res = mint_repo(src, tmp / "out", MintConfig(max_tasks=20, seed=0, workers=2,
                                                 hidden_fraction=0.5))
    return res, tmp / "out"


def test_a_failing_pristine_test_is_excluded_from_every_task(small):
    res, out = small
    assert res.tasks
    assert read_json(out / "report.json")["tests"]["excluded_flaky_or_failing"] == [
        "tests/test_broken.py::test_always_fails"
    ]
    for t in res.tasks:
        assert not any("test_broken" in n for n in t.all_tests() + t.pass_to_pass)


def test_minted_tasks_are_also_written_with_swebench_s_columns_and_types(small):
    import json

    import pandas as pd

    from codeloop.data.repos.swebench_rows import SWEBENCH_COLUMNS

    res, out = small
    df = pd.read_json(out / "instances.jsonl", lines=True, dtype=False)
    assert list(df["instance_id"]) == [t.task_id for t in res.tasks]
    assert all(isinstance(v, str) for c in SWEBENCH_COLUMNS for v in df[c])
    assert [json.loads(v) for v in df["FAIL_TO_PASS"]] == [t.fail_to_pass for t in res.tasks]
    assert set(df["base_commit"]) == {t.snapshot for t in res.tasks}


def test_two_kept_tasks_never_fail_the_same_set_of_tests(small):
    res, _ = small
    sets = [frozenset([*t.fail_to_pass, *t.metadata["hidden_fail_to_pass"]]) for t in res.tasks]
    assert len(sets) == len(set(sets))


def test_hidden_tests_live_in_files_of_their_own_and_the_quoted_test_stays_visible(small):
    res, _ = small
    hidden_any = False
    for t in res.tasks:
        hidden_files = {n.split("::")[0] for n in t.hidden_tests}
        assert not hidden_files & {n.split("::")[0] for n in t.visible_tests}
        quoted = re.match(r"The test `([^`]+)` fails", t.prompt).group(1)
        assert quoted in t.fail_to_pass
        hidden_any |= bool(t.metadata["hidden_fail_to_pass"])
    assert hidden_any  # the 0.5 fraction hid one of the failing tests somewhere


def test_a_repository_whose_suite_does_not_collect_is_refused(tmp_path):
    src = write_files(tmp_path / "bad", {"pkg.py": "x = 1\n", "test_pkg.py": "import nonexistent\n"})
    with pytest.raises(RuntimeError, match="does not collect|no test"):
        mint_repo(src, tmp_path / "out", MintConfig(max_tasks=2, workers=1))


def test_the_experts_edits_turn_a_minted_base_back_into_the_pristine_file(minted):
    from codeloop.data.repos.diffs import apply_file_diff, split_files
    from codeloop.data.repos.expert import expert_calls

    for t in read_tasks(minted / "tasks.parquet"):
        path = t.metadata["mutation"]["path"]
        pristine = (minted / "repos" / t.snapshot / path).read_text()
        text = apply_file_diff(pristine, split_files(t.bug_patch)[path])
        calls = expert_calls(t, minted / "repos")
        searches = [c["args"]["pattern"] for c in calls if c["tool"] == "search"]
        assert all(re.search(p, text) for p in searches), searches
        for c in calls:
            if c["tool"] == "edit":
                assert text.count(c["args"]["old"]) == 1
                text = text.replace(c["args"]["old"], c["args"]["new"])
        assert text == pristine, t.task_id


DEP_REPO = {
    "shop/__init__.py": "",
    "shop/price.py": "from helperlib import cents\n\n\ndef total(xs):\n    s = 0\n    for x in xs:\n        s += cents(x)\n    return s\n",  # noqa: E501
    "tests/test_price.py": "from shop.price import total\n\n\ndef test_total():\n    assert total([1, 2]) == 300\n\n\ndef test_empty():\n    assert total([]) == 0\n",  # noqa: E501
}


def test_a_repo_with_dependencies_mints_with_its_env_dir_and_clean_verifies_it(tmp_path):
    src = write_files(tmp_path / "shop", DEP_REPO)
    with pytest.raises(RuntimeError, match="does not collect|no test"):
        mint_repo(src, tmp_path / "nodeps", MintConfig(max_tasks=2, workers=1))
    deps = write_files(tmp_path / "deps", {"helperlib.py": "def cents(x):\n    return x * 100\n"})
    res = mint_repo(src, tmp_path / "out", MintConfig(max_tasks=3, workers=2, deps=str(deps)))
    env = res.tasks[0].environment
    assert (
        res.tasks and env.startswith("shop-deps-") and {t.environment for t in res.tasks} == {env}
    )
    assert (tmp_path / "out" / "envs" / env / "helperlib.py").is_file()
    params = parse_params({
        "clean": {"sources": [{"kind": "repo", "path": str(tmp_path / "out")}], "frozen": [],
                  "verify_runs": 0, "repo_verify_runs": 1, "repo_tasks": {"enabled": False}},
        "sandbox": {"backend": "local", "timeout_s": 30},
    })
    report = curate(params, tmp_path / "clean")
    assert report["kept_repo"] == len(res.tasks) and report["dropped"] == 0
    assert (tmp_path / "clean" / "envs" / env / "helperlib.py").is_file()


def test_a_package_without_dependencies_gets_an_env_of_its_interpreter_alone(minted):
    from codeloop.data.repos.envbuild import env_complete, sandbox_python
    from codeloop.data.repos.envspec import EnvSpec

    env = read_json(minted / "manifest.json")["environment"]
    assert env["requirements"] == [] and env["resolved"] == [] and env["from"] == "none"
    spec = EnvSpec(python=sandbox_python())
    assert env["name"] == spec.spec_hash() and env["spec"] == spec.to_dict()
    assert env_complete(minted / "envs" / spec.spec_hash())
    assert {t.environment for t in read_tasks(minted / "tasks.parquet")} == {spec.spec_hash()}


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_minted_task_s_failing_tests_pass_with_the_fix_in_its_env(minted, tmp_path, backend):
    # local: the env dir mounted read-only at /envs; docker: the env's own image
    import shutil

    from codeloop.agent.envdirs import env_paths
    from codeloop.agent.testrun import run_pytest
    from codeloop.agent.workspace import copy_tree
    from codeloop.config import SandboxConfig
    from codeloop.sandbox import make_executor

    if backend == "docker":
        from codeloop.sandbox.docker_backend import skip_without_docker_engine

        skip_without_docker_engine()
    t = read_tasks(minted / "tasks.parquet")[0]
    envs = tmp_path / "envs"
    shutil.copytree(minted / "envs", envs)
    ex = make_executor(SandboxConfig(backend=backend, workers=1, timeout_s=60), workspaces=True,
                       envs_root=str(envs), env_dir=str(envs / t.environment))
    try:
        if backend == "docker":
            assert ex.image == f"codeloop-env:{t.environment}"
        ws = ex.workspaces.new_workspace()
        copy_tree(str(minted / "repos" / t.snapshot), ws)  # the pristine tree: base + fix
        report = run_pytest(ex, ws, t.fail_to_pass, env_paths(t, str(envs)), 60)
    finally:
        ex.close()
    assert report.outcomes == dict.fromkeys(t.fail_to_pass, "passed"), report.output_tail


NAMED = {
    "calc/__init__.py": "",
    "calc/ops.py": "def double(x):\n    return x * 2\n\n\ndef triple(x):\n    return x * 3\n",
    "tests/test_ops.py": (
        "import os\n\nfrom calc.ops import double, triple\n\n\n"
        "def test_double():\n    assert double(2) == 4\n\n\n"
        "def test_triple_by_name():\n"
        "    assert 'test_triple_by_name' in os.environ.get('PYTEST_CURRENT_TEST', '')\n"
        "    assert triple(2) == 6\n"
    ),
}


def test_a_task_whose_fix_the_judge_refuses_is_not_minted_and_the_report_says_why(tmp_path):
    # the judge runs each F2P test alone under a fresh name: a test that checks its own
    # name fails there, so no fix of triple could ever be paid
    src = write_files(tmp_path / "named", NAMED)
    res = mint_repo(src, tmp_path / "out", MintConfig(max_tasks=20, seed=0, workers=2))
    report = read_json(tmp_path / "out" / "report.json")
    assert res.tasks and all(t.fail_to_pass == ["tests/test_ops.py::test_double"]
                             for t in res.tasks)
    assert report["rejected"]["judge_refuses_gold"] == len(report["judge_refused"]) > 0
    assert all("variant_mismatch" in r["flags"] for r in report["judge_refused"])
    # each refusal says what ran and which tests did not pass, not only its flags
    assert all(r["status"] == "exited" and r["passed"]["p2p"] and "not_passed" in r
               for r in report["judge_refused"])
    assert report["tried"] == report["kept"] + sum(report["rejected"].values())
    refused = [r["task_id"] for r in report["judge_refused"]]
    assert len(set(refused + [t.task_id for t in res.tasks])) == len(refused) + len(res.tasks)
