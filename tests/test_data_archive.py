"""The trajectory archive: partitions, retention tiers, the size budget, queries, old rows."""

from __future__ import annotations

import random
from dataclasses import replace

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from codeloop.cli import main
from codeloop.config import RetentionConfig
from codeloop.data.archive import FILE_SCHEMA, append_night, partition_dir, query, retain
from codeloop.schema import Trajectory, TrajectoryMetadata


def _traj(i: int, it: int, reward: float, reason: str, version: str = "v2", **kw) -> Trajectory:
    return Trajectory(
        trajectory_id=f"n{it}-{i}",
        task_id=f"task{i % 3}",
        prompt_key=f"n{it}-k{i % 3}",
        prompt="p",
        final_code=f"x = {i}",
        reward=reward,
        terminal_reason=reason,
        iteration=it,
        metadata=TrajectoryMetadata(reward_fn_version=version),
        token_ids=[1, 2, 3],
        loss_mask=[0, 1, 1],
        sample_logprobs=[0.0, -0.5, -1.0],
        **kw,
    )


def _night(it: int, n: int = 12, version: str = "v2") -> list[Trajectory]:
    return [
        _traj(i, it, 1.0, "all_tests_passed", version)
        if i % 4 == 0
        else _traj(i, it, 0.0, ("error", "max_steps")[i % 2], version)
        for i in range(n)
    ]


def test_a_night_lands_in_its_iteration_and_reward_version_partition(tmp_path):
    append_night(tmp_path / "a", _night(3), RetentionConfig())
    assert (partition_dir(tmp_path / "a", 3, "v2") / "part-sft.parquet").exists()


def test_pandas_reads_the_archive_with_its_partition_columns(tmp_path):
    append_night(tmp_path / "a", _night(1) + _night(2), RetentionConfig())
    df = pd.read_parquet(tmp_path / "a")
    assert sorted(df["iteration"].astype(int).unique()) == [1, 2]


def test_datasets_loads_the_archive_files(tmp_path):
    import datasets

    append_night(tmp_path / "a", _night(1), RetentionConfig())
    ds = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "a" / "**" / "*.parquet"), split="train"
    )
    assert sorted(ds["trajectory_id"]) == sorted(t.trajectory_id for t in _night(1))


def test_retention_keeps_rows_above_the_threshold_and_a_sample_per_stratum(tmp_path):
    tiers = retain(_night(1), RetentionConfig(sample_per_stratum=2), {}, 1)
    assert (len(tiers["sft"]), len(tiers["sample"]), len(tiers["rest"])) == (3, 4, 5)


def test_the_stratified_sample_covers_every_bucket_and_terminal_reason(tmp_path):
    buckets = {"task0": 0, "task1": 1, "task2": 2}
    tiers = retain(_night(1, 24), RetentionConfig(sample_per_stratum=1), buckets, 1)
    strata = {(buckets[t.task_id], t.terminal_reason) for t in tiers["sample"]}
    rest = {(buckets[t.task_id], t.terminal_reason) for t in tiers["rest"] + tiers["sample"]}
    assert strata == rest


def test_infra_error_rows_are_never_kept(tmp_path):
    rows = [_traj(0, 1, 1.0, "infra_error", infra_error="sandbox died")]
    counts = append_night(tmp_path / "a", rows, RetentionConfig())
    assert (counts["kept"], counts["infra"]) == (0, 1)


def test_past_the_size_budget_the_rest_is_dropped_and_the_kept_tiers_stay(tmp_path):
    cfg = RetentionConfig(sample_per_stratum=1, size_budget_mb=1e-6)
    counts = append_night(tmp_path / "a", _night(1), cfg)
    ids = {t.trajectory_id for t in query(tmp_path / "a")}
    assert (counts["dropped"], counts["archived_rest"], len(ids)) == (7, 0, 5)


def _large_night() -> list[Trajectory]:
    rng = random.Random(0)  # random ids: the token columns dominate the file sizes
    rows = []
    for t in _night(1):
        ids = [rng.randrange(50_000) for _ in range(20_000)]
        rows.append(
            replace(t, token_ids=ids, loss_mask=[1] * len(ids), sample_logprobs=[-1.0] * len(ids))
        )
    return rows


def test_past_the_size_budget_the_rest_is_kept_stripped_when_that_fits(tmp_path):
    kept = append_night(
        tmp_path / "k",
        _large_night(),
        RetentionConfig(sample_per_stratum=1, size_budget_mb=1e-6, over_budget="drop"),
    )["archive_bytes"]
    budget = (kept + 50_000) / 2**20  # room for the stripped rest, not for the full one
    cfg = RetentionConfig(sample_per_stratum=1, size_budget_mb=budget, over_budget="strip")
    counts = append_night(tmp_path / "a", _large_night(), cfg)
    stripped = [t for t in query(tmp_path / "a") if not t.token_ids]
    assert (counts["stripped"], counts["dropped"], len(stripped)) == (7, 0, 7)


def test_stripped_rows_keep_their_code_and_reward_but_never_train(tmp_path):
    from codeloop.data.archive import strip

    t = strip(_large_night()[1])
    assert (t.final_code, t.reward, t.token_ids, t.sample_logprobs) == ("x = 1", 0.0, [], [])


def test_under_the_size_budget_the_rest_is_archived(tmp_path):
    counts = append_night(tmp_path / "a", _night(1), RetentionConfig(sample_per_stratum=1))
    assert (counts["archived_rest"], counts["dropped"]) == (7, 0)


def test_an_archived_night_is_never_rewritten(tmp_path):
    append_night(tmp_path / "a", _night(1), RetentionConfig())
    with pytest.raises(FileExistsError, match="iteration=1"):
        append_night(tmp_path / "a", _night(1), RetentionConfig())


def test_the_query_filters_task_since_reward_version_and_passing(tmp_path):
    a = tmp_path / "a"
    append_night(a, _night(1) + _night(2) + _night(3, version="v1"), RetentionConfig())
    rows = query(a, task_id="task0", since=2, reward_version="v2", passing=True)
    assert [t.trajectory_id for t in rows] == ["n2-0"]


def test_rows_round_trip_to_trajectories(tmp_path):
    night = _night(1)
    append_night(tmp_path / "a", night, RetentionConfig())
    assert sorted(query(tmp_path / "a"), key=lambda t: t.trajectory_id) == sorted(
        night, key=lambda t: t.trajectory_id
    )


def test_rows_of_an_older_schema_still_load(tmp_path):
    # A file written before infra_error existed: the column reads as the default.
    part = partition_dir(tmp_path / "a", 1, "v1")
    part.mkdir(parents=True)
    old = pa.schema([f for f in FILE_SCHEMA if f.name != "infra_error"])
    row = {k: v for k, v in _traj(0, 1, 1.0, "all_tests_passed").to_row().items()}
    del row["iteration"], row["infra_error"]
    pq.write_table(pa.Table.from_pylist([row], schema=old), part / "part-sft.parquet")
    (loaded,) = query(tmp_path / "a")
    assert (loaded.trajectory_id, loaded.iteration, loaded.infra_error) == ("n1-0", 1, "")


def test_the_archive_query_command_counts_the_matches(tmp_path, capsys):
    append_night(tmp_path / "a", _night(1) + _night(2), RetentionConfig())
    argv = ["archive", "query", "--archive", str(tmp_path / "a"), "--task-id", "task0"]
    assert main([*argv, "--since", "2", "--reward-version", "v2", "--passing", "--count"]) == 0
    assert capsys.readouterr().out.strip() == "1"


def test_the_archive_query_command_refuses_a_missing_archive(tmp_path, capsys):
    assert main(["archive", "query", "--archive", str(tmp_path / "none")]) == 2
    assert "not found" in capsys.readouterr().err


def test_a_stray_file_in_the_archive_folder_is_not_read_as_an_episode(tmp_path):
    append_night(tmp_path / "a", _night(1), RetentionConfig())
    (tmp_path / "a" / "notes.txt").write_text("not parquet")
    assert len(query(tmp_path / "a")) == len(_night(1))


def test_an_unreadable_archive_part_is_an_error_naming_the_file(tmp_path, capsys):
    part = partition_dir(tmp_path / "a", 1, "v1")
    part.mkdir(parents=True)
    (part / "part-sft.parquet").write_text("truncated")
    assert main(["archive", "query", "--archive", str(tmp_path / "a")]) == 2
    assert "part-sft.parquet: not a readable archive part" in capsys.readouterr().err
