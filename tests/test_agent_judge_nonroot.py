"""The judge's hostile predictions, run as an ordinary user: none resolved there either.

As root, tests/_nonroot.py copies what the hostile judge suite needs (codeloop, the repo
fixture, the suite, pytest and the config libraries) into a world-readable temp dir and
runs it as uid 65534 under Debian's /usr/bin/python3: the local backend then seals with a
user namespace, workspaces are handed over without root, and every case must still hold.
"""

from __future__ import annotations

import pytest

from tests._nonroot import (
    assert_every_test_passed,
    run_as_ordinary_user,
    skip_unless_ordinary_user_can_run,
)


@pytest.mark.slow
def test_the_hostile_judge_suite_passes_as_an_ordinary_user():
    skip_unless_ordinary_user_can_run(
        "not root: the hostile judge suite in this run already runs unprivileged",
        "this machine allows no unprivileged user namespace",
    )
    proc, collected = run_as_ordinary_user(
        "codeloop-judge-nonroot-", ["_repo_fixture.py"], ["test_agent_judge_hostile.py"]
    )
    assert_every_test_passed(proc, collected)
