"""`codeloop mint --repos-list`: a list of pinned sdists minted into one task directory, each
repository's sdist checked against its sha256 first, a yield row per repository, the
held-out repositories' tasks kept apart for the frozen set heldout_mint. Offline: the sdists
here are small repositories packed in the test and fetched through file:// URLs."""

from __future__ import annotations

import hashlib
import io as _io
import tarfile
from pathlib import Path

import pytest
import yaml

from codeloop.cli import main
from codeloop.config import load_repos_list, parse_params, parse_repos_list
from codeloop.data.curate import curate
from codeloop.io import read_json, read_tasks
from tests.test_mint_src_layout import SRC_REPO

REPO = Path(__file__).resolve().parents[1]

CALC = {  # other code than SRC_REPO's: the clean stage's leak check would pair them up
    "words/__init__.py": "",
    "words/text.py": "def shout(s):\n    return s.upper() + '!'\n\n\ndef vowels(s):\n    n = 0\n    for ch in s:\n        if ch in 'aeiou':\n            n += 1\n    return n\n\n\ndef initials(names):\n    return ''.join(n[0] for n in names if n)\n",  # noqa: E501
    "tests/test_text.py": "from words.text import initials, shout, vowels\n\n\ndef test_shout():\n    assert shout('hi') == 'HI!'\n\n\ndef test_vowels():\n    assert vowels('banana') == 3\n    assert vowels('xyz') == 0\n\n\ndef test_initials():\n    assert initials(['ada', '', 'bob']) == 'ab'\n",  # noqa: E501
}
BROKEN = {"pkg.py": "x = 1\n", "test_pkg.py": "import not_a_module_anywhere\n"}


def sdist(where: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A .tar.gz laid out as an sdist: one top dir ``name-version/``."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{rel}")
            info.size = len(data)
            tar.addfile(info, _io.BytesIO(data))
    return path


def entry(path: Path, name: str, split: str, **more) -> dict:
    return {"name": name, "version": "0.1", "url": path.as_uri(), "license": "MIT",
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "split": split, **more}


@pytest.fixture(scope="module")
def listed(tmp_path_factory):
    """A list of three: calc (train), srccalc (held out, src layout), broken (train)."""
    tmp = tmp_path_factory.mktemp("mintlist")
    src = tmp / "upstream"
    repos = [entry(sdist(src, "calc", "0.1", CALC), "calc", "train"),
             entry(sdist(src, "srccalc", "0.1", SRC_REPO), "srccalc", "heldout"),
             entry(sdist(src, "broken", "0.1", BROKEN), "broken", "train")]
    path = tmp / "repos.yaml"
    path.write_text(yaml.safe_dump({"repos": repos}))
    return tmp, path


@pytest.fixture(scope="module")
def minted(listed):
    tmp, path = listed
    out = tmp / "out"
    rc = main(["mint", "--repos-list", str(path), "--out", str(out), "--max", "3",
               "--workers", "2", "--sdist-cache", str(tmp / "cache")])
    assert rc == 0
    return out


def _wrong_pin(listed, tmp_path) -> Path:
    tmp, path = listed
    data = yaml.safe_load(path.read_text())
    data["repos"][1]["sha256"] = "0" * 64
    bad = tmp_path / "repos.yaml"
    bad.write_text(yaml.safe_dump(data))
    return bad


def test_a_wrong_pin_stops_the_run_naming_the_repository_and_both_hashes(
        listed, tmp_path, capsys):
    tmp, path = listed
    bad = _wrong_pin(listed, tmp_path)
    real = yaml.safe_load(path.read_text())["repos"][1]["sha256"]
    rc = main(["mint", "--repos-list", str(bad), "--out", str(tmp_path / "out"),
               "--sdist-cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "srccalc" in err and "0" * 64 in err and real in err
    assert not (tmp_path / "out").exists()  # nothing is minted before every pin holds
    assert not list((tmp_path / "cache").glob("srccalc*"))  # the bad file is not cached


def test_a_cached_sdist_that_no_longer_matches_its_pin_is_refused(listed, tmp_path, capsys):
    tmp, path = listed
    cache = tmp_path / "cache"
    assert main(["mint", "--repos-list", str(path), "--fetch-only",
                 "--sdist-cache", str(cache)]) == 0
    (cache / "calc-0.1.tar.gz").write_bytes(b"not the sdist")
    assert main(["mint", "--repos-list", str(path), "--fetch-only",
                 "--sdist-cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "calc" in err and hashlib.sha256(b"not the sdist").hexdigest() in err


def test_every_repository_has_a_yield_row_that_accounts_for_its_candidates(minted):
    report = read_json(minted / "report.json")
    rows = {r["repo"]: r for r in report["yield"]}
    assert list(rows) == ["calc", "srccalc", "broken"]
    for name in ("calc", "srccalc"):
        r = rows[name]
        assert r["status"] == "ok" and r["kept"] >= 1 and r["seconds"] > 0
        assert r["tried"] == r["kept"] + sum(r["rejected"].values())
    t = report["totals"]
    assert (t["tried"], t["kept"]) == (sum(r["tried"] for r in rows.values()),
                                       sum(r["kept"] for r in rows.values()))
    assert report["by_split"]["heldout"]["kept"] == rows["srccalc"]["kept"]


def test_the_command_prints_the_yield_table(listed, tmp_path, capsys):
    tmp, path = listed
    data = yaml.safe_load(path.read_text())
    data["repos"] = data["repos"][:1]
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(data))
    assert main(["mint", "--repos-list", str(one), "--out", str(tmp_path / "out"),
                 "--max", "1", "--sdist-cache", str(tmp / "cache")]) == 0
    out = capsys.readouterr().out
    assert "tried" in out and "kept" in out
    assert any(line.startswith("calc 0.1") and " ok " in line for line in out.splitlines())


def test_a_repository_that_cannot_be_minted_is_a_row_with_its_reason_and_the_others_mint(minted):
    rows = {r["repo"]: r for r in read_json(minted / "report.json")["yield"]}
    broken = rows["broken"]
    assert broken["status"] == "failed" and broken["kept"] == 0
    assert "does not collect" in broken["reason"] or "no test" in broken["reason"]
    assert {t.repo for t in read_tasks(minted / "tasks.parquet")} == {"calc"}


def test_held_out_repositories_tasks_are_written_apart_from_the_training_tasks(minted):
    train = read_tasks(minted / "tasks.parquet")
    held = read_tasks(minted / "heldout" / "tasks.parquet")
    assert {t.repo for t in train} == {"calc"} and {t.repo for t in held} == {"srccalc"}
    assert not {t.snapshot for t in train} & {t.snapshot for t in held}
    assert {p.name for p in (minted / "repos").iterdir()} == {t.snapshot for t in train}
    assert {p.name for p in (minted / "heldout" / "repos").iterdir()} == {
        t.snapshot for t in held}


def _clean(sources, out):
    params = parse_params({
        "clean": {"sources": sources, "frozen": [], "verify_runs": 0, "repo_verify_runs": 1,
                  "repo_tasks": {"enabled": False}},
        "sandbox": {"backend": "local", "timeout_s": 30},
    })
    return curate(params, out)


def test_clean_takes_the_held_out_repositories_as_the_frozen_set_heldout_mint(minted, tmp_path):
    report = _clean([{"kind": "mint", "path": str(minted)}], tmp_path / "clean")
    frozen = read_tasks(tmp_path / "clean" / "frozen" / "heldout_mint.parquet")
    train = read_tasks(tmp_path / "clean" / "tasks.parquet")
    assert frozen and {t.repo for t in frozen} == {"srccalc"}
    assert train and {t.repo for t in train} == {"calc"}
    assert report["dropped"] == 0


def test_a_held_out_repository_s_tasks_given_as_training_tasks_are_dropped_as_leaks(
        minted, tmp_path):
    report = _clean([{"kind": "mint", "path": str(minted)},
                     {"kind": "repo", "path": str(minted / "heldout")}], tmp_path / "clean")
    train = read_tasks(tmp_path / "clean" / "tasks.parquet")
    assert {t.repo for t in train} == {"calc"}
    assert report["dropped_by_reason"].get("leak", 0) == len(
        read_tasks(minted / "heldout" / "tasks.parquet"))


def test_an_output_dir_holding_something_else_is_refused(listed, tmp_path, capsys):
    tmp, path = listed
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    assert main(["mint", "--repos-list", str(path), "--out", str(tmp_path / "out"),
                 "--sdist-cache", str(tmp / "cache")]) == 2
    assert "refusing" in capsys.readouterr().err
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_the_shipped_repos_list_pins_every_sdist_and_holds_some_repositories_out():
    repos = load_repos_list(REPO / "repos.yaml").repos
    assert len(repos) >= 8
    assert {e.split for e in repos} == {"train", "heldout"}
    assert all(e.url.startswith("https://") and len(e.sha256) == 64 for e in repos)
    assert load_repos_list(REPO / parse_params({}).mint.repos_list) is not None


def test_a_bad_entry_is_named_by_its_index_repository_and_field():
    data = yaml.safe_load((REPO / "repos.yaml").read_text())
    data["repos"][1]["sha256"] = "abc"
    data["repos"][2]["split"] = "validation"
    with pytest.raises(ValueError) as err:
        parse_repos_list(data, "repos.yaml")
    msg = str(err.value)
    name1, name2 = data["repos"][1]["name"], data["repos"][2]["name"]
    assert f"repos.1.sha256 ({name1})" in msg and f"repos.2.split ({name2})" in msg


def test_a_url_that_names_another_release_than_its_entry_is_refused():
    data = yaml.safe_load((REPO / "repos.yaml").read_text())
    data["repos"][0]["version"] = "9.9.9"
    with pytest.raises(ValueError, match="is not the sdist of"):
        parse_repos_list(data)


def test_every_repository_list_field_has_a_description():
    from codeloop.config import RepoEntry, field_docs

    docs = field_docs(RepoEntry)
    assert set(docs) == set(RepoEntry.model_fields) and all(d.strip() for d in docs.values())


def test_a_list_without_held_out_tasks_writes_no_held_out_dir(listed, tmp_path):
    tmp, path = listed
    data = yaml.safe_load(path.read_text())
    data["repos"] = [data["repos"][0], {**data["repos"][2], "split": "heldout"}]  # broken
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert main(["mint", "--repos-list", str(two), "--out", str(out), "--max", "1",
                 "--sdist-cache", str(tmp / "cache")]) == 0
    assert read_json(out / "report.json")["by_split"]["heldout"]["failed"] == 1
    assert not (out / "heldout").exists()
