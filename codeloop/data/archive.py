"""The trajectory archive: every promoted night's scored trajectories, kept by retention.

Layout: a hive-partitioned Parquet dataset, ``data/archive/iteration=N/reward_fn_version=V/``
with ``part-sft.parquet`` and ``part-sample.parquet`` (and ``part-rest.parquet`` while the
archive stays under ``retention.size_budget_mb``, else ``part-stripped.parquet``). Each file holds rows of the trajectory
schema (``codeloop.io.TRAJECTORY_SCHEMA``) minus the two partition columns, which pyarrow,
pandas and ``datasets`` restore from the directory names::

    pd.read_parquet("data/archive")                      # every row, partition columns too
    pq.read_table("data/archive", filters=[("iteration", ">=", 3)])
    datasets.load_dataset("parquet", data_files="data/archive/**/*.parquet")

Append-only: a night writes its own partition and never rewrites an older one, so each
DVC version of the archive (``data/archive.dvc``, committed with the promotion) shares
every earlier file in the cache, and no promoted iteration's data ever changes after the
fact. The train stage reads it only through history/archive_manifest.json (``snapshot``,
``read_snapshot`` below): the listed files of earlier nights, md5-checked, which retention
never rewrites (it decides only the new night's tiers).

Retention tiers (``retention:`` in params.yaml): ``sft`` keeps every row with reward >=
``sft_reward_threshold``; ``sample`` keeps ``sample_per_stratum`` rows of the rest per
(bucket, terminal_reason), seeded by ``seed`` and the iteration; ``rest`` is archived while
the archive fits the size budget; past it, ``over_budget: strip`` keeps it as
``part-stripped.parquet`` (code, rewards, reasons; no token ids, log-probs or run output,
so it never trains: the trainer and the transitions export skip token-less rows) while
that fits, and otherwise (or with ``drop``) drops it. Infra-error rows are never kept:
they measure our infrastructure, not the policy.
"""

from __future__ import annotations

import os
import random
import shutil
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from codeloop.config import RetentionConfig
from codeloop.io import TRAJECTORY_SCHEMA
from codeloop.schema import Trajectory
from codeloop.schema import passing as passed

PARTITIONS = ("iteration", "reward_fn_version")
# Files carry the trajectory schema minus the partition columns (hive restores them).
FILE_SCHEMA = pa.schema([f for f in TRAJECTORY_SCHEMA if f.name != "iteration"])
PARTITION_SCHEMA = pa.schema([("iteration", pa.int64()), ("reward_fn_version", pa.string())])
TIERS = ("sft", "sample", "rest")


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.parquet")) if path.exists() else 0


def retain(
    trajs: list[Trajectory], cfg: RetentionConfig, buckets: dict[str, int], iteration: int
) -> dict[str, list[Trajectory]]:
    """Split one night's rows into the tiers sft, sample, rest (and infra, never kept)."""
    tiers: dict[str, list[Trajectory]] = {"sft": [], "sample": [], "rest": [], "infra": []}
    strata: dict[tuple[int, str], list[Trajectory]] = defaultdict(list)
    for t in trajs:
        if t.infra_error:
            tiers["infra"].append(t)
        elif t.reward >= cfg.sft_reward_threshold:
            tiers["sft"].append(t)
        else:
            strata[(buckets.get(t.task_id, -1), t.terminal_reason)].append(t)
    rng = random.Random(f"{cfg.seed}:{iteration}")
    for key in sorted(strata):
        rows = sorted(strata[key], key=lambda t: t.trajectory_id)
        picked = set(rng.sample(range(len(rows)), min(cfg.sample_per_stratum, len(rows))))
        for i, t in enumerate(rows):
            tiers["sample" if i in picked else "rest"].append(t)
    return tiers


def _write(part_dir: Path, name: str, rows: list[Trajectory]) -> Path:
    dicts = [t.to_row() for t in rows]
    for d in dicts:
        del d["iteration"]
    path = part_dir / f"part-{name}.parquet"
    table = pa.Table.from_pylist(dicts, schema=FILE_SCHEMA)
    pq.write_table(table, path, compression="zstd")
    return path


def strip(t: Trajectory) -> Trajectory:
    """t without what makes it large and trainable: token ids, log-probs, run output."""
    actions = [
        replace(a, observation=replace(a.observation, stdout="", stderr="")) for a in t.actions
    ]
    return replace(t, actions=actions, token_ids=[], loss_mask=[], sample_logprobs=[])


def _write_rest(archive, part, rows, cfg: RetentionConfig, budget: int, counts) -> None:
    """The rest tier in full if it fits the budget, else stripped (if it fits) or dropped."""
    path = _write(part, "rest", rows)
    if _dir_bytes(archive) <= budget:
        counts["archived_rest"] += len(rows)
        return
    path.unlink()
    if cfg.over_budget == "strip":
        path = _write(part, "stripped", [strip(t) for t in rows])
        if _dir_bytes(archive) <= budget:
            counts["stripped"] += len(rows)
            return
        path.unlink()
    counts["dropped"] += len(rows)


def partition_dir(archive: Path, iteration: int, reward_version: str) -> Path:
    return Path(archive) / f"iteration={iteration}" / f"reward_fn_version={reward_version}"


def append_night(
    archive: str | os.PathLike,
    trajs: list[Trajectory],
    cfg: RetentionConfig,
    buckets: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Append one night's scored trajectories to the archive; returns the retention counts.

    Refuses a night (iteration) that is already archived: partitions are append-only.
    """
    archive = Path(archive)
    by_part: dict[tuple[int, str], list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_part[(t.iteration, t.metadata.reward_fn_version or "unscored")].append(t)
    for it in {it for it, _ in by_part}:
        if (archive / f"iteration={it}").exists():
            raise FileExistsError(f"{archive}/iteration={it}: night already archived")
    counts = {"kept_sft": 0, "kept_sample": 0, "archived_rest": 0, "stripped": 0, "dropped": 0}
    counts["infra"] = 0
    budget = int(cfg.size_budget_mb * 1024 * 1024)
    for (it, version), rows in sorted(by_part.items()):
        tiers = retain(rows, cfg, buckets or {}, it)
        part = partition_dir(archive, it, version)
        part.mkdir(parents=True)
        for tier in ("sft", "sample"):
            if tiers[tier]:
                _write(part, tier, tiers[tier])
        counts["kept_sft"] += len(tiers["sft"])
        counts["kept_sample"] += len(tiers["sample"])
        counts["infra"] += len(tiers["infra"])
        if tiers["rest"]:
            _write_rest(archive, part, tiers["rest"], cfg, budget, counts)
    counts["kept"] = counts["kept_sft"] + counts["kept_sample"]
    counts["archived"] = counts["kept"] + counts["archived_rest"] + counts["stripped"]
    counts["archive_bytes"] = _dir_bytes(archive)
    return counts


def remove_night(archive: str | os.PathLike, iteration: int) -> None:
    """Undo append_night for one iteration (a promotion that failed after the append)."""
    shutil.rmtree(Path(archive) / f"iteration={iteration}", ignore_errors=True)


def part_files(archive: str | os.PathLike) -> list[Path]:
    """The archive's own part files, sorted (a stray file in the folder is not an episode)."""
    return sorted(Path(archive).glob("iteration=*/reward_fn_version=*/part-*.parquet"))


def read_table(archive: str | os.PathLike, filters=None, files=None) -> pa.Table:
    """The archive (or the rows matching pyarrow ``filters``) as one table.

    ``files`` (paths under ``archive``) restricts the read to those part files.
    """
    archive = Path(archive)
    if not archive.exists():
        raise FileNotFoundError(f"trajectory archive not found: {archive}")
    files = [str(f) for f in (part_files(archive) if files is None else files)]
    for f in files:  # an unreadable part is named, not a pyarrow traceback
        try:
            pq.read_metadata(f)
        except (OSError, pa.ArrowException) as exc:
            raise ValueError(f"{f}: not a readable archive part: {exc}") from None
    # An explicit schema: files written before a column existed read it as null.
    ds = pads.dataset(
        files,
        schema=pa.unify_schemas([FILE_SCHEMA, PARTITION_SCHEMA]),
        format="parquet",
        partitioning=pads.partitioning(PARTITION_SCHEMA, flavor="hive"),
        partition_base_dir=str(archive),
    )
    expr = pq.filters_to_expression(filters) if filters else None
    return ds.to_table(filter=expr)


def query(
    archive: str | os.PathLike,
    task_id: str | None = None,
    since: int | None = None,
    reward_version: str | None = None,
    passing: bool = False,
) -> list[Trajectory]:
    """Archived episodes by task, first iteration, reward version and passing
    (``schema.passing``: every visible test passed, or an agent episode resolved)."""
    filters = []
    if task_id is not None:
        filters.append(("task_id", "=", task_id))
    if since is not None:
        filters.append(("iteration", ">=", since))
    if reward_version is not None:
        filters.append(("reward_fn_version", "=", reward_version))
    if not passing:
        return _trajectories(read_table(archive, filters or None))
    # Passing is all visible tests passed (function) or resolved by the judge (agent, a
    # reward component inside a JSON string): the filter reads those candidates only (an
    # OR of the two), passed() decides.
    either = [[*filters, ("terminal_reason", "=", "all_tests_passed")]]
    either.append([*filters, ("final_diff", "!=", "")])
    return [t for t in _trajectories(read_table(archive, either)) if passed(t)]


def _trajectories(table: pa.Table) -> list[Trajectory]:
    # Nulls are columns an older file lacks: the dataclass default stands for them.
    rows = table.to_pylist()
    out = [Trajectory.from_row({k: v for k, v in r.items() if v is not None}) for r in rows]
    return sorted(out, key=lambda t: (t.iteration, t.trajectory_id))


# ---------------------------------------------------------------- snapshot (train's dvc dep)
# The train stage reads the archive through a manifest (history/archive_manifest.json, git
# tracked): the part files of every promoted night with their md5, written by the nightly
# flow before the stages run. dvc.lock pins the manifest, not data/archive, because the
# promotion appends tonight's partition to data/archive *after* train read it: a dep on the
# folder would be stale in the very commit that promoted the night. The manifest never
# changes after train read it, and a later archive only adds files, so `dvc repro` of a
# promoted commit reads the same rows (their md5 checked) from any later archive.
MANIFEST = "history/archive_manifest.json"


def _md5(path: Path) -> str:
    import hashlib

    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def snapshot(archive: str | os.PathLike) -> dict[str, Any]:
    """The manifest of the archive as it stands: every part file, its iteration, md5, rows."""
    archive = Path(archive)
    files = []
    for f in part_files(archive) if archive.exists() else []:
        it = int(f.parent.parent.name.split("=", 1)[1])
        rows = pq.read_metadata(f).num_rows
        files.append({"path": f.relative_to(archive).as_posix(), "iteration": it, "rows": rows})
        files[-1]["md5"] = _md5(f)
    return {"archive": ARCHIVE_DIR_NAME, "files": files}


ARCHIVE_DIR_NAME = "data/archive"


def read_snapshot(
    archive: str | os.PathLike, manifest: dict[str, Any], since: int, before: int
) -> tuple[list[Trajectory], dict[str, Any]]:
    """Rows of the manifest's files with since <= iteration < before, md5-checked.

    A listed file that is missing or changed raises naming it: the night that read it
    could no longer be reproduced, which retention promises never happens.
    """
    archive = Path(archive)
    picked = [e for e in manifest.get("files", []) if since <= int(e["iteration"]) < before]
    for e in picked:
        path = archive / e["path"]
        if not path.exists():
            raise FileNotFoundError(f"{path}: listed in the archive manifest but missing")
        if _md5(path) != e["md5"]:
            raise ValueError(f"{path}: md5 differs from the archive manifest's {e['md5']}")
    info = {"files": len(picked), "iterations": sorted({int(e["iteration"]) for e in picked})}
    if not picked:
        return [], {**info, "rows": 0}
    trajs = _trajectories(read_table(archive, files=[archive / e["path"] for e in picked]))
    return trajs, {**info, "rows": len(trajs)}
