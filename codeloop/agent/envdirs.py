"""Test environment dirs: what the sandbox mounts read-only to run a repository's tests.

An env dir is a flat ``site-packages``-like tree (pure-Python packages copied from our own
venv: Debian's ``/usr/bin/python3``, which sandbox children run, is 3.11 like the venv) at
``envs_root/<name>-<content hash>/``; the executor binds ``envs_root`` read-only at /envs
and the test command puts the dirs on ``PYTHONPATH``. Building is idempotent: the hash is
over the copied files, so an existing dir is reused and a changed package makes a new one.
Our pytest plugin (testrun's outcome channel) lives in an env dir of its own. A minted
repository's own dependencies go in the same kind of dir (``build_env`` with its modules),
named by ``task.environment``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from codeloop.sandbox.env_trust import check_name
from codeloop.sandbox.pool import child_python
from codeloop.schema import Task

# pytest 8/9 and what it imports on 3.11 (colorama is Windows-only, tomli/exceptiongroup < 3.11)
PYTEST_MODULES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")
OPTIONAL = ("py",)  # pytest's legacy shim module, absent from some versions
PLUGIN_NAME = "codeloop_pytest_outcomes"
PLUGIN_SRC = Path(__file__).with_name("pytest_plugin.py")
BOOT_NAME = "codeloop_judge_boot.py"  # the sealed pytest entry (judge_boot.py)
BOOT_SRC = Path(__file__).with_name("judge_boot.py")
RUNNER_NAME = "codeloop_variant_boot.py"  # one test at a time, alone (variant_boot.py)
RUNNER_SRC = Path(__file__).with_name("variant_boot.py")
TREES_NAME = "codeloop_trees.py"  # the runner's tree walking (codeloop/sandbox/trees.py)
TREES_SRC = Path(__file__).parents[1] / "sandbox" / "trees.py"


def _module_files(name: str) -> list[tuple[str, Path]]:
    """(relpath in the env dir, source file) of a top-level module or package."""
    try:
        mod = importlib.import_module(name)
    except ImportError:
        if name in OPTIONAL:
            return []
        raise
    f = Path(mod.__file__)
    if f.name != "__init__.py":
        return [(f.name, f)]
    root = f.parent
    return [(str(p.relative_to(root.parent)), p) for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]


def _compile(tree: str) -> None:
    """Byte-compile with the interpreter sandbox children run: the env dir is mounted
    read-only and tests run with -B, so without this every test run recompiles
    pytest. (Same 3.11 magic as the venv; a mismatch would only cost the recompile.)
    The compiled files are checked by source hash, not mtime, and name their sources
    relative to the tree (the import system puts the real path back at load), so two
    builds of the same files are the same bytes (one content digest,
    codeloop.sandbox.env_trust) wherever they were built."""
    proc = subprocess.run([child_python(), "-m", "compileall", "-q", "-j", "0",
                           "--invalidation-mode", "checked-hash", "-s", tree, tree],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compileall of {tree} failed: {proc.stderr.strip()[-500:]}")


def finish_tree(tree: str) -> None:
    """Byte-compile ``tree`` for the sandbox's interpreter and make it readable by the
    sandbox's leased uid (dirs 0755, files 0644): what every env dir gets before use."""
    _compile(tree)
    for top, _dirs, names in os.walk(tree):
        os.chmod(top, 0o755)
        for n in names:
            os.chmod(os.path.join(top, n), 0o644)


def build_env(envs_root: str, name: str, files: list[tuple[str, Path]]) -> str:
    """Make (or reuse) ``envs_root/<name>-<hash of files>/`` holding ``files``; its path."""
    h = hashlib.sha256()
    for rel, src in sorted(files):
        h.update(rel.encode() + b"\0" + src.read_bytes() + b"\0")
    dest = os.path.join(envs_root, f"{name}-{h.hexdigest()[:16]}")
    if os.path.isdir(dest):
        return dest
    os.makedirs(envs_root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}-", dir=envs_root)
    for rel, src in files:
        target = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(src, target)
    finish_tree(tmp)
    try:
        os.rename(tmp, dest)
    except OSError:  # built concurrently by another process: theirs is the same content
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.isdir(dest):
            raise
    os.chmod(envs_root, 0o755)
    return dest


@lru_cache(maxsize=16)
def pytest_env(envs_root: str) -> str:
    """The env dir with pytest and its dependencies (copied from the running venv)."""
    files = [f for name in PYTEST_MODULES for f in _module_files(name)]
    return build_env(envs_root, "pytest", files)


@lru_cache(maxsize=16)
def plugin_env(envs_root: str) -> str:
    """The env dir holding our outcome plugin (importable as PLUGIN_NAME)."""
    return build_env(envs_root, "plugin", [(PLUGIN_NAME + ".py", PLUGIN_SRC)])


@lru_cache(maxsize=16)
def judge_env(envs_root: str) -> str:
    """The env dir of the judge's two entries: the sealed pytest run (judge_boot.py) and
    the variant runner (variant_boot.py, which imports the first beside it)."""
    return build_env(envs_root, "judge", [(BOOT_NAME, BOOT_SRC), (RUNNER_NAME, RUNNER_SRC),
                                          (TREES_NAME, TREES_SRC)])


def boot_file(envs_root: str) -> str:
    """Host path of the sealed pytest entry (judge_boot.py) in its env dir."""
    return os.path.join(judge_env(envs_root), BOOT_NAME)


def runner_file(envs_root: str) -> str:
    """Host path of the variant runner (variant_boot.py) in its env dir."""
    return os.path.join(judge_env(envs_root), RUNNER_NAME)


DEFAULT_ENVS = "data/clean/envs"  # agent.envs_dir's default
SPEC_FILE = "spec.json"  # an env dir built from an env spec records it here


@lru_cache(maxsize=4)
def sandbox_python(python: str = "") -> str:
    """major.minor of the interpreter sandbox children run (``python``, default the
    sandbox's: Debian's python3, the same release the docker image is debootstrapped with)."""
    exe = python or child_python()
    proc = subprocess.run([exe, "-I", "-S", "-c",
                           "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"cannot ask {exe} its version: {proc.stderr.strip()[-300:]}")
    return proc.stdout.strip()


class InterpreterMismatch(RuntimeError):
    """A task's environment was built for another interpreter than the sandbox's."""


def _check_interpreter(task: Task, env_dir: str) -> None:
    """InterpreterMismatch when the env dir's spec.json names another python than the
    sandbox's: such a task is never run (clean quarantines it; this catches one that
    reached a stage some other way). A dir without a spec (a ``--deps`` dir) is not checked."""
    try:
        with open(os.path.join(env_dir, SPEC_FILE)) as f:
            need = json.load(f).get("python", "")
    except (OSError, ValueError, AttributeError):
        return
    have = sandbox_python()
    if need and need != have:
        raise InterpreterMismatch(
            f"task {task.task_id}: environment needs python {need}; sandbox has {have}")


def env_paths(task: Task, envs_root: str | None = None) -> list[str]:
    """Host dirs to put on the test command's PYTHONPATH for ``task``: the task's own
    environment dir (``task.environment``, one plain dir name under ``envs_root``:
    EnvTrustError for anything else; FileNotFoundError if missing, InterpreterMismatch if
    built for another python), pytest's, and our plugin's. All lie under ``envs_root``
    (default: the working dir's data/clean/envs, as agent.envs_dir)."""
    envs_root = os.path.abspath(envs_root or DEFAULT_ENVS)
    out = []
    if task.environment:
        own = os.path.join(envs_root, check_name(task.environment, f"task {task.task_id}"))
        if not os.path.isdir(own):
            raise FileNotFoundError(f"task {task.task_id}: environment {own} does not exist")
        _check_interpreter(task, own)
        out.append(own)
    return out + [pytest_env(envs_root), plugin_env(envs_root)]
