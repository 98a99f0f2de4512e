"""A small repository task built in the test itself (a helper module, not a test module).

``make_repo_task(root)`` writes a package ``calc`` of a few modules plus a tests/ dir,
stores the pristine tree as a snapshot (``store_snapshot``: a tiny content-addressed copy;
the real store is codeloop.data.repos.store), and returns a repo Task whose ``bug_patch``
plants one bug (``add`` subtracts), whose ``patch`` is the fix, whose ``test_patch`` adds
the FAIL_TO_PASS test, and whose hidden tests live in a file of their own.
``extra_modules``/``extra_tests`` grow it (the bench's 50-file, 30-test repository).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from codeloop.agent.patches import unified_diff
from codeloop.schema import Task

OPS = '''"""Arithmetic."""


def add(a, b):
    return a + b


def mul(a, b):
    return a * b
'''
TEXT = '''"""Text helpers."""


def shout(s):
    return s.upper() + "!"
'''
VISIBLE = """from calc.ops import add, mul
from calc.text import shout


def test_mul():
    assert mul(3, 4) == 12


def test_shout():
    assert shout("hi") == "HI!"


def test_add_zero():
    assert add(0, 0) == 0
"""
F2P = """from calc.ops import add


def test_add_positive():
    assert add(2, 3) == 5
"""
HIDDEN = """from calc.ops import add


def test_add_negative():
    assert add(-2, -3) == -5
"""
GOLD_EDIT = ("calc/ops.py", "    return a - b\n", "    return a + b\n")


def store_snapshot(src_dir: str, repos_dir: str) -> str:
    """Copy ``src_dir`` to ``repos_dir/<content hash>/``; the hash."""
    h = hashlib.sha256()
    for p in sorted(Path(src_dir).rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(src_dir)).encode() + b"\0" + p.read_bytes() + b"\0")
    sha = h.hexdigest()[:40]
    dest = os.path.join(repos_dir, sha)
    if not os.path.isdir(dest):
        shutil.copytree(src_dir, dest)
    return sha


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Each relative path's text under root; returns root."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def make_repo_task(root: str | Path, extra_modules: int = 0, extra_tests: int = 0,
                   f2p: tuple[str, str] = ("test_add_positive", F2P)) -> Task:
    """Build the repository and its task under ``root`` (snapshots in ``root/repos``);
    ``f2p``: the FAIL_TO_PASS test's node name in tests/test_f2p.py and that file's text."""
    root = Path(root)
    pristine, buggy, tested = root / "pristine", root / "buggy", root / "tested"
    files = {"calc/__init__.py": "", "calc/ops.py": OPS, "calc/text.py": TEXT,
             "README.md": "calc: a tiny package\n", "tests/test_visible.py": VISIBLE,
             "tests/test_hidden.py": HIDDEN}
    for i in range(extra_modules):
        files[f"calc/mod{i:02d}.py"] = f'"""Module {i}."""\n\n\ndef value_{i}():\n    return {i}\n'
    tests = "".join(
        f"\n\ndef test_value_{i}():\n    from calc.mod{i % max(extra_modules, 1):02d} import "
        f"value_{i % max(extra_modules, 1)}\n\n    assert value_{i % max(extra_modules, 1)}() == "
        f"{i % max(extra_modules, 1)}\n"
        for i in range(extra_tests)
    )
    if extra_tests:
        files["tests/test_many.py"] = '"""Many small tests."""' + tests
    write_files(pristine, files)
    # history an agent would mine for the fix: the base must hold no .git at all
    write_files(pristine, {".git/HEAD": "ref: refs/heads/main\n", ".git/FIX": "return a + b\n"})
    shutil.copytree(pristine, buggy, ignore=shutil.ignore_patterns(".git"))
    ops = buggy / "calc/ops.py"
    ops.write_text(ops.read_text().replace(GOLD_EDIT[2], GOLD_EDIT[1]))
    shutil.copytree(buggy, tested)
    write_files(tested, {"tests/test_f2p.py": f2p[1]})
    visible = ["tests/test_visible.py::test_mul", "tests/test_visible.py::test_shout",
               "tests/test_visible.py::test_add_zero", f"tests/test_f2p.py::{f2p[0]}"]
    visible += [f"tests/test_many.py::test_value_{i}" for i in range(extra_tests)]
    return Task(
        task_id="calc__calc-1", source="synthetic", prompt="add() returns the wrong result for non-zero inputs.",
        kind="repo", repo="calc", snapshot=store_snapshot(str(pristine), str(root / "repos")),
        bug_patch=unified_diff(str(pristine), str(buggy)),
        patch=unified_diff(str(buggy), str(pristine)),
        test_patch=unified_diff(str(buggy), str(tested)),
        fail_to_pass=[f"tests/test_f2p.py::{f2p[0]}"],
        pass_to_pass=visible[:3] + visible[4:],
        visible_tests=visible, hidden_tests=["tests/test_hidden.py::test_add_negative"],
    )


def open_agent_env(root: str | Path, backend: str = "local", workers: int = 2, **agent_kw):
    """(AgentEnv, executor, task) over a fresh repository task under ``root``; the caller
    closes the executor."""
    from codeloop.agent.env import AgentEnv
    from codeloop.agent.executor import open_executor
    from codeloop.config import AgentConfig, SandboxConfig

    root = Path(root)
    task = make_repo_task(root, agent_kw.pop("extra_modules", 0), agent_kw.pop("extra_tests", 0))
    cfg = AgentConfig(envs_dir=str(root / "envs"), **agent_kw)
    sandbox = SandboxConfig(backend=backend, workers=workers, timeout_s=30.0)
    ex = open_executor(sandbox, cfg, [], workspaces=True)
    return AgentEnv(ex, cfg, str(root / "repos"), str(root / "bases")), ex, task


def make_patch(tree: str, scratch: str, changes) -> str:
    """A git-style diff turning ``tree`` into a copy with ``changes`` made (tests included)."""
    work = os.path.join(scratch, "work")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(tree, work, symlinks=True)
    for rel, new in changes:
        path = Path(work, rel)
        if new is None:
            path.unlink()
            continue
        text = new(path.read_text()) if callable(new) else new
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return unified_diff(tree, work)
