"""`codeloop mint --repos-list` on two real packages of the shipped repos.yaml (inflection,
a training repository, and six, a held-out one), their sdists fetched from PyPI into
.cache/mint/sdists (kept between CI runs; scripts/setup.sh fills it) and checked against
the list's pins. Skips with the reason when PyPI cannot be reached and the cache lacks them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from codeloop.cli import main
from codeloop.config import parse_params, parse_repos_list
from codeloop.data.curate import curate
from codeloop.io import read_json, read_tasks

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "mint" / "sdists"
SUBSET = ("inflection", "six")


def _subset(tmp: Path, edit=None) -> Path:
    data = yaml.safe_load((REPO / "repos.yaml").read_text())
    data["repos"] = [e for e in data["repos"] if e["name"] in SUBSET]
    if edit:
        edit(data["repos"])
    path = tmp / "repos.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    from codeloop.data.repos.mint_list import fetch_all
    from codeloop.data.repos.sdists import FetchError

    path = _subset(tmp_path_factory.mktemp("pypi-list"))
    entries = parse_repos_list(yaml.safe_load(path.read_text())).repos
    try:
        fetch_all(entries, CACHE)
    except FetchError as exc:
        pytest.skip(f"PyPI cannot be reached and {CACHE} lacks the sdists: {exc}")
    return path


@pytest.fixture(scope="module")
def minted(fetched, tmp_path_factory):
    out = tmp_path_factory.mktemp("pypi-mint") / "out"
    rc = main(["mint", "--repos-list", str(fetched), "--out", str(out), "--max", "3",
               "--workers", "2", "--sdist-cache", str(CACHE)])
    assert rc == 0
    return out


def test_both_real_repositories_mint_tasks_and_each_has_its_yield_row(minted):
    rows = {r["repo"]: r for r in read_json(minted / "report.json")["yield"]}
    assert set(rows) == set(SUBSET)
    for r in rows.values():
        assert r["status"] == "ok" and 1 <= r["kept"] <= 3 and r["stable_tests"] > 50
        assert r["tried"] == r["kept"] + sum(r["rejected"].values()) and r["seconds"] > 0


def test_the_held_out_real_repository_never_reaches_the_training_tasks(minted, tmp_path):
    assert {t.repo for t in read_tasks(minted / "tasks.parquet")} == {"inflection"}
    assert {t.repo for t in read_tasks(minted / "heldout" / "tasks.parquet")} == {"six"}
    params = parse_params({
        "clean": {"sources": [{"kind": "mint", "path": str(minted)}], "frozen": [],
                  "verify_runs": 0, "repo_verify_runs": 1, "repo_tasks": {"enabled": False}},
        "sandbox": {"backend": "local", "timeout_s": 60},
    })
    curate(params, tmp_path / "clean")
    frozen = read_tasks(tmp_path / "clean" / "frozen" / "heldout_mint.parquet")
    train = read_tasks(tmp_path / "clean" / "tasks.parquet")
    assert frozen and {t.repo for t in frozen} == {"six"}
    assert train and {t.repo for t in train} == {"inflection"}


def test_a_wrong_pin_of_a_real_sdist_is_refused_naming_the_repository(fetched, tmp_path, capsys):
    def wrong(repos):
        repos[1]["sha256"] = "f" * 64

    path = _subset(tmp_path, wrong)
    rc = main(["mint", "--repos-list", str(path), "--out", str(tmp_path / "out"),
               "--sdist-cache", str(CACHE)])
    err = capsys.readouterr().err
    assert rc == 2 and "six 1.17.0" in err and "f" * 64 in err
    assert not (tmp_path / "out").exists()
