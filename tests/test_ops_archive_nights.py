"""Three promoted nights on a toy DVC pipeline leave an archive holding all three.

Real git, real dvc, real Prefect: the toy pipeline (tests/_toy_pipeline.py) gets its
``score`` stage (add_score_stage: 12 scored trajectories per night, iteration =
rollout.iteration), so the nightly flow's archive step has real rows to append, retain
and `dvc add`. Each test asserts one property of the state after the
three nights (module scope: each night costs several dvc calls).
"""

from __future__ import annotations

import pytest

from codeloop.data.archive import query, read_table
from codeloop.io import read_json
from codeloop.paths import Paths
from tests._toy_pipeline import add_score_stage, dvc_run, git, make_toy_repo, stage_env

pytestmark = pytest.mark.slow

NIGHTS = 3
ROWS_PER_NIGHT = 12


@pytest.fixture(scope="module")
def three_nights(tmp_path_factory, prefect_harness) -> dict:
    from flows.nightly import nightly

    root = tmp_path_factory.mktemp("archive-nights")
    repo = make_toy_repo(root)
    add_score_stage(repo)
    with stage_env():
        outs = [nightly(repo=str(repo), pull=False) for _ in range(NIGHTS)]
        metrics = read_json(Paths(repo).archive_metrics)
        table = read_table(Paths(repo).archive_dir)
        # Back to the first promotion: its archive version and a dvc repro of it.
        git(repo, "checkout", "-q", "iter-0001")
        checkout = dvc_run(repo, "checkout", "--force")
        first_archive = read_table(Paths(repo).archive_dir)
        repro = dvc_run(repo, "repro")
    return {
        "repo": repo,
        "outs": outs,
        "metrics": metrics,
        "table": table,
        "checkout": checkout,
        "first_archive": first_archive,
        "repro": repro,
    }


def test_every_night_was_promoted(three_nights):
    assert [o["promoted"] for o in three_nights["outs"]] == [True] * NIGHTS


def test_the_archive_holds_all_three_nights(three_nights):
    its = sorted(set(three_nights["table"].column("iteration").to_pylist()))
    assert its == [1, 2, 3]


def test_retention_keeps_every_passing_row_and_a_sample_per_stratum(three_nights):
    # Night 3: 4 passing rows (reward 1.0 >= threshold) + 1 per (bucket -1, reason) stratum.
    m = three_nights["metrics"]
    assert (m["iterations"], m["kept_sft"], m["kept_sample"]) == ([3], 4, 2)


def test_retention_counts_add_up_to_the_night(three_nights):
    m = three_nights["metrics"]
    parts = m["kept_sft"] + m["kept_sample"] + m["archived_rest"] + m["dropped"] + m["infra"]
    assert parts == ROWS_PER_NIGHT


def test_the_promotion_commit_pins_the_archive(three_nights):
    files = git(three_nights["repo"], "show", "--name-only", "--format=", "iter-0003").split()
    assert "data/archive.dvc" in files and "metrics/archive.json" in files


def test_the_first_promotion_checks_out_its_own_archive(three_nights):
    assert three_nights["checkout"].returncode == 0, three_nights["checkout"].stderr
    its = set(three_nights["first_archive"].column("iteration").to_pylist())
    assert its == {1}


def test_dvc_repro_of_the_first_promotion_still_works(three_nights):
    repro = three_nights["repro"]
    assert repro.returncode == 0, repro.stdout + repro.stderr


def test_the_query_finds_passing_episodes_of_a_task_since_a_night(three_nights):
    # After the checkout of iter-0001 the workspace archive is night 1's: query that.
    rows = query(Paths(three_nights["repo"]).archive_dir, "task2", 1, "v2", passing=True)
    assert [t.trajectory_id for t in rows] == ["n1-t2-0"]
