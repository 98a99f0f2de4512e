"""The judge's hostile predictions, run as an ordinary user: none resolved there either.

As root, this copies what the hostile judge suite needs (codeloop, the repo fixture, the
suite, pytest and the config libraries) into a world-readable temp dir and runs it as uid
65534 under Debian's /usr/bin/python3: the local backend then seals with a user namespace,
workspaces are handed over without root, and every case must still hold.
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
USER = 65534
PACKAGES = ["yaml", "pydantic", "pydantic_core", "annotated_types", "typing_extensions",
            "typing_inspection", "pytest", "_pytest", "pluggy", "iniconfig", "packaging",
            "pygments", "py"]  # fmt: skip
SUITE = "test_agent_judge_hostile.py"


def _copy_tree(dest: Path) -> None:
    site, tests = dest / "site", dest / "repo" / "tests"
    site.mkdir()
    tests.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGES:
        try:
            f = Path(importlib.import_module(name).__file__)
        except ImportError:
            continue  # py: pytest's optional shim
        if f.name == "__init__.py":
            shutil.copytree(f.parent, site / f.parent.name, ignore=skip)
        else:
            shutil.copy(f, site / f.name)
    shutil.copytree(REPO / "codeloop", dest / "repo" / "codeloop", ignore=skip)
    shutil.copy(REPO / "pyproject.toml", dest / "repo")
    for name in ["__init__.py", "conftest.py", "_repo_fixture.py", SUITE]:
        shutil.copy(REPO / "tests" / name, tests / name)
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


@pytest.mark.slow
def test_the_hostile_judge_suite_passes_as_an_ordinary_user():
    if os.geteuid() != 0:
        pytest.skip("not root: the hostile judge suite in this run already runs unprivileged")
    if not (os.access("/usr/bin/python3", os.X_OK) and shutil.which("setpriv")):
        pytest.skip("needs Debian's /usr/bin/python3 and setpriv (util-linux)")
    probe = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "unshare",
             "--map-root-user", "--pid", "--fork", "--mount", "--net", "true"]  # fmt: skip
    if subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip("this machine allows no unprivileged user namespace")
    dest = Path(tempfile.mkdtemp(prefix="codeloop-judge-nonroot-"))
    try:
        _copy_tree(dest)
        (dest / "home").mkdir(mode=0o777)
        (dest / "home").chmod(0o777)
        env = {"HOME": str(dest / "home"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "PYTHONPATH": f"{dest / 'site'}:{dest / 'repo'}", "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
        cmd = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups",
               "/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-m", "not docker", "-o", "addopts=-ra", f"tests/{SUITE}"]  # fmt: skip
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
