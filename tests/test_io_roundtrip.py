"""Tasks and trajectories survive a Parquet round trip with every field intact."""

from __future__ import annotations

import pyarrow.parquet as pq

from codeloop.io import (
    TRAJECTORY_SCHEMA,
    read_tasks,
    read_trajectories,
    write_tasks,
    write_trajectories,
)
from codeloop.schema import Action, Observation, Task, Trajectory, TrajectoryMetadata


def _trajectory(i: int) -> Trajectory:
    return Trajectory(
        trajectory_id=f"t{i}",
        task_id="synth/1",
        prompt_key="synth/1",
        prompt="Write f",
        actions=[
            Action(
                step=0,
                action_type="generate",
                content="def f(): return 1",
                observation=Observation(
                    status="failed", failing_test="assert f() == 2", duration_ms=3.5, tests_total=1
                ),
            ),
        ],
        final_code="def f(): return 1",
        reward=0.25,
        reward_components={"pass_rate": 0.0, "syntax": 0.0},
        done=True,
        terminal_reason="max_steps",
        metadata=TrajectoryMetadata(model_version="abc", temperature=0.7, seed=3),
        token_ids=[1, 2, 3],
        loss_mask=[0, 1, 1],
        sample_logprobs=[0.0, -0.5, -1.25],
    )


def test_tasks_round_trip_through_parquet(tmp_path):
    task = Task(
        task_id="x/1",
        source="mbpp",
        prompt="p",
        entry_point="f",
        visible_tests=["assert f(1) == 2"],
        hidden_tests=["assert f(2) == 3"],
        metadata={"license": "CC-BY-4.0"},
    )
    write_tasks(tmp_path / "t.parquet", [task])
    assert read_tasks(tmp_path / "t.parquet") == [task]


def test_trajectories_round_trip_through_shards(tmp_path):
    trajs = [_trajectory(i) for i in range(5)]
    shards = write_trajectories(tmp_path / "out", trajs, shard_size=2)
    assert len(shards) == 3
    assert read_trajectories(tmp_path / "out") == trajs


def test_an_empty_trajectory_set_still_writes_a_shard_with_every_column(tmp_path):
    (shard,) = write_trajectories(tmp_path / "out", [])
    assert pq.read_schema(shard).names == TRAJECTORY_SCHEMA.names


def test_rewriting_a_shard_directory_removes_stale_shards(tmp_path):
    write_trajectories(tmp_path / "out", [_trajectory(i) for i in range(4)], shard_size=1)
    write_trajectories(tmp_path / "out", [_trajectory(0)], shard_size=1)
    assert len(read_trajectories(tmp_path / "out")) == 1


def test_every_trajectory_field_has_a_parquet_column():
    from dataclasses import fields

    assert TRAJECTORY_SCHEMA.names == [f.name for f in fields(Trajectory)]
    meta = TRAJECTORY_SCHEMA.field("metadata").type
    assert [meta.field(i).name for i in range(meta.num_fields)] == [
        f.name for f in fields(TrajectoryMetadata)
    ]


def test_a_mode_episode_keeps_its_mode_and_the_models_tests_through_parquet(tmp_path):
    from dataclasses import replace

    t = _trajectory(0)
    t = replace(t, model_tests="assert f() == 1\n",
                metadata=replace(t.metadata, episode_mode="tdd"),
                actions=[Action(step=0, action_type="write_tests", content="assert f() == 1"),
                         *t.actions])
    write_trajectories(tmp_path / "out", [t])
    (back,) = read_trajectories(tmp_path / "out")
    assert back == t and back.metadata.episode_mode == "tdd" and back.model_tests


def test_a_row_written_before_a_column_existed_reads_with_that_fields_default():
    row = _trajectory(0).to_row()
    row["model_tests"] = None
    row["metadata"] = {**row["metadata"], "episode_mode": None}
    back = Trajectory.from_row(row)
    assert back.model_tests == "" and back.metadata.episode_mode == ""
