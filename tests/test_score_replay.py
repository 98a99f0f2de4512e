"""Replay: stored rewards recomputed from stored code, task and version; `codeloop replay`."""

from __future__ import annotations

import pytest
import yaml

from codeloop.cli import main
from codeloop.config import SandboxConfig
from codeloop.io import read_trajectories, write_tasks, write_trajectories
from codeloop.rewards import score_trajectories
from codeloop.rewards.rescore import replay, sample_trajectories
from codeloop.sandbox import make_executor
from tests._rewards_fixtures import (
    ADD_TASK,
    GOOD,
    SPECIAL,
    SYNTAX,
    WRONG_TYPE,
    WRONG_VALUE,
    obs,
    traj,
)

TASKS = {ADD_TASK.task_id: ADD_TASK}
CODES = [GOOD, WRONG_VALUE, WRONG_TYPE, SYNTAX, SPECIAL, ""]


@pytest.fixture(scope="module")
def executor():
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=2))
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def stored(executor, tmp_path_factory):
    """Scored trajectories (mixed versions) written and read back as the stage stores them."""
    trajs = [
        traj(c, tid=f"t{i}", steps=[obs("failed", 1), obs("passed", 2)])
        for i, c in enumerate(CODES)
    ]
    scored = score_trajectories(trajs[:3], TASKS, "v1", executor)
    scored += score_trajectories(trajs[3:], TASKS, "v2", executor)
    root = tmp_path_factory.mktemp("replay")
    write_trajectories(root / "trajectories", scored)
    write_tasks(root / "tasks.parquet", [ADD_TASK])
    return root


def test_replay_of_stored_trajectories_agrees_everywhere(executor, stored):
    report = replay(read_trajectories(stored / "trajectories"), TASKS, executor)
    assert report.summary()["agree"] == len(CODES) and not report.mismatches


def test_a_tampered_reward_is_reported_as_a_mismatch(executor, stored):
    trajs = read_trajectories(stored / "trajectories")
    trajs[0].reward += 0.25
    report = replay(trajs, TASKS, executor)
    assert [r.trajectory_id for r in report.mismatches] == [trajs[0].trajectory_id]


def test_a_tampered_step_reward_is_reported(executor, stored):
    trajs = read_trajectories(stored / "trajectories")
    v2 = next(t for t in trajs if t.metadata.reward_fn_version == "v2")
    v2.actions[0].reward = 0.5
    assert replay([v2], TASKS, executor).mismatches[0].diff_components == ["step_rewards"]


def test_each_row_replays_under_its_own_version(executor, stored):
    report = replay(read_trajectories(stored / "trajectories"), TASKS, executor)
    assert {r.version for r in report.rows} == {"v1", "v2"}


def test_infra_error_rows_are_skipped_not_failed(executor, stored):
    trajs = read_trajectories(stored / "trajectories")
    trajs[0].infra_error = "sandbox lost"
    report = replay(trajs, TASKS, executor)
    assert report.skipped == 1 and not report.mismatches


def test_the_sample_is_seeded():
    trajs = [traj(GOOD, tid=f"t{i}") for i in range(50)]
    a = [t.trajectory_id for t in sample_trajectories(trajs, 10, seed=3)]
    assert a == [t.trajectory_id for t in sample_trajectories(trajs, 10, seed=3)]


def _params(tmp_path) -> str:
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"sandbox": {"timeout_s": 2.0, "workers": 2}}))
    return str(p)


def test_cli_exits_zero_when_every_reward_agrees(stored, tmp_path, capsys):
    rc = main(
        [
            "replay",
            "--trajectories",
            str(stored / "trajectories"),
            "--tasks",
            str(stored / "tasks.parquet"),
            "--params",
            _params(tmp_path),
            "--sample",
            "4",
        ]
    )
    assert rc == 0 and "4 agree, 0 mismatch" in capsys.readouterr().out


def test_cli_exits_non_zero_and_prints_the_diff_on_a_mismatch(stored, tmp_path, capsys):
    trajs = read_trajectories(stored / "trajectories")
    trajs[1].reward = 0.99
    write_trajectories(tmp_path / "bad", trajs)
    rc = main(
        [
            "replay",
            "--trajectories",
            str(tmp_path / "bad"),
            "--tasks",
            str(stored / "tasks.parquet"),
            "--params",
            _params(tmp_path),
            "--sample",
            "0",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1 and "MISMATCH" in out and "reward: 0.99" in out


def test_cli_names_a_missing_tasks_file(stored, tmp_path, capsys):
    rc = main(
        [
            "replay",
            "--trajectories",
            str(stored / "trajectories"),
            "--tasks",
            str(tmp_path / "none.parquet"),
            "--params",
            _params(tmp_path),
        ]
    )
    assert rc == 2 and "none.parquet" in capsys.readouterr().err
