"""bench/mode_variants.py pairs two runs' per-task held-out rates and reports the SE of the
paired change twice: over tasks, and clustered by the repository each task was planted in."""

from __future__ import annotations

import json
from pathlib import Path

from bench.mode_variants import repository, rows_for


def _run(tmp: Path, name: str, rates: dict[str, float], repos: dict | None = None) -> str:
    csv = tmp / f"{name}.csv"
    (tmp / f"{name}.csv.rates.json").write_text(json.dumps({"0": rates}))
    if repos is not None:
        (tmp / f"{name}.csv.repos.json").write_text(json.dumps(repos))
    return str(csv)


def test_a_synthetic_task_id_names_its_generated_repository():
    assert repository("synthrepo/1000/17/2", {}) == "synthrepo/1000/17"


def test_a_task_id_of_no_known_shape_is_a_repository_of_its_own():
    assert repository("HumanEval/3", {}) == "HumanEval/3"


def test_a_mode_that_gains_whole_repositories_has_a_larger_clustered_se(tmp_path):
    ids = [f"synthrepo/1/{g}/{j}" for g in range(6) for j in range(3)]
    base = {t: 0.0 for t in ids}
    # every task of repositories 0 and 1 flips to resolved, no other task does
    gains = {t: float(t.split("/")[2] in ("0", "1")) for t in ids}
    rows = rows_for(
        "repo",
        {"self_debug": _run(tmp_path, "sd", base), "rubber_duck": _run(tmp_path, "rd", gains)},
    )
    row = next(r for r in rows if r["mode"] == "rubber_duck")
    assert (row["n_tasks"], row["n_repos"]) == (18, 6)
    assert row["paired_se_repo"] > row["paired_se"]


def test_the_repositories_written_beside_a_run_override_the_task_id(tmp_path):
    ids = ["a", "b", "c", "d"]
    base = {t: 0.0 for t in ids}
    gains = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0}
    repos = {"a": "r1", "b": "r1", "c": "r2", "d": "r2"}
    rows = rows_for(
        "repo",
        {
            "self_debug": _run(tmp_path, "sd", base, repos),
            "rubber_duck": _run(tmp_path, "rd", gains),
        },
    )
    row = next(r for r in rows if r["mode"] == "rubber_duck")
    # two repositories, sums of deviations +1 and -1: sqrt(2/1 * 2) / 4
    assert (row["n_repos"], row["paired_se_repo"]) == (2, 0.5)
