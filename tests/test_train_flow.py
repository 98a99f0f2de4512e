"""The `train` flow under a real Prefect harness, on a tiny policy and real files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from codeloop.io import read_json, write_trajectories
from codeloop.paths import Paths
from codeloop.policy.model import VERSION_FILE, Policy, checkpoint_hash
from tests._tiny_policy import group as _group
from tests._tiny_policy import make_tiny_policy

TINY_TRAIN = {"steps": 2, "lr": 0.001, "micro_batch_size": 2, "grad_accum": 2}


@pytest.fixture(scope="module")
def tiny_policy_dir(tmp_path_factory) -> Path:
    return make_tiny_policy(tmp_path_factory.mktemp("tiny-policy"))


def _workspace(root: Path, policy_dir: Path, scored: bool = True) -> None:
    policy = Policy.load(policy_dir)
    trajs = _group(policy, "a") + _group(policy, "b")
    for t in trajs:
        t.metadata.reward_fn_version = "v1" if scored else ""
    write_trajectories(Paths(root).trajectories_dir, trajs)
    params = {"policy": {"checkpoint": str(policy_dir)}, "train": TINY_TRAIN}
    (root / "params.yaml").write_text(yaml.safe_dump(params))


@pytest.fixture
def preflight_passes(monkeypatch):
    """These tests are about what train writes, not the checklist (tested on its own)."""
    import codeloop.stages.train
    from codeloop.ops.preflight import Check, PreflightReport

    ok = PreflightReport(checks=[Check(name="stand-in", ok=True, reason="", fix="")])
    monkeypatch.setattr(codeloop.stages.train, "run_preflight", lambda params, root=".": ok)


def test_train_flow_writes_the_candidate_and_its_metrics(
    prefect_harness, tiny_policy_dir, tmp_path, preflight_passes
):
    from flows.train import train

    _workspace(tmp_path, tiny_policy_dir)
    metrics = train(root=str(tmp_path))
    cand = Paths(tmp_path).candidate_model
    assert (cand / VERSION_FILE).read_text().strip() == checkpoint_hash(cand)
    on_disk = read_json(Paths(tmp_path).metrics("train"))
    assert on_disk["model_version"] == metrics["model_version"] == checkpoint_hash(cand)
    assert on_disk["n_trajectories"] == 8
    assert len((cand / "train_history.jsonl").read_text().splitlines()) == 2


def test_train_flow_refuses_unscored_trajectories(
    prefect_harness, tiny_policy_dir, tmp_path, preflight_passes
):
    from flows.train import train

    _workspace(tmp_path, tiny_policy_dir, scored=False)
    with pytest.raises(ValueError, match="not scored"):
        train(root=str(tmp_path))
    assert not (Paths(tmp_path).candidate_model).exists()


def test_train_flow_refuses_to_start_when_preflight_fails(
    prefect_harness, tiny_policy_dir, tmp_path
):
    from flows.train import train

    _workspace(
        tmp_path, tiny_policy_dir
    )  # trajectories but no clean data: the real checklist fails
    with pytest.raises(
        RuntimeError, match="(?s)preflight failed.*data/clean/tasks.parquet missing"
    ):
        train(root=str(tmp_path))
    assert not (Paths(tmp_path).candidate_model).exists()


def test_train_flow_with_rft_reports_the_rft_metrics(
    prefect_harness, tiny_policy_dir, tmp_path, preflight_passes
):
    from flows.train import train

    policy = Policy.load(tiny_policy_dir)
    trajs = _group(policy, "a") + _group(policy, "b")
    for t in trajs:
        t.metadata.reward_fn_version = "v1"
        t.terminal_reason = "all_tests_passed" if t.reward == 1.0 else "max_steps"
    write_trajectories(Paths(tmp_path).trajectories_dir, trajs)
    params = {
        "policy": {"checkpoint": str(tiny_policy_dir)},
        "train": {**TINY_TRAIN, "rft": "before"},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    train(root=str(tmp_path))
    on_disk = read_json(Paths(tmp_path).metrics("train"))
    # Per group the two passing rows share one final code (""): one example per task.
    assert (on_disk["rft_mode"], on_disk["rft_examples"], on_disk["steps"]) == ("before", 2, 2)
