"""The real nightly run: every stage of dvc.yaml on tiny params, against a real
`prefect server start`, checked through its REST API.

tests/test_ops_prefect_server.py checks the orchestration on a two-stage toy pipeline;
this one runs the project's own stages (clean ... evaluate) as the cron job would:
`python -m flows.nightly` in a subprocess, in a temp git copy of the repo, with the
repo's local DVC remote configuration. Slow (several minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.artifacts import ARTIFACT_KEYS, NIGHTLY_ARTIFACT_KEYS
from tests._prefect_api import base_name as _base
from tests._prefect_api import post as _post
from tests._prefect_server import local_prefect_server
from tests._tiny_repo import TINY
from tests._tiny_repo import copy_repo as _copy_repo
from tests._tiny_repo import git as _git
from tests._tiny_repo import merge as _merge

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def _stage_task_runs(api: str, flow_run_id: str) -> list[dict]:
    body = {"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 200}
    return _post(api, "/task_runs/filter", body)


@pytest.fixture(scope="module")
def real_night(tmp_path_factory):
    work = tmp_path_factory.mktemp("night") / "repo"
    work.mkdir()
    _copy_repo(REPO, work)
    params = yaml.safe_load((work / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(_merge(params, TINY), sort_keys=False))
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "tiny")
    stages = list(yaml.safe_load((work / "dvc.yaml").read_text())["stages"])
    with local_prefect_server() as (api, env):
        env = {
            **env,
            "PYTHONPATH": str(work),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        }
        proc = subprocess.run(
            [sys.executable, "-m", "flows.nightly"],
            cwd=work, env=env, capture_output=True, text=True, timeout=1500,
        )
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        [run] = _post(api, "/flow_runs/filter", {"flows": {"name": {"any_": ["nightly"]}}})
        tasks = _stage_task_runs(api, run["id"])
        keys = {"key": {"any_": [*ARTIFACT_KEYS, *NIGHTLY_ARTIFACT_KEYS]}}
        artifacts = _post(api, "/artifacts/filter", {"artifacts": keys})
        yield {"run": run, "tasks": tasks, "artifacts": artifacts, "stages": stages, "repo": work}


def test_the_real_nightly_run_completed(real_night):
    assert real_night["run"]["state_type"] == "COMPLETED"


def test_every_dvc_stage_ran_as_its_own_completed_task(real_night):
    done = {_base(t["name"]) for t in real_night["tasks"] if t["state_type"] == "COMPLETED"}
    assert {f"repro_stage[{s}]" for s in real_night["stages"]} <= done, sorted(done)


def test_the_stages_and_the_flow_published_every_keyed_artifact(real_night):
    keys = {a["key"] for a in real_night["artifacts"]}
    assert keys == {*ARTIFACT_KEYS, *NIGHTLY_ARTIFACT_KEYS}


def test_the_night_left_a_tagged_commit_with_the_promoted_checkpoint_or_its_refusal(real_night):
    repo = real_night["repo"]
    params = yaml.safe_load((repo / "params.yaml").read_text())
    tags = _git(repo, "tag").split()
    if tags:
        assert tags == ["iter-0001"]
        assert params["policy"]["checkpoint"] == "models/iter-0001"
        assert (repo / "models/iter-0001.dvc").exists()
    else:  # a refused candidate leaves the last good iteration (the SFT init) in place
        assert params["policy"]["checkpoint"] == "models/init"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.strip() == ""


def test_a_promoted_night_keeps_its_per_task_results_for_the_next_gate(real_night):
    repo = real_night["repo"]
    if not _git(repo, "tag").split():
        pytest.skip("the night was refused: nothing promoted, nothing kept")
    kept = json.loads((repo / "history/eval_baseline.json").read_text())
    assert kept["tag"] == "iter-0001" and kept["sets"]
    assert _git(repo, "ls-files", "history/eval_baseline.json").strip()
