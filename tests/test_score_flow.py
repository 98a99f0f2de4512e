"""The score flow end to end under a real Prefect harness, on a tiny rollout directory."""

from __future__ import annotations

import pytest
import yaml

from codeloop.io import read_json, read_trajectories, write_tasks, write_trajectories
from codeloop.paths import Paths
from tests._rewards_fixtures import ADD_TASK, GOOD, SPECIAL, WRONG_VALUE, traj


def _workspace(tmp_path, version: str) -> None:
    params = {
        "reward": {"version": version},
        "score": {"replay_sample": 4, "replay_seed": 1},
        "sandbox": {"timeout_s": 2.0, "workers": 2},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    write_tasks(Paths(tmp_path).bucket_tasks, [ADD_TASK])
    codes = [GOOD, WRONG_VALUE, SPECIAL, GOOD, GOOD, GOOD]
    keys = ["g1", "g1", "g1", "g2", "g2", "g2"]  # g2 ties: a zero-std group
    write_trajectories(
        Paths(tmp_path).rollouts_dir,
        [traj(c, tid=f"t{i}", key=k) for i, (c, k) in enumerate(zip(codes, keys, strict=True))],
    )


@pytest.fixture(scope="module")
def ran(prefect_harness, tmp_path_factory):
    from flows.score import score

    root = tmp_path_factory.mktemp("score")
    _workspace(root, "v2")
    metrics = score(params_path="params.yaml", root=str(root))
    return root, metrics


def test_the_flow_writes_complete_trajectories(ran):
    root, _ = ran
    trajs = read_trajectories(Paths(root).trajectories_dir)
    assert len(trajs) == 6 and all(t.metadata.reward_fn_version == "v2" for t in trajs)
    assert (Paths(root).trajectories_dir / "trajectories.jsonl").exists()


def test_metrics_report_component_distributions(ran):
    _, metrics = ran
    rltf = metrics["components"]["rltf"]
    assert set(rltf) >= {"mean", "std", "min", "max", "q50"} and rltf["max"] == 1.0


def test_metrics_report_the_visible_hidden_gap_of_the_hack(ran):
    root, _ = ran
    m = read_json(Paths(root).metrics("score"))
    # SPECIAL passes both visible tests and no hidden test: 1/6 of the pass rate gap.
    assert m["visible_hidden_gap"] == pytest.approx(1 / 6, abs=1e-6)


def test_metrics_count_zero_std_groups(ran):
    _, metrics = ran
    assert metrics["zero_std_group_fraction"] == 0.5


def test_the_flow_replays_its_sample_and_agrees(ran):
    _, metrics = ran
    assert metrics["replay"]["replayed"] == 4 and metrics["replay"]["mismatches"] == 0


def test_a_finished_score_stage_leaves_no_resume_state(ran):
    # score.resume is on by default: shards were kept while it ran, dropped after the outs.
    root, _ = ran
    assert not Paths(root).resume_dir("score").exists()
