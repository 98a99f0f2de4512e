"""preflight passes on a complete setup and fails with reasons on a broken one; doctor finds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from codeloop.config import Params, parse_params
from codeloop.io import write_json, write_tasks, write_trajectories
from codeloop.ops.doctor import code_lengths, consistency, reward_distribution
from codeloop.ops.preflight import run_preflight
from codeloop.paths import Paths
from codeloop.schema import Action, Observation, Task, Trajectory, TrajectoryMetadata


def _task(i: int, prefix: str = "t") -> Task:
    return Task(
        task_id=f"{prefix}{i}",
        source="synthetic",
        prompt=f"def f{prefix}{i}(x): add {i}",
        entry_point=f"f{prefix}{i}",
        visible_tests=[f"assert f{prefix}{i}(0) == {i}"],
        hidden_tests=[f"assert f{prefix}{i}(1) == {i + 1}"],
    )


def _traj(
    i: int, reward: float, key: str = "k0", code: str = "def f(x):\n    return x + 1", **meta
) -> Trajectory:
    md = dict(
        model_version="mv1",
        dataset_version="ds1",
        reward_fn_version="v1",
        prompt_template_version="cl-v1",
        max_new_tokens=64,
        temperature=1.0,
    )
    md.update(meta)
    return Trajectory(
        trajectory_id=f"tr{i}",
        task_id="t0",
        prompt_key=key,
        prompt="p",
        actions=[Action(0, "generate", code, Observation(status="passed"))],
        final_code=code,
        reward=reward,
        reward_components={"pass_rate": reward},
        done=True,
        terminal_reason="all_tests_passed",
        metadata=TrajectoryMetadata(**md),
    )


@pytest.fixture()
def good_root(tmp_path: Path) -> Path:
    write_tasks(Paths(tmp_path).clean_tasks, [_task(i) for i in range(4)])
    write_tasks(Paths(tmp_path).frozen_dir / "heldout.parquet", [_task(i, "h") for i in range(2)])
    write_json(Paths(tmp_path).clean_report, {"kept": 4, "dropped_duplicates": 1})
    write_trajectories(Paths(tmp_path).trajectories_dir, [_traj(i, i / 4) for i in range(4)])
    (Paths(tmp_path).init_model).mkdir(parents=True)
    (Paths(tmp_path).init_model / "model_version.txt").write_text("mv1\n")
    dvc = {"stages": {"evaluate": {"cmd": "x", "metrics": [{"metrics/eval.json": {}}]}}}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(dvc))
    return tmp_path


def test_preflight_passes_on_a_complete_setup(good_root):
    report = run_preflight(Params(), str(good_root), run_golden=False)
    assert report.ok, report.render()
    assert len(report.checks) == 10  # the article's eight + policy.device + train.strategy


def test_preflight_fails_on_an_empty_workspace_naming_what_is_missing(tmp_path):
    report = run_preflight(Params(), str(tmp_path), run_golden=False)
    assert not report.ok
    assert "tasks.parquet missing" in report.render()


def test_preflight_fails_when_a_frozen_task_leaked_into_training(good_root):
    write_tasks(Paths(good_root).frozen_dir / "heldout.parquet", [_task(0)])
    report = run_preflight(Params(), str(good_root), run_golden=False)
    assert any("dedupe" in c.name and "t0" in c.reason for c in report.failures)


def test_preflight_fails_on_trajectories_from_another_model_version(good_root):
    (Paths(good_root).init_model / "model_version.txt").write_text("mv2\n")
    report = run_preflight(Params(), str(good_root), run_golden=False)
    assert any("model version" in c.name for c in report.failures)


def test_preflight_fails_on_an_unisolated_sandbox(good_root):
    params = Params.model_validate({"sandbox": {"backend": "subprocess"}})
    report = run_preflight(params, str(good_root), run_golden=False)
    assert [c.name for c in report.failures] == ["sandbox limits"]


def test_doctor_flags_zero_variance_groups():
    trajs = [_traj(i, 1.0, key=f"k{i // 2}") for i in range(6)]
    assert not reward_distribution(trajs).ok


def test_doctor_flags_empty_or_constant_functions():
    trajs = [_traj(i, 0.0, code="def f(x):\n    return 3") for i in range(5)]
    assert not code_lengths(trajs).ok


def test_doctor_flags_a_reward_version_mismatch(tmp_path):
    trajs = [_traj(0, 1.0, reward_fn_version="v2")]
    f = consistency(trajs, Params(), tmp_path)
    assert not f.ok and "v2" in f.finding


@pytest.mark.parametrize("version,model", [("v2-critic", "critic"), ("v2-judge", "judge")])
def test_preflight_refuses_a_model_based_reward_version_as_unreleased(good_root, version, model):
    params = parse_params({"reward": {"version": version}})
    report = run_preflight(params, str(good_root), run_golden=False)
    check = next(c for c in report.checks if c.name.startswith("reward version pinned"))
    assert not check.ok
    assert f"{version} is unreleased" in check.reason and model in check.reason
    assert "v1" in check.fix and version not in check.fix
