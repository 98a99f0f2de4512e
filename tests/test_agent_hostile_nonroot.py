"""The agent's hostile suite, run as an ordinary user: workspaces stay sealed without root.

As in test_sandbox_seal_nonroot: copy what the suite needs (codeloop, the test modules,
pydantic/pyyaml/pytest...) into a world-readable temp dir and run it as uid 65534 under
Debian's /usr/bin/python3, so the local backend runs in a user namespace, where one uid
owns every workspace: a sibling's stays out of reach because each command sees only its
own at /ws (command.py), not by ownership.
"""

from __future__ import annotations

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
            "pygments", "py", "pyarrow"]  # fmt: skip
SUITE = ["test_agent_hostile.py", "test_agent_sandbox_commands.py"]
HELPERS = ["__init__.py", "conftest.py", "_repo_fixture.py", "_hostile.py"]


def _copy_tree(dest: Path) -> None:
    site, tests = dest / "site", dest / "repo" / "tests"
    site.mkdir()
    tests.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGES:
        try:
            f = Path(importlib.import_module(name).__file__)
        except ImportError:
            continue
        if f.name == "__init__.py":
            shutil.copytree(f.parent, site / f.parent.name, ignore=skip, symlinks=True)
        else:
            shutil.copy(f, site / f.name)
    shutil.copytree(REPO / "codeloop", dest / "repo" / "codeloop", ignore=skip)
    shutil.copy(REPO / "pyproject.toml", dest / "repo")
    for name in HELPERS + SUITE:
        shutil.copy(REPO / "tests" / name, tests / name)
    for p in [dest, *dest.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)


@pytest.mark.slow
def test_the_agent_hostile_suite_passes_as_an_ordinary_user():
    if os.geteuid() != 0:
        pytest.skip("not root: the agent's hostile suite in this run already runs unprivileged")
    if not (os.access("/usr/bin/python3", os.X_OK) and shutil.which("setpriv")):
        pytest.skip("needs Debian's /usr/bin/python3 and setpriv (util-linux)")
    probe = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "unshare",
             "--map-root-user", "--pid", "--fork", "--mount", "--net", "true"]  # fmt: skip
    if subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip("this machine allows no unprivileged user namespace")
    dest = Path(tempfile.mkdtemp(prefix="codeloop-agent-nonroot-"))
    try:
        _copy_tree(dest)
        (dest / "home").mkdir(mode=0o777)
        (dest / "home").chmod(0o777)
        env = {"HOME": str(dest / "home"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "PYTHONPATH": f"{dest / 'site'}:{dest / 'repo'}", "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
        cmd = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups",
               "/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-m", "not docker", "-o", "addopts=-ra",
               *(f"tests/{t}" for t in SUITE)]  # fmt: skip
        proc = subprocess.run(cmd, cwd=dest / "repo", env=env, capture_output=True, text=True,
                              timeout=1800)  # fmt: skip
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    out = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, out
    assert re.search(r"\b\d+ passed", out) and "failed" not in out and " skipped" not in out, out
