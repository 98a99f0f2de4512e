"""The whole pipeline, for real: `dvc repro` in a temp git copy of the repo on tiny params.

One module-scoped run feeds several checks (each test asserts one property of it), because
a full repro costs about a minute even on tiny params.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from codeloop.io import read_trajectories
from codeloop.paths import Paths
from codeloop.schema import Trajectory
from tests._tiny_repo import TINY
from tests._tiny_repo import copy_repo as _copy_repo
from tests._tiny_repo import git as _git
from tests._tiny_repo import merge as _merge

pytestmark = pytest.mark.slow


def _dvc(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # Stages report to the session's Prefect server instead of each booting a temporary one.
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise AssertionError(f"dvc {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, repo_root, prefect_harness):
    work = tmp_path_factory.mktemp("repo")
    _copy_repo(repo_root, work)
    params = yaml.safe_load((work / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(_merge(params, TINY), sort_keys=False))
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "tiny")
    first = _dvc(work, "repro")
    return work, first


def _trajectories(work: Path) -> list[Trajectory]:
    return read_trajectories(Paths(work).trajectories_dir)


def test_a_full_repro_writes_every_stage_output(pipeline):
    work, _ = pipeline
    paths = Paths(work)
    for path in (
        paths.clean_tasks,
        paths.manifest,
        paths.clean_dir / "quarantine.jsonl",
        paths.init_model / "model_version.txt",
        paths.plan,
        paths.trajectories_dir / "trajectories.jsonl",
        paths.candidate_model / "model_version.txt",
        paths.critic_model / "critic.json",
        paths.metrics("critic"),
        paths.metrics("evaluate"),
    ):
        assert path.exists(), path


def test_every_trajectory_field_is_filled(pipeline):
    work, _ = pipeline
    trajs = _trajectories(work)
    assert trajs
    for t in trajs:
        assert t.trajectory_id and t.task_id and t.prompt_key and t.prompt
        assert t.actions and t.terminal_reason
        assert all(a.observation.status for a in t.actions)
        assert t.reward_components
        meta = t.metadata
        assert meta.model_name and meta.model_version and meta.dataset_version
        assert meta.reward_fn_version and meta.prompt_template_version
        assert meta.max_new_tokens > 0 and meta.env_timeout > 0
        assert len(t.token_ids) == len(t.loss_mask) == len(t.sample_logprobs)


def test_each_prompt_key_holds_exactly_samples_per_task_episodes(pipeline):
    work, _ = pipeline
    sizes = Counter(t.prompt_key for t in _trajectories(work))
    assert set(sizes.values()) == {TINY["rollout"]["samples_per_task"]}


def test_trajectories_carry_the_dataset_version_of_the_manifest(pipeline):
    work, _ = pipeline
    version = json.loads((Paths(work).manifest).read_text())["dataset_version"]
    assert {t.metadata.dataset_version for t in _trajectories(work)} == {version}


def test_codeloop_report_gives_every_stage_with_metrics_a_headline(pipeline):
    from codeloop.ops.report import METRICS, build_report

    work, _ = pipeline
    stages = build_report(work)["stages"]
    assert [s for s in METRICS if stages[s] is None] == []


def test_codeloop_report_counts_the_clean_stages_kept_rows(pipeline):
    from codeloop.ops.report import build_report

    work, _ = pipeline
    clean = json.loads((work / "metrics/clean.json").read_text())
    assert build_report(work)["stages"]["clean"]["kept"] == (
        clean["kept_train"] + clean["kept_heldout"]
    )


def test_a_second_repro_with_nothing_changed_runs_no_stage(pipeline):
    work, _ = pipeline
    out = _dvc(work, "repro").stdout
    assert "Running stage" not in out


def test_changing_only_the_reward_version_reruns_score_but_not_rollout(pipeline):
    work, _ = pipeline
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["reward"]["version"] = "v2"
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = _dvc(work, "repro").stdout
    assert "Running stage 'score'" in out
    assert "Running stage 'rollout'" not in out
    assert {t.metadata.reward_fn_version for t in _trajectories(work)} == {"v2"}
