"""bench/agent_curve.py with real repositories: tasks minted from inflection 0.5.1's sdist (as
tests/test_repos_expert_real.py mints them) form a held-out real-repository set beside the
synthetic one, and a training repository that is a held-out one is refused. The sdist minted
under two names stands for two repositories: their tasks share one snapshot, so a set that
counts two repositories clusters by the task's repository name, not by its tree."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.agent_curve import FIELDS, REAL_FIELDS, _base_name, _interleave
from codeloop.data.repos.load import first_per_repo
from codeloop.evaluate.paired import cluster_se
from codeloop.io import read_tasks

ROOT = Path(__file__).resolve().parents[1]
SDIST = ROOT / ".cache" / "mint" / "inflection-0.5.1.tar.gz"
TINY = ["--train-repo-tasks", "8", "--grpo-tasks", "8", "--heldout", "4", "--functions", "20",
        "--sft-steps", "2", "--iterations", "1", "--pool", "2", "--show", "0"]
NAMES = ("inflection", "inflection-twin")


def _mint(out: Path, name: str) -> Path:
    from codeloop.cli import main

    rc = main(["mint", "--repo", str(SDIST), "--out", str(out), "--max", "2", "--seed", "1",
               "--workers", "2", "--license", "MIT", "--name", name])
    assert rc == 0
    return out


def _bench(*flags: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "bench/agent_curve.py", *TINY, *flags]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if check and res.returncode:
        raise AssertionError(f"agent_curve failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res


@pytest.fixture(scope="module")
def minted(tmp_path_factory) -> list[Path]:
    if not SDIST.exists():
        pytest.skip(f"{SDIST} absent: scripts/setup.sh fetches it from the package registry")
    root = tmp_path_factory.mktemp("minted")
    return [_mint(root / name, name) for name in NAMES]


@pytest.fixture(scope="module")
def real_run(minted, tmp_path_factory) -> tuple[Path, list[dict], list[str]]:
    out = tmp_path_factory.mktemp("curve") / "curve.csv"
    _bench("--real-heldout", *map(str, minted), "--context", "2048", "--out", str(out))
    with open(out) as f:
        reader = csv.DictReader(f)
        return out, list(reader), list(reader.fieldnames or [])


@pytest.mark.slow
def test_a_real_heldout_run_writes_the_real_columns_after_the_synthetic_ones(real_run):
    _, _, header = real_run
    assert header == [*FIELDS, *REAL_FIELDS]


@pytest.mark.slow
def test_the_real_set_is_evaluated_at_iteration_0_and_after_the_last_iteration(real_run):
    _, rows, _ = real_run
    assert [r["iteration"] for r in rows] == ["0", "1"]
    assert [k for r in rows for k in REAL_FIELDS if r[k] == ""] == []
    assert float(rows[0]["real_delta"]) == 0.0  # iteration 0 is its own baseline


@pytest.mark.slow
def test_the_real_set_counts_every_minted_task_and_clusters_by_repository_name(real_run, minted):
    _, rows, _ = real_run
    tasks = [t for d in minted for t in read_tasks(d / "tasks.parquet")]
    assert len({t.snapshot for t in tasks}) == 1  # one tree: a snapshot cluster would be one
    for r in rows:
        assert (int(r["real_n_tasks"]), int(r["real_n_repos"])) == (len(tasks), len(NAMES))


@pytest.mark.slow
def test_the_clustered_se_is_the_one_over_the_repositories_written_beside_the_csv(real_run):
    out, rows, _ = real_run
    repos = json.loads(Path(f"{out}.real.repos.json").read_text())
    rates = json.loads(Path(f"{out}.real.rates.json").read_text())
    assert sorted(set(repos.values())) == sorted(NAMES)
    for r in rows:
        per = rates[r["iteration"]]
        assert set(per) == set(repos)
        values = [per[k] for k in sorted(per)]
        want = cluster_se(values, [repos[k] for k in sorted(per)])
        assert float(r["real_resolved_se_repo"]) == pytest.approx(want)


@pytest.mark.slow
def test_training_on_a_heldout_repository_is_refused_by_name(minted, tmp_path):
    res = _bench("--real-train", str(minted[0]), "--real-heldout", *map(str, minted),
                 "--out", str(tmp_path / "c.csv"), check=False)
    assert res.returncode != 0
    assert "a held-out repository is never trained on" in res.stderr
    assert f"'{NAMES[0]}'" in res.stderr
    assert not (tmp_path / "c.csv").exists()


@pytest.mark.slow
def test_training_on_a_heldout_tree_under_another_name_is_refused(minted, tmp_path):
    res = _bench("--real-train", str(minted[1]), "--real-heldout", str(minted[0]),
                 "--out", str(tmp_path / "c.csv"), check=False)
    assert res.returncode != 0
    assert f"has repository '{NAMES[1]}'" in res.stderr and f"has '{NAMES[0]}'" in res.stderr


@pytest.fixture(scope="module")
def mixed_run(minted, tmp_path_factory) -> tuple[Path, list[str]]:
    out = tmp_path_factory.mktemp("mixed") / "curve.csv"
    res = _bench("--real-train", str(minted[0]), "--real-repeat", "3", "--real-grpo", "--pool",
                 "3", "--context", "2048", "--out", str(out))
    return out, res.stdout.splitlines()


@pytest.mark.slow
def test_the_expert_plays_every_real_training_task_beside_the_synthetic_ones(mixed_run):
    _, lines = mixed_run
    synthetic = next(x for x in lines if x.startswith("expert demos: "))
    real = next(x for x in lines if x.startswith("real expert demos: "))
    assert "'demos': 8," in synthetic and "'demos': 2," in real and "'rejected': 0" in real


@pytest.mark.slow
def test_real_training_demos_join_sfts_demos_each_repeated(mixed_run):
    _, lines = mixed_run
    sft = next(x for x in lines if x.startswith("SFT "))
    assert "of 14 demos" in sft  # 8 synthetic + 2 real x 3


@pytest.mark.slow
def test_real_training_tasks_are_rolled_out_by_grpo_with_the_flag(mixed_run):
    _, lines = mixed_run
    assert "GRPO pool: 10 tasks, 2 of them real" in lines
    # the first slice of 3 of the interleaved pool holds the first real task
    assert "  iteration 1 pool: 3 tasks, 1 real" in lines


@pytest.mark.slow
def test_without_a_real_heldout_set_the_csv_has_the_synthetic_columns_only(mixed_run):
    out, _ = mixed_run
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(FIELDS) and rows[1]["train_reward_mean"] != ""


def test_two_versions_of_one_project_are_one_repository_for_the_split():
    assert _base_name("inflection-0.5.1") == _base_name("Inflection-0.4.0") == "inflection"
    assert _base_name("python-dateutil-2.8.2") == "python-dateutil"
    assert _base_name("inflection-twin") == "inflection-twin"


def test_real_training_tasks_spread_through_the_grpo_pool_so_every_slice_holds_some():
    synthetic, real = [f"s{i}" for i in range(64)], [f"r{i}" for i in range(8)]
    pool = _interleave(synthetic, real)
    assert sorted(pool) == sorted(synthetic + real)
    assert [x for x in pool if x[0] == "s"] == synthetic
    assert all(any(x[0] == "r" for x in pool[k : k + 9]) for k in range(0, len(pool), 9))


def test_a_capped_heldout_set_keeps_the_first_tasks_of_each_repository():
    tasks = [SimpleNamespace(repo=r, task_id=f"{r}/{i}") for i in range(4) for r in ("a", "b")]
    kept = [t.task_id for t in first_per_repo(tasks, 2)]
    assert kept == ["a/0", "b/0", "a/1", "b/1"]
    assert len(first_per_repo(tasks, 0)) == len(tasks)
