"""`codeloop report` shows the trajectory archive: rows per night and reward version, its
size, and the last night's retention counts (written by the real codeloop.data.archive)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codeloop.config import RetentionConfig
from codeloop.data.archive import append_night
from codeloop.io import write_json
from codeloop.ops.report import build_report, render
from codeloop.paths import Paths
from codeloop.schema import Trajectory, TrajectoryMetadata

REPO_ROOT = Path(__file__).resolve().parents[1]


def _night(it: int, version: str) -> list[Trajectory]:
    return [
        Trajectory(
            trajectory_id=f"n{it}-{k}", task_id=f"t{k % 3}", prompt_key=f"n{it}-t{k % 3}",
            prompt="p", reward=1.0 if k % 4 == 0 else 0.0, iteration=it,
            terminal_reason="all_tests_passed" if k % 4 == 0 else "max_steps",
            metadata=TrajectoryMetadata(reward_fn_version=version),
            token_ids=[1, 2, 3], loss_mask=[0, 1, 1], sample_logprobs=[0.0, -1.0, -1.0],
            infra_error="boom" if k == 11 else "",
        )
        for k in range(12)
    ]


@pytest.fixture
def workspace(tmp_path) -> tuple[Path, dict]:
    paths = Paths(tmp_path)
    cfg = RetentionConfig(sample_per_stratum=2)
    for it, version in ((1, "v1"), (2, "v1"), (3, "v2")):
        counts = append_night(paths.archive_dir, _night(it, version), cfg)
    write_json(paths.archive_metrics, {**counts, "iterations": [3]})
    return tmp_path, counts


def test_the_report_counts_archived_rows_per_night_and_reward_version(workspace):
    root, counts = workspace
    a = build_report(root)["archive"]
    per_night = counts["archived"]  # 11 rows: the infra-error row is never kept
    assert a["rows"] == {"1": {"v1": per_night}, "2": {"v1": per_night}, "3": {"v2": per_night}}


def test_the_report_shows_the_last_nights_retention(workspace):
    root, counts = workspace
    last = build_report(root)["archive"]["last_night"]
    assert (last["kept_sft"], last["kept_sample"], last["infra"]) == (
        counts["kept_sft"], counts["kept_sample"], 1
    )


def test_the_report_gives_the_archives_size_on_disk(workspace):
    root, _ = workspace
    size = sum(f.stat().st_size for f in (root / "data/archive").rglob("*.parquet"))
    assert build_report(root)["archive"]["bytes"] == size


def test_the_rendered_report_has_an_archive_line(workspace):
    root, _ = workspace
    text = render(build_report(root))
    assert "archive   33 rows in 3 nights" in text and "night 3: kept 3 sft" in text


def test_without_an_archive_the_report_has_no_archive_section(tmp_path):
    report = build_report(tmp_path)
    assert report["archive"] is None and "archive" not in render(report)


def test_codeloop_report_prints_the_archive(workspace):
    root, _ = workspace
    cli = subprocess.run([sys.executable, "-m", "codeloop.cli", "report", "--root", str(root)],
                         cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert "rows per iteration: 1: v1 11; 2: v1 11; 3: v2 11" in cli.stdout
