"""The agent's hostile suite, run as an ordinary user: workspaces stay sealed without root.

As in test_sandbox_seal_nonroot (tests/_nonroot.py copies what the suite needs into a
world-readable temp dir and runs it as uid 65534 under Debian's /usr/bin/python3), so the
local backend runs in a user namespace, where one uid owns every workspace: a sibling's
stays out of reach because each command sees only its own at /ws (command.py), not by
ownership.
"""

from __future__ import annotations

import re

import pytest

from tests._nonroot import run_as_ordinary_user, skip_unless_ordinary_user_can_run, tail

SUITE = ["test_agent_hostile.py", "test_agent_sandbox_commands.py"]


@pytest.mark.slow
def test_the_agent_hostile_suite_passes_as_an_ordinary_user():
    skip_unless_ordinary_user_can_run(
        "not root: the agent's hostile suite in this run already runs unprivileged",
        "this machine allows no unprivileged user namespace",
    )
    proc, _ = run_as_ordinary_user("codeloop-agent-nonroot-", ["_repo_fixture.py", "_hostile.py"],
                                   SUITE, extra_packages=["pyarrow"])
    out = tail(proc)
    assert proc.returncode == 0, out
    assert re.search(r"\b\d+ passed", out) and "failed" not in out and " skipped" not in out, out
