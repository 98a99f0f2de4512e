"""Archive a promoted night: append data/trajectories to data/archive/ and `dvc add` it.

Why not a dvc stage: a stage that reads data/trajectories and writes data/archive would
have to list data/archive as its own out, and DVC deletes a stage's outs before running
it (``persist: true`` keeps them, but then `dvc repro` of an old commit appends onto
whatever archive is checked out, and the out's hash depends on the order nights ran).
Instead, like models/iter-NNNN, the nightly flow appends after the gate promoted the
night and commits ``data/archive.dvc`` with the tag: each promoted commit pins the archive
as of that night, no stage writes it (no cycle); train reads it only through
history/archive_manifest.json (codeloop.data.archive), so `dvc repro` of any iteration reads
the same rows. Refused and failed nights are restored before this runs, so only
promoted nights are archived.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codeloop.config import load_params
from codeloop.data.archive import append_night, remove_night
from codeloop.io import read_tasks, read_trajectories, write_json
from codeloop.ops.vcs import dvc, git
from codeloop.paths import ARCHIVE_DIR, ARCHIVE_METRICS, Paths

FILES = [f"{ARCHIVE_DIR}.dvc", "data/.gitignore", ARCHIVE_METRICS]


def archive_night(repo: str | Path) -> tuple[list[str], dict[str, Any] | None]:
    """Append tonight's scored trajectories; returns (files to commit, retention counts).

    Nothing to do (no files, None) when retention is off or the pipeline wrote no
    trajectories. On failure the appended partitions and data/archive.dvc are undone.
    """
    paths = Paths(Path(repo))
    cfg = load_params(paths.root / "params.yaml").retention
    if not cfg.enabled or not paths.trajectories_dir.exists():
        return [], None
    trajs = read_trajectories(paths.trajectories_dir)
    buckets = (
        {t.task_id: t.difficulty for t in read_tasks(paths.bucket_tasks)}
        if paths.bucket_tasks.exists()
        else {}
    )
    iterations = sorted({t.iteration for t in trajs})
    try:
        counts = append_night(paths.archive_dir, trajs, cfg, buckets)
        counts["iterations"] = iterations
        write_json(paths.archive_metrics, counts)
        dvc(paths.root, "add", ARCHIVE_DIR)
    except Exception:
        undo_archive(paths.root, iterations)
        raise
    return FILES, counts


def undo_archive(repo: str | Path, iterations: list[int]) -> None:
    """Remove the given nights from the archive and put data/archive.dvc back as committed."""
    paths = Paths(Path(repo))
    for it in iterations:
        remove_night(paths.archive_dir, it)
    dvc_file = paths.root / f"{ARCHIVE_DIR}.dvc"
    if git(paths.root, "ls-files", "--", f"{ARCHIVE_DIR}.dvc").strip():
        git(
            paths.root, "checkout", "HEAD", "--", f"{ARCHIVE_DIR}.dvc", ARCHIVE_METRICS, check=False
        )
    else:
        dvc_file.unlink(missing_ok=True)
        paths.archive_metrics.unlink(missing_ok=True)
