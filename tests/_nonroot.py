"""Running a test suite as an ordinary user, for the ``*_nonroot`` tests.

As root, copy what a suite needs (the codeloop package, its test modules and helpers,
pytest and the config libraries) into a world-readable temp dir (the venv's interpreter
lives under /root, 0700, and the checkout may too) and run it there as uid 65534 under
Debian's /usr/bin/python3 and ``setpriv``: the local backend then has no root and seals
with a user namespace. A helper, not a test module.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
USER = 65534  # nobody: exists on every Debian, owns nothing
PACKAGES = ["yaml", "pydantic", "pydantic_core", "annotated_types", "typing_extensions",
            "typing_inspection", "pytest", "_pytest", "pluggy", "iniconfig", "packaging",
            "pygments", "py"]
HELPERS = ["__init__.py", "conftest.py"]


def skip_unless_ordinary_user_can_run(not_root: str, no_userns: str) -> None:
    """Skip (with the caller's reasons) unless we are root and uid USER can get a user
    namespace with Debian's python3 and setpriv."""
    if os.geteuid() != 0:
        pytest.skip(not_root)
    if not (os.access("/usr/bin/python3", os.X_OK) and shutil.which("setpriv")):
        pytest.skip("needs Debian's /usr/bin/python3 and setpriv (util-linux)")
    probe = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "unshare",
             "--map-root-user", "--pid", "--fork", "--mount", "--net", "true"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip(no_userns)


def _copy_tree(dest: Path, packages: list[str], test_files: list[str]) -> None:
    site, tests = dest / "site", dest / "repo" / "tests"
    site.mkdir()
    tests.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in packages:
        try:
            f = Path(importlib.import_module(name).__file__)
        except ImportError:
            continue  # an optional one (py: pytest's shim; pyarrow): the suite says if needed
        if f.name == "__init__.py":
            shutil.copytree(f.parent, site / f.parent.name, ignore=skip, symlinks=True)
        else:
            shutil.copy(f, site / f.name)
    shutil.copytree(REPO / "codeloop", dest / "repo" / "codeloop", ignore=skip)
    shutil.copy(REPO / "pyproject.toml", dest / "repo")  # pytest's markers
    for name in test_files:
        shutil.copy(REPO / "tests" / name, tests / name)
    for p in [dest, *dest.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)


def run_as_ordinary_user(
    prefix: str, test_files: list[str], suite: list[str], extra_packages: list[str] = ()
) -> tuple[subprocess.CompletedProcess, str]:
    """(the pytest run of ``suite`` as uid USER, its --collect-only output). ``test_files``:
    the helper modules the suite imports (besides HELPERS); the suite's files are copied."""
    dest = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        _copy_tree(dest, [*PACKAGES, *extra_packages], [*HELPERS, *test_files, *suite])
        (dest / "home").mkdir(mode=0o777)
        (dest / "home").chmod(0o777)
        env = {"HOME": str(dest / "home"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "PYTHONPATH": f"{dest / 'site'}:{dest / 'repo'}", "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups",
               "/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-m", "not docker", "-o", "addopts=-ra", *(f"tests/{t}" for t in suite)]
        run = functools.partial(subprocess.run, cwd=dest / "repo", env=env, capture_output=True,
                                text=True, timeout=1800)
        collected = run([*cmd, "--collect-only"]).stdout
        return run(cmd), collected
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def tail(proc: subprocess.CompletedProcess) -> str:
    """The end of a run's output, for assertion messages."""
    return proc.stdout[-6000:] + proc.stderr[-3000:]


def assert_every_test_passed(proc: subprocess.CompletedProcess, collected: str) -> None:
    """The run exited 0 and every collected test passed: none skipped, none failed."""
    out = tail(proc)
    assert proc.returncode == 0, out
    want = re.search(r"(\d+)(?:/\d+)? tests? collected", collected)
    assert want and re.search(rf"\b{want[1]} passed", out), (collected[-500:], out)
    assert "skipped" not in out and "failed" not in out, out
