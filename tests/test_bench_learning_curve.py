"""bench/learning_curve.py end to end on a tiny run: the real embedded policy, sandbox, scorer
and trainer, in a subprocess as a user runs it.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--tasks", "24", "--heldout", "4", "--pool", "4", "--fresh", "8", "--sft-steps", "2",
        "--eval-samples", "1", "--kl-rows", "4"]


def _run(tmp_path: Path, *flags: str) -> list[dict]:
    out = tmp_path / "curve.csv"
    cmd = [sys.executable, "bench/learning_curve.py", *TINY, "--out", str(out), *flags]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, timeout=1800)
    with open(out) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def drift_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("drift")
    _run(out, "--iterations", "2", "--drift")
    return out


@pytest.fixture
def drift_rows(drift_dir) -> list[dict]:
    with open(drift_dir / "curve.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_the_drift_check_puts_the_sft_policys_slice_reward_beside_each_train_reward(drift_rows):
    trained = [r for r in drift_rows if r["iteration"] != "0"]
    filled = [(r["train_reward_mean"] != "", r["train_reward_sft_policy"] != "") for r in trained]
    assert filled == [(True, True), (True, True)]


@pytest.mark.slow
def test_the_first_slice_gains_nothing_because_the_sft_policy_rolled_it_out(drift_rows):
    first = next(r for r in drift_rows if r["iteration"] == "1")
    assert float(first["train_reward_gain"]) == 0.0


@pytest.mark.slow
def test_every_iteration_row_carries_its_wall_time(drift_rows):
    assert all(float(r["wall_s"]) > 0 for r in drift_rows)


@pytest.mark.slow
def test_without_the_drift_flag_no_slice_is_rolled_out_twice(tmp_path):
    rows = _run(tmp_path, "--iterations", "1")
    assert [r["train_reward_sft_policy"] for r in rows] == ["", ""]


@pytest.mark.slow
def test_the_table_of_one_run_prints_a_line_per_evaluated_iteration(drift_dir):
    cmd = [sys.executable, "bench/learning_curve.py", "--table", str(drift_dir / "curve.csv")]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    assert [line.split(" | ")[0] for line in out.splitlines()[1:]] == ["0", "1", "2"]


def _without_timings(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("seconds", "wall_s")} for r in rows]


@pytest.mark.slow
def test_a_run_killed_after_its_archive_write_goes_on_to_the_same_rows(tmp_path):
    work = str(tmp_path / "work")
    whole = _run(tmp_path, "--iterations", "2", "--work", work)
    # Killed after night 2's policy and archive partition, before its row: the row is gone.
    out = tmp_path / "curve.csv"
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:-1]))
    resumed = _run(tmp_path, "--iterations", "2", "--work", work)
    assert _without_timings(resumed) == _without_timings(whole)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> tuple[Path, dict, dict, list[dict]]:
    """A run stopped after iteration 1 and resumed to 2, without --base-cache. Its work
    directory says iteration 0 passed every held-out task (a far stronger SFT policy than
    the policy it resumes from, which passes almost none), so pairing against the resumed
    policy instead of iteration 0 shows in every later paired change."""
    tmp = tmp_path_factory.mktemp("resumed")
    work = tmp / "work"
    _run(tmp, "--iterations", "1", "--work", str(work))
    held = json.loads((tmp / "curve.csv.rates.json").read_text())["0"]
    kept = json.loads((work / "base.json").read_text())["_rates"]
    rates = {suffix: dict.fromkeys(per_task, 1.0) for suffix, per_task in held.items()}
    (work / "base.json").write_text(json.dumps({"_rates": rates}))
    return tmp, kept, held, _run(tmp, "--iterations", "2", "--work", str(work))


@pytest.mark.slow
def test_a_run_with_a_work_dir_keeps_iteration_0s_per_task_rates_there(resumed):
    _, kept, held, _ = resumed
    assert kept == held


@pytest.mark.slow
def test_a_resumed_run_pairs_later_iterations_with_iteration_0_not_the_resumed_policy(resumed):
    *_, rows = resumed
    last = rows[-1]
    assert last["iteration"] == "2"
    for suffix in ("", "_hot"):
        now = float(last[f"heldout{suffix}_pass@1"])
        assert float(last[f"heldout{suffix}_delta"]) == pytest.approx(now - 1.0)


@pytest.mark.slow
def test_a_resumed_run_keeps_the_per_task_rates_of_the_iterations_before_it(resumed):
    tmp, *_ = resumed
    assert sorted(json.loads((tmp / "curve.csv.rates.json").read_text())) == ["0", "1", "2"]
