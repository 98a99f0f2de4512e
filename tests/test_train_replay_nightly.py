"""The nightly flow pins the archive that train reads: history/archive_manifest.json.

Real git, real dvc, real Prefect, three promoted nights on the toy pipeline with the
archive nights' score stage (tests/test_ops_archive_nights.py), its train stage made to
depend on the manifest as dvc.yaml's real train stage does. Each test checks one property.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from codeloop.data.archive import MANIFEST, snapshot
from codeloop.io import write_json
from tests._toy_pipeline import add_score_stage, dvc_run, git, make_toy_repo, stage_env

pytestmark = pytest.mark.slow


def _train_reads_the_manifest(repo: Path) -> None:
    write_json(repo / MANIFEST, snapshot(repo / "data/archive"))  # no archive yet: empty
    dvc_yaml = yaml.safe_load((repo / "dvc.yaml").read_text())
    dvc_yaml["stages"]["train"]["deps"].append(MANIFEST)
    (repo / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "train reads the archive manifest")


@pytest.fixture(scope="module")
def nights(tmp_path_factory, prefect_harness) -> dict:
    from flows.nightly import nightly

    repo = make_toy_repo(tmp_path_factory.mktemp("replay-nights"))
    add_score_stage(repo)
    _train_reads_the_manifest(repo)
    with stage_env():
        outs = [nightly(repo=str(repo), pull=False) for _ in range(3)]
        status_head = dvc_run(repo, "status", "train", "--json")
        git(repo, "checkout", "-q", "iter-0002")
        dvc_run(repo, "checkout", "--force")
        status_2 = dvc_run(repo, "status", "train", "--json")
    manifests = {
        tag: json.loads(git(repo, "show", f"{tag}:{MANIFEST}"))
        for tag in ("iter-0001", "iter-0002", "iter-0003")
    }
    return {"outs": outs, "manifests": manifests, "head": status_head, "iter2": status_2}


def test_every_night_was_promoted(nights):
    assert [o["promoted"] for o in nights["outs"]] == [True, True, True]


def test_each_promotion_commits_the_archive_as_it_stood_before_the_night(nights):
    its = {
        tag: sorted({f["iteration"] for f in m["files"]}) for tag, m in nights["manifests"].items()
    }
    assert its == {"iter-0001": [], "iter-0002": [1], "iter-0003": [1, 2]}


def test_train_is_up_to_date_in_the_last_promoted_commit(nights):
    assert (nights["head"].returncode, json.loads(nights["head"].stdout or "{}")) == (0, {})


def test_train_is_up_to_date_in_an_earlier_promoted_commit(nights):
    assert (nights["iter2"].returncode, json.loads(nights["iter2"].stdout or "{}")) == (0, {})
