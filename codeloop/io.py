"""Reading and writing codeloop's records (the only module that touches data files).

Tasks live in one Parquet file; trajectories in Parquet shards (``part-00000.parquet``)
plus an optional JSONL export for people who grep. Schemas are explicit so an empty
shard still has every column.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from codeloop.schema import Task, Trajectory

TASK_SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("source", pa.string()),
        ("prompt", pa.string()),
        ("entry_point", pa.string()),
        ("io_style", pa.string()),
        ("reference_solution", pa.string()),
        ("setup_code", pa.string()),
        ("visible_tests", pa.list_(pa.string())),
        ("hidden_tests", pa.list_(pa.string())),
        ("difficulty", pa.int64()),
        ("metadata", pa.string()),
        ("kind", pa.string()),
        ("repo", pa.string()),
        ("snapshot", pa.string()),
        ("bug_patch", pa.string()),
        ("patch", pa.string()),
        ("test_patch", pa.string()),
        ("fail_to_pass", pa.list_(pa.string())),
        ("pass_to_pass", pa.list_(pa.string())),
        ("environment", pa.string()),
    ]
)

_OBSERVATION = pa.struct(
    [
        ("stdout", pa.string()),
        ("stderr", pa.string()),
        ("status", pa.string()),
        ("failing_test", pa.string()),
        ("duration_ms", pa.float64()),
        ("tests_passed", pa.int64()),
        ("tests_total", pa.int64()),
        ("output", pa.string()),
        ("truncated", pa.bool_()),
        ("error_kind", pa.string()),
    ]
)
_ACTION = pa.struct(
    [
        ("step", pa.int64()),
        ("action_type", pa.string()),
        ("content", pa.string()),
        ("observation", _OBSERVATION),
        ("reward", pa.float64()),
        ("tool", pa.string()),
        ("args", pa.string()),
        ("raw", pa.string()),
        ("duration_ms", pa.float64()),
    ]
)
_META = pa.struct(
    [
        ("model_name", pa.string()),
        ("model_version", pa.string()),
        ("temperature", pa.float64()),
        ("top_p", pa.float64()),
        ("repetition_penalty", pa.float64()),
        ("max_new_tokens", pa.int64()),
        ("env_timeout", pa.float64()),
        ("execution_time_ms", pa.float64()),
        ("prompt_template_version", pa.string()),
        ("dataset_version", pa.string()),
        ("reward_fn_version", pa.string()),
        ("seed", pa.int64()),
        ("episode_mode", pa.string()),
        ("tests_version", pa.string()),
        ("visible_subset", pa.float64()),
        ("engine", pa.string()),
    ]
)
TRAJECTORY_SCHEMA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("task_id", pa.string()),
        ("prompt_key", pa.string()),
        ("prompt", pa.string()),
        ("initial_code", pa.string()),
        ("actions", pa.list_(_ACTION)),
        ("final_code", pa.string()),
        ("reward", pa.float64()),
        ("reward_components", pa.string()),
        ("done", pa.bool_()),
        ("terminal_reason", pa.string()),
        ("iteration", pa.int64()),
        ("metadata", _META),
        ("token_ids", pa.list_(pa.int64())),
        ("loss_mask", pa.list_(pa.int8())),
        ("sample_logprobs", pa.list_(pa.float32())),
        ("infra_error", pa.string()),
        ("final_diff", pa.string()),
        ("tool_calls", pa.int64()),
        ("tool_errors", pa.int64()),
        ("tests_run", pa.int64()),
        ("model_tests", pa.string()),
    ]
)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON atomically (temp file + rename) so a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, default=str) + "\n")
            n += 1
    return n


def write_tasks(path: str | os.PathLike, tasks: Iterable[Task]) -> int:
    rows = [t.to_row() for t in tasks]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=TASK_SCHEMA)
    pq.write_table(table, path)
    return len(rows)


def read_tasks(path: str | os.PathLike) -> list[Task]:
    if not Path(path).exists():
        raise FileNotFoundError(f"tasks file not found: {path}")
    return [Task.from_row(r) for r in pq.read_table(path).to_pylist()]


def write_trajectories(
    out_dir: str | os.PathLike,
    trajectories: list[Trajectory],
    shard_size: int = 1000,
    jsonl_export: bool = True,
) -> list[Path]:
    """Write trajectories as Parquet shards (and trajectories.jsonl); returns shard paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*.parquet"):
        old.unlink()
    rows = [t.to_row() for t in trajectories]
    shards: list[Path] = []
    for i in range(0, max(len(rows), 1), shard_size):
        chunk = rows[i : i + shard_size]
        p = out / f"part-{len(shards):05d}.parquet"
        pq.write_table(pa.Table.from_pylist(chunk, schema=TRAJECTORY_SCHEMA), p)
        shards.append(p)
    if jsonl_export:
        write_jsonl(out / "trajectories.jsonl", rows)
    return shards


def iter_trajectories(path: str | os.PathLike) -> Iterator[Trajectory]:
    """Yield trajectories from a shard directory or a single Parquet file."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"trajectories not found: {p}")
    files = sorted(p.glob("part-*.parquet")) if p.is_dir() else [p]
    for f in files:
        for row in pq.read_table(f).to_pylist():
            yield Trajectory.from_row(row)


def read_trajectories(path: str | os.PathLike) -> list[Trajectory]:
    return list(iter_trajectories(path))


def read_with_tasks(
    traj_dir: str | os.PathLike, tasks_path: str | os.PathLike
) -> tuple[list[Trajectory], dict[str, Task]]:
    """Trajectories under traj_dir and the tasks they refer to, by task_id."""
    return read_trajectories(traj_dir), {t.task_id: t for t in read_tasks(tasks_path)}
