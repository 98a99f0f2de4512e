"""bench/paired_runs.py pairs nights task by task: with a base tag, a run's later night
against its own first night."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("paired_runs", ROOT / "bench/paired_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _night(repo: Path, tag: str, passed: list[int]) -> None:
    sets = {"heldout_repo": {f"t{i}": [p, 1] for i, p in enumerate(passed)}}
    (repo / "metrics").mkdir(exist_ok=True)
    (repo / "metrics/eval_tasks.json").write_text(json.dumps({"sets": sets}))
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", tag], cwd=repo, check=True)
    subprocess.run(["git", "tag", tag], cwd=repo, check=True)


def test_a_later_night_is_paired_against_the_base_tag_of_the_same_run(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _night(tmp_path, "iter-0001", [0] * 20)
    _night(tmp_path, "iter-0002", [0] * 20)
    _night(tmp_path, "iter-0003", [1] * 10 + [0] * 10)
    [row] = _bench().rows_for(str(tmp_path), str(tmp_path), "iter-0003", 0.05, "iter-0001")
    assert (row["base_tag"], row["tag"], row["set"]) == ("iter-0001", "iter-0003", "heldout_repo")
    assert (row["baseline_pass@1"], row["candidate_pass@1"]) == (0.0, 0.5)
    assert row["delta"] == 0.5 and row["discordant"] == 10


def test_without_a_base_tag_each_tag_pairs_with_the_same_tag(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _night(tmp_path, "iter-0001", [0] * 20)
    _night(tmp_path, "iter-0002", [1] * 20)
    [row] = _bench().rows_for(str(tmp_path), str(tmp_path), "iter-0002", 0.05)
    assert (row["base_tag"], row["tag"]) == ("iter-0002", "iter-0002")
    assert row["delta"] == 0.0 and row["discordant"] == 0


def test_a_tag_without_per_task_results_names_the_repo_and_the_tag(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _night(tmp_path, "iter-0001", [0] * 5)
    with pytest.raises(SystemExit, match=r"no metrics/eval_tasks.json at tag iter-0009"):
        _bench().rows_for(str(tmp_path), str(tmp_path), "iter-0001", 0.05, "iter-0009")
