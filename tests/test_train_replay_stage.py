"""Replay through the train stage under real dvc: the archive manifest is train's dep.

A dvc workspace (no git: `dvc init --no-scm`) with the real train stage
(``python -m codeloop.stages.train``) on a tiny policy, tonight's scored trajectories
(night 3) and an archive holding night 2, pinned by history/archive_manifest.json. The
module fixture runs `dvc repro` once, then promotes night 3 into the archive as the
nightly flow does; each test checks one property of that state.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from codeloop.config import RetentionConfig
from codeloop.data.archive import MANIFEST, append_night, read_snapshot, snapshot
from codeloop.io import read_json, write_json, write_trajectories
from codeloop.policy.model import Policy
from tests._tiny_policy import BAD, GOOD, make_tiny_policy
from tests._tiny_policy import episode as _episode

pytestmark = pytest.mark.slow
REPO_ROOT = Path(__file__).resolve().parents[1]
TRAIN = {"steps": 1, "lr": 0.001, "micro_batch_size": 4, "grad_accum": 4, "beta": 0.0, "rft": "off"}


def _night(policy, it: int) -> list:
    rows = []
    for task in ("a", "b"):
        for k, (text, r) in enumerate([(GOOD, 1.0), (GOOD, 1.0), (BAD, 0.0), (BAD, 0.0)]):
            t = _episode(policy, task, [(text, "")], r, tid=f"n{it}-{task}-{k}")
            meta = replace(t.metadata, model_name=policy.name, reward_fn_version="v1")
            passed = "all_tests_passed" if r else "max_steps"
            rows.append(replace(t, iteration=it, metadata=meta, terminal_reason=passed,
                                prompt_key=f"{task}@{it}", final_code=text))
    return rows


def _dvc(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=repo, env=env, capture_output=True, text=True
    )


def _make(root: Path) -> Path:
    repo = root / "ws"
    make_tiny_policy(repo / "models/init")
    policy = Policy.load(repo / "models/init")
    write_trajectories(repo / "data/trajectories", _night(policy, 3))
    append_night(repo / "data/archive", _night(policy, 2), RetentionConfig())
    write_json(repo / MANIFEST, snapshot(repo / "data/archive"))
    train = {**TRAIN, "replay": {"fraction": 0.5, "max_age": 2}}
    params = {"policy": {"checkpoint": "models/init"}, "train": train}
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    stage = {
        "cmd": f"{sys.executable} -m codeloop.stages.train --root . --skip-preflight",
        "deps": ["data/trajectories", "models/init", MANIFEST],
        "params": ["train"],
        "outs": ["models/candidate"],
        "metrics": [{"metrics/train.json": {"cache": False}}],
    }
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": stage}}))
    r = _dvc(repo, "init", "--no-scm", "-q")
    assert r.returncode == 0, r.stderr
    return repo


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> dict:
    repo = _make(tmp_path_factory.mktemp("replay-stage"))
    r = _dvc(repo, "repro", "train")
    assert r.returncode == 0, r.stdout + r.stderr
    first = read_json(repo / "metrics/train.json")
    # The promotion: tonight's rows join the archive after train read it.
    policy = Policy.load(repo / "models/init")
    append_night(repo / "data/archive", _night(policy, 3), RetentionConfig())
    status = _dvc(repo, "status", "train", "--json")
    return {"repo": repo, "first": first, "status": json.loads(status.stdout or "{}")}


def test_the_train_stage_replays_the_archived_night(night):
    m = night["first"]
    assert (m["replay_rows"], m["replay_iterations"]) == (8, [2])


def test_train_metrics_record_the_archive_files_it_read(night):
    assert night["first"]["archive_read"] == {
        "files": 2, "iterations": [2], "rows": 8, "manifest": MANIFEST
    }


def test_promoting_tonight_into_the_archive_leaves_train_up_to_date(night):
    assert night["status"] == {}


def test_a_forced_repro_after_the_promotion_rebuilds_the_same_candidate(night):
    repo = night["repo"]
    r = _dvc(repo, "repro", "-f", "train")
    assert r.returncode == 0, r.stdout + r.stderr
    again = read_json(repo / "metrics/train.json")
    assert again["model_version"] == night["first"]["model_version"]


def test_a_new_manifest_makes_train_stale(night, tmp_path):
    repo = tmp_path / "copy"
    shutil.copytree(night["repo"], repo)
    write_json(repo / MANIFEST, snapshot(repo / "data/archive"))  # now lists night 3 too
    status = json.loads(_dvc(repo, "status", "train", "--json").stdout)
    assert "train" in status


def test_an_archived_file_that_changed_since_the_manifest_is_refused(tmp_path):
    policy = Policy.load(make_tiny_policy(tmp_path / "p"))
    append_night(tmp_path / "archive", _night(policy, 2), RetentionConfig())
    manifest = snapshot(tmp_path / "archive")
    part = tmp_path / "archive" / manifest["files"][0]["path"]
    part.write_bytes(part.read_bytes() + b"\0")
    with pytest.raises(ValueError, match="md5 differs"):
        read_snapshot(tmp_path / "archive", manifest, 0, 3)


def test_rft_from_the_archive_runs_through_the_train_stage(night, tmp_path):
    repo = tmp_path / "rft"
    shutil.copytree(night["repo"], repo)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["train"].update(rft="before", rft_source="archive", replay={"fraction": 0.0})
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    r = _dvc(repo, "repro", "train")
    assert r.returncode == 0, r.stdout + r.stderr
    m = read_json(repo / "metrics/train.json")
    # The manifest pins night 2 only; it holds the same two (task, code) passes as tonight.
    assert (m["rft_source"], m["archive_read"]["rows"], m["rft_examples"]) == ("archive", 8, 2)
