"""A night killed with SIGKILL mid-stage, or stopped with SIGTERM (a cancelled job), is run
again by the next nightly run: the same night number, its tracked files put back first, and
the nights log says both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codeloop.ops.nights import read_nights
from flows._server import ATTACHED_ENV
from tests._toy_pipeline import git, make_toy_repo, stage_env

pytestmark = pytest.mark.slow


def _kill_mid_train(repo: Path, hang: Path, home: Path, sig: int = signal.SIGKILL) -> int:
    """`python -m flows.nightly` in its own process group, sent ``sig`` once train stands.

    The run gets a Prefect home of its own and no server URL: one that an earlier test of
    the session attached to (flows/_server.py) may be gone by now. PATH and PYTHONPATH come
    from the caller's stage_env."""
    started = Path(f"{hang}.started")  # the toy train stage writes it once it hangs
    started.unlink(missing_ok=True)
    hang.touch()
    inherited = {k: v for k, v in os.environ.items()
                 if k not in ("PREFECT_API_URL", ATTACHED_ENV)}
    env = {**inherited, "TOY_HANG_FILE": str(hang), "PREFECT_HOME": str(home)}
    log = home.parent / "killed-night.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "flows.nightly", "--no-pull", "--no-push"],
                                cwd=repo, env=env, start_new_session=True,
                                stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while not started.exists():
        assert proc.poll() is None, f"the nightly ended before train started:\n{_tail(log)}"
        assert time.monotonic() < deadline, f"train never started:\n{_tail(log)}"
        time.sleep(0.5)
    os.killpg(proc.pid, sig)
    proc.wait(timeout=120)
    hang.unlink()
    return proc.returncode


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-30:])


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory, prefect_harness) -> dict:
    from flows.nightly import nightly

    root = tmp_path_factory.mktemp("killed")
    repo = make_toy_repo(root)
    with stage_env():
        first = nightly(repo=str(repo), pull=False)
        rc = _kill_mid_train(repo, root / "hang", root / "prefect-home")
        dirty = git(repo, "status", "--porcelain", "--untracked-files=no")
        second = nightly(repo=str(repo), pull=False)
        rc_term = _kill_mid_train(repo, root / "hang", root / "prefect-home", signal.SIGTERM)
        dirty_term = git(repo, "status", "--porcelain", "--untracked-files=no")
        third = nightly(repo=str(repo), pull=False)
    return {"repo": repo, "first": first, "rc": rc, "dirty": dirty, "second": second,
            "rc_term": rc_term, "dirty_term": dirty_term, "third": third}


def test_the_kill_left_the_night_half_done(killed_and_resumed):
    assert killed_and_resumed["rc"] == -signal.SIGKILL
    assert "params.yaml" in killed_and_resumed["dirty"]


def test_the_next_run_runs_the_killed_night_again_and_promotes_it(killed_and_resumed):
    first, second = killed_and_resumed["first"], killed_and_resumed["second"]
    assert second["promoted"] and second["tag"] == "iter-0002"
    assert second["rollout_iteration"] == first["rollout_iteration"] + 1


def test_the_nights_log_shows_the_killed_night_and_its_resumption(killed_and_resumed):
    rows = read_nights(killed_and_resumed["repo"])
    assert [(r["night"], r["outcome"]) for r in rows] == [(1, "promoted"), (2, "killed"),
                                                          (2, "promoted"), (3, "killed"),
                                                          (3, "promoted")]


def test_a_night_stopped_with_sigterm_is_resumed_like_a_killed_one(killed_and_resumed):
    assert killed_and_resumed["rc_term"] != 0
    assert "params.yaml" in killed_and_resumed["dirty_term"]
    second, third = killed_and_resumed["second"], killed_and_resumed["third"]
    assert third["promoted"] and third["tag"] == "iter-0003"
    assert third["rollout_iteration"] == second["rollout_iteration"] + 1


def test_after_the_resumed_night_the_workspace_is_clean(killed_and_resumed):
    repo = killed_and_resumed["repo"]
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
