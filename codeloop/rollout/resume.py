"""Resumable rollout: finished GRPO groups are kept as shards a rerun skips.

A rollout killed mid-way (kill -9, OOM, a lost worker) would otherwise restart from zero.
With a resume directory, ``fan_out_rollout`` rolls out fixed groups of
``rollout.resume_shard_tasks`` tasks; each group's trajectories (whole GRPO groups, never
part of one) are written as one Parquet shard, atomically (temp file + rename), the
moment the group finishes. A shard is named by the hash of everything its rows depend
on: the policy's content hash, the rollout and sandbox configs, the dataset version, the
source of the code that produces the rows and the group's tasks. A rerun with the same inputs reads the shards it finds and rolls out
only the missing groups; any changed input changes every name, so a stale shard is never
reused. Rows are sampled from per-row seeds (codeloop.rollout.scaleout), so the groups'
rows do not depend on which run produced them: the final set equals an uninterrupted
run's, in the same order, with no duplicates.

Where: ``.dvc/tmp/codeloop-resume/<stage>/`` (``Paths.resume_dir``), not under the outs,
because DVC deletes a stage's outs before running it, which would delete the resume
state with them; ``.dvc/tmp`` is DVC's own ignored scratch space (neither git nor DVC
tracks it). The stage removes its resume directory once its outs are written.

The score stage resumes the same way (codeloop.rewards.fanout): shards of
``score.resume_shard_groups`` whole GRPO groups, keyed by the reward and sandbox configs,
the reward code and the stored rows they score.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from codeloop.io import TRAJECTORY_SCHEMA
from codeloop.schema import Trajectory


def policy_version(policy_dir: str | os.PathLike) -> str:
    """The checkpoint's content hash as saved beside it (model_version.txt)."""
    from codeloop.policy.model import VERSION_FILE

    vf = Path(policy_dir) / VERSION_FILE
    if not vf.exists():
        raise FileNotFoundError(f"{vf}: no model_version beside the policy; cannot key resume")
    return vf.read_text().strip()


def code_hash(*packages: str) -> str:
    """Hash of the .py sources of codeloop subpackages: an edited stage never reuses shards."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for pkg in packages:
        for f in sorted((root / pkg).glob("*.py")):
            h.update(f"{pkg}/{f.name}".encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def shard_key(inputs: dict, rows: list) -> str:
    """Hash of a shard's inputs (policy, configs, code) and its rows (Task or Trajectory)."""
    payload = json.dumps(
        {"inputs": inputs, "rows": [r.to_row() for r in rows]}, sort_keys=True, default=str
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


class ShardStore:
    """Finished groups under one directory, by shard key."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.parquet"

    def load(self, key: str) -> list[Trajectory] | None:
        p = self._path(key)
        if not p.exists():
            return None
        return [Trajectory.from_row(r) for r in pq.read_table(p).to_pylist()]

    def save(self, key: str, trajs: list[Trajectory]) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        p = self._path(key)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")  # a kill leaves only a temp file
        table = pa.Table.from_pylist([t.to_row() for t in trajs], schema=TRAJECTORY_SCHEMA)
        pq.write_table(table, tmp)
        os.replace(tmp, p)
        return p

    def shards(self) -> list[Path]:
        return sorted(self.root.glob("*.parquet")) if self.root.exists() else []

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
