"""The nightly flow against a real `prefect server start`, checked through its REST API.

A separate server from the session harness on purpose: this is what a team runs
(API + UI + services), and the flow runs as `python -m flows.nightly` in a subprocess,
exactly as cron or a worker would start it, on the toy pipeline of tests/_toy_pipeline.py
(whose evaluate stage publishes the evaluate flow's artifacts through tasks.ops).

Set CODELOOP_UI_SCREENSHOT=path.png to also take a headless-Chromium screenshot of the
run in the UI (scripts/ui_screenshot.py; needs Debian's chromium).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tasks.ops import ARTIFACT_KEYS
from tests._prefect_server import local_prefect_server
from tests._toy_pipeline import REPO_ROOT, make_toy_repo

pytestmark = pytest.mark.slow

STAGE_TASKS = (
    "check_remote",
    "dvc_pull",
    "bump_iteration",
    "repro_stage[train]",
    "repro_stage[evaluate]",
    "gate",
    "promote_candidate",
    "dvc_push",
    "commit_and_tag",
)


def _post(api: str, path: str, body: dict) -> list[dict]:
    resp = httpx.post(f"{api}{path}", json=body, timeout=10)
    resp.raise_for_status()
    return resp.json()


def _task_runs(api: str, flow_run_id: str) -> list[dict]:
    """Task runs of the flow run; polled, since the server records them from events."""
    body = {"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 200}
    runs: list[dict] = []
    for _ in range(40):
        runs = _post(api, "/task_runs/filter", body)
        if {_base(r["name"]) for r in runs} >= set(STAGE_TASKS) and all(
            r["state_type"] == "COMPLETED" for r in runs
        ):
            break
        time.sleep(0.5)
    return runs


def _base(task_run_name: str) -> str:
    """'dvc_pull-3a1' -> 'dvc_pull' (Prefect appends a short suffix to a task's name);
    a run named by the flow ('repro_stage[train]') is its own base name."""
    return task_run_name if task_run_name.endswith("]") else task_run_name.rsplit("-", 1)[0]


@pytest.fixture(scope="module")
def served_night(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    repo = make_toy_repo(root)
    with local_prefect_server() as (api, env):
        env = {
            **env,
            "PYTHONPATH": str(REPO_ROOT),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
            "CODELOOP_TOY_ARTIFACTS": "1",
        }
        proc = subprocess.run(
            [sys.executable, "-m", "flows.nightly"],
            cwd=repo, env=env, capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        flow_runs = _post(api, "/flow_runs/filter", {"flows": {"name": {"any_": ["nightly"]}}})
        assert len(flow_runs) == 1, flow_runs
        run = flow_runs[0]
        tasks = _task_runs(api, run["id"])
        keys = {"key": {"any_": list(ARTIFACT_KEYS)}}
        artifacts = _post(api, "/artifacts/filter", {"artifacts": keys})
        shot = os.environ.get("CODELOOP_UI_SCREENSHOT")
        if shot:
            subprocess.run(
                [sys.executable, str(REPO_ROOT / "scripts/ui_screenshot.py"),
                 "--api-url", api, "--flow-run-id", run["id"], "--out", shot],
                check=True, timeout=180,
            )
        yield {"run": run, "tasks": tasks, "artifacts": artifacts, "repo": repo}


def test_the_served_nightly_run_completed(served_night):
    assert served_night["run"]["state_type"] == "COMPLETED"


def test_the_served_run_has_every_stage_task_completed(served_night):
    done = {_base(t["name"]) for t in served_night["tasks"] if t["state_type"] == "COMPLETED"}
    assert done >= set(STAGE_TASKS), sorted(done)


def test_the_served_run_published_every_keyed_artifact(served_night):
    assert {a["key"] for a in served_night["artifacts"]} == set(ARTIFACT_KEYS)


def test_the_gate_artifacts_belong_to_the_nightly_run(served_night):
    gate = [a for a in served_night["artifacts"] if a["key"] in ("gate-decision", "alarms")]
    assert gate and {a["flow_run_id"] for a in gate} == {served_night["run"]["id"]}


def test_the_served_run_promoted_the_first_iteration(served_night):
    tags = subprocess.run(
        ["git", "tag"], cwd=served_night["repo"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert tags == ["iter-0001"]
