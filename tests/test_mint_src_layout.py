"""A src-layout repository (its package under src/, imported by its tests as an editable
install would make it): its env spec names ``src`` as a tree path, and every sandboxed
pytest entry (mint's batched runs, clean's verification, the judge and its variants)
imports the package from the tree's src/."""

from __future__ import annotations

from pathlib import Path

import pytest

from codeloop.config import parse_params
from codeloop.data.curate import curate
from codeloop.data.repos.envspec import EnvSpec
from codeloop.data.repos.mint import MintConfig, mint_repo
from codeloop.data.repos.repo_deps import tree_paths
from codeloop.io import read_json

SRC_REPO = {
    "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1"\n',
    "src/calc/__init__.py": "",
    "src/calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef limit(x):\n    if x > 10:\n        return 10\n    return x\n",  # noqa: E501
    "tests/test_ops.py": "from calc.ops import add, limit\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_limit():\n    assert limit(12) == 10\n    assert limit(3) == 3\n\n\ndef test_add_more():\n    assert add(4, 1) == 5\n",  # noqa: E501
}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture(scope="module")
def minted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("srclayout")
    src = write_tree(tmp / "calc-0.1", SRC_REPO)
    res = mint_repo(src, tmp / "out", MintConfig(max_tasks=4, workers=2))
    return res, tmp / "out"


def test_a_src_layout_is_told_from_a_flat_one(tmp_path):
    assert tree_paths(write_tree(tmp_path / "a", SRC_REPO)) == ["src"]
    flat = {k.removeprefix("src/"): v for k, v in SRC_REPO.items()}
    assert tree_paths(write_tree(tmp_path / "b", flat)) == []
    # a src/ dir beside a package of the same name at the root is no src layout
    assert tree_paths(write_tree(tmp_path / "c", {**flat, "src/calc/__init__.py": ""})) == []


def test_a_spec_without_tree_paths_keeps_the_hash_it_had_before_the_field():
    spec = EnvSpec(python="3.11")
    assert "tree_paths" not in spec.to_dict()
    src = EnvSpec(python="3.11", tree_paths=("src",))
    assert src.to_dict()["tree_paths"] == ["src"] and src.spec_hash() != spec.spec_hash()
    assert EnvSpec.from_dict(src.to_dict()) == src


@pytest.mark.parametrize("bad", ["../src", "/abs", "src/../..", ""])
def test_a_tree_path_that_leaves_the_tree_is_refused(bad):
    with pytest.raises(ValueError, match="tree path"):
        EnvSpec(python="3.11", tree_paths=(bad,))


def test_a_src_layout_repository_mints_with_src_as_its_tree_path(minted):
    res, out = minted
    env = read_json(out / "manifest.json")["environment"]
    assert env["spec"]["tree_paths"] == ["src"]
    assert res.tasks and all(t.metadata["mutation"]["path"].startswith("src/calc/")
                             for t in res.tasks)
    assert read_json(out / "envs" / env["name"] / "spec.json")["tree_paths"] == ["src"]


def test_clean_verifies_src_layout_tasks(minted, tmp_path):
    res, out = minted
    params = parse_params({
        "clean": {"sources": [{"kind": "repo", "path": str(out)}], "frozen": [],
                  "verify_runs": 0, "repo_verify_runs": 1, "repo_tasks": {"enabled": False}},
        "sandbox": {"backend": "local", "timeout_s": 30},
    })
    report = curate(params, tmp_path / "clean")
    assert report["kept_repo"] == len(res.tasks) and report["dropped"] == 0


def test_the_judge_resolves_a_src_layout_task_by_its_reference_patch_only(minted, tmp_path):
    import shutil

    from codeloop.agent.judge import judge_many
    from codeloop.config import SandboxConfig
    from codeloop.sandbox import make_executor

    res, out = minted
    task = res.tasks[0]
    envs = tmp_path / "envs"
    shutil.copytree(out / "envs", envs)
    ex = make_executor(SandboxConfig(backend="local", workers=1, timeout_s=30),
                       workspaces=True, envs_root=str(envs))
    try:
        fixed, empty = judge_many([(task, task.patch), (task, "")], str(out / "repos"), ex)
    finally:
        ex.close()
    assert fixed.resolved, fixed
    assert not empty.resolved
