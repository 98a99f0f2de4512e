"""Repository tasks through the clean stage without the sandbox (repo_verify_runs 0):
loading, snapshots, quarantine, leak check, dedupe and the params switch. The
executability filter's own tests are in test_repos_clean_verify.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from codeloop.config import ConfigError, Params, SourceSpec, parse_params
from codeloop.data.curate import curate
from codeloop.data.loaders import load_source
from codeloop.data.repos.curate_repos import find_repo_leaks, repo_dedupe, repo_specs
from codeloop.data.repos.store import store_files
from codeloop.data.repos.synth import generate_repo_tasks
from codeloop.data.validate import SourceError
from codeloop.io import read_json, read_tasks, write_tasks


def _params(sources, frozen=(), **clean):
    return parse_params(
        {
            "clean": {"sources": list(sources), "frozen": list(frozen), "verify_runs": 0,
                      "repo_verify_runs": 0, "repo_tasks": {"enabled": False}, **clean},
            "sandbox": {"backend": "subprocess", "require": []},
        }
    )


REPO9 = {"kind": "synthetic_repo", "n": 9, "seed": 4}


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "out"
    return out, curate(_params([REPO9]), out)


def test_a_synthetic_repo_source_keeps_its_tasks_and_balances(cleaned):
    out, report = cleaned
    tasks = read_tasks(out / "tasks.parquet")
    assert report["balanced"] and report["kept_repo"] == len(tasks) == 9
    assert {t.kind for t in tasks} == {"repo"}


def test_the_output_holds_exactly_one_snapshot_per_repository_used(cleaned):
    out, _ = cleaned
    used = {t.snapshot for t in read_tasks(out / "tasks.parquet")}
    assert {p.name for p in (out / "repos").iterdir()} == used
    assert len(used) < 9  # several tasks per repository share one copy


def test_repo_tasks_keep_their_file_wise_visible_hidden_split(cleaned):
    out, _ = cleaned
    for t in read_tasks(out / "tasks.parquet"):
        files = {h.split("::")[0] for h in t.hidden_tests}
        assert files == {"tests/test_hidden.py", "tests/test_differential.py"}
        assert set(t.fail_to_pass) <= set(t.visible_tests)


def test_the_same_input_twice_gives_the_same_dataset_version(cleaned, tmp_path):
    _, report = cleaned
    assert (
        curate(_params([REPO9]), tmp_path / "again")["dataset_version"] == report["dataset_version"]
    )


def test_the_switch_is_on_in_the_embedded_default():
    assert Params().clean.repo_tasks.enabled is True
    train, heldout = repo_specs(Params().clean)
    assert train and heldout


def test_the_switch_off_adds_no_repository_source():
    assert repo_specs(_params([]).clean) == ([], [])


def test_the_switch_adds_training_repos_and_a_heldout_repo_frozen_set(tmp_path):
    params = _params([{"kind": "synthetic", "n": 5, "seed": 0}],
                     repo_tasks={"enabled": True, "n": 6, "heldout_n": 4})
    report = curate(params, tmp_path / "out")
    train = read_tasks(tmp_path / "out" / "tasks.parquet")
    held = read_tasks(tmp_path / "out" / "frozen" / "heldout_repo.parquet")
    assert report["kept_repo"] == 6 and len(held) == 4 and report["balanced"]
    assert not {t.snapshot for t in train if t.kind == "repo"} & {t.snapshot for t in held}
    assert {t.snapshot for t in [*train, *held] if t.kind == "repo"} == {
        p.name for p in (tmp_path / "out" / "repos").iterdir()
    }


def test_a_heldout_seed_equal_to_the_training_seed_is_refused():
    with pytest.raises(ConfigError, match="heldout_seed"):
        parse_params({"clean": {"repo_tasks": {"seed": 3, "heldout_seed": 3}}})


def test_a_training_task_on_a_frozen_snapshot_is_dropped_as_a_leak(tmp_path):
    same = {"kind": "synthetic_repo", "n": 3, "seed": 4}
    report = curate(_params([REPO9], frozen=[same]), tmp_path / "out")
    views = {lk["view"] for lk in report["leaks"]}
    assert report["dropped_by_reason"].get("leak", 0) >= 3 and views == {"snapshot"}


def test_a_near_copy_of_a_frozen_statement_and_patch_is_a_leak():
    tasks, _ = generate_repo_tasks(6, seed=21)
    copy = replace(tasks[0], task_id="copy", snapshot="f" * 64)
    leaks = find_repo_leaks([copy, tasks[5]], {"held": tasks[:1]}, 0.9, 128)
    assert [(lk["task_id"], lk["view"]) for lk in leaks] == [("copy", "near")]


def test_dedupe_drops_the_same_site_and_the_same_failing_set():
    tasks, _ = generate_repo_tasks(3, seed=8)
    t = tasks[0]
    same_site = replace(t, task_id="same-site", prompt="Another statement entirely.")
    other = replace(t, task_id="same-fail", metadata={**t.metadata, "mutation": {"site": "elsewhere"}},
                    prompt="Yet another statement about it.")
    res = repo_dedupe([t, same_site, other, *tasks[1:]], 0.9, 128)
    kinds = {d["task_id"]: d["kind"] for d in res.dropped}
    assert kinds == {"same-site": "same_site", "same-fail": "same_failing_set"}


def test_distinct_synthetic_tasks_are_not_near_duplicates():
    tasks, _ = generate_repo_tasks(120, seed=0)
    assert not repo_dedupe(tasks, 0.9, 128).dropped


def _mint_dir(tmp_path, tasks, trees):
    d = tmp_path / "minted"
    for files in trees.values():
        store_files(files, d / "repos")
    write_tasks(d / "tasks.parquet", tasks)
    return d


def test_a_task_directory_loads_and_its_snapshots_are_rehashed_into_the_store(tmp_path):
    tasks, trees = generate_repo_tasks(4, seed=9)
    res = load_source(SourceSpec(kind="repo", path=str(_mint_dir(tmp_path, tasks, trees))),
                      tmp_path / "store")
    assert len(res.tasks) == 4 and not res.quarantine_rows
    assert {p.name for p in (tmp_path / "store").iterdir()} == set(trees)


def test_bad_rows_of_a_task_directory_are_quarantined_with_field_and_reason(tmp_path):
    tasks, trees = generate_repo_tasks(4, seed=9)
    bad = [
        replace(tasks[0], snapshot="0" * 64),
        replace(tasks[1], fail_to_pass=["not a node id"]),
        replace(tasks[2], patch="just text"),
    ]
    d = _mint_dir(tmp_path, [*bad, tasks[3]], trees)
    res = load_source(SourceSpec(kind="repo", path=str(d)), tmp_path / "store")
    got = [(q["row"], q["field"]) for q in res.quarantine_rows]
    assert got == [(1, "snapshot"), (2, "fail_to_pass[0]"), (3, "patch")]
    assert [t.task_id for t in res.tasks] == [tasks[3].task_id]
    assert all(q["file"].endswith("tasks.parquet") and q["reason"] for q in res.quarantine_rows)


def test_a_snapshot_that_does_not_hash_to_its_name_is_quarantined(tmp_path):
    tasks, trees = generate_repo_tasks(2, seed=9)
    d = _mint_dir(tmp_path, tasks, trees)
    victim = d / "repos" / tasks[0].snapshot / "README.md"
    victim.write_text("changed after storing\n")
    res = load_source(SourceSpec(kind="repo", path=str(d)), tmp_path / "store")
    reasons = [q["reason"] for q in res.quarantine_rows]
    assert reasons and all("does not match" in r for r in reasons) and not res.tasks
    assert not (tmp_path / "store" / tasks[0].snapshot).exists()


def test_a_repository_source_without_a_store_is_an_error():
    with pytest.raises(SourceError, match="repos_dir"):
        load_source(SourceSpec(kind="synthetic_repo", n=2))


def test_the_cli_reads_synthetic_repo_n(tmp_path):
    from codeloop.cli import main

    rc = main(["clean", "--source", "synthetic_repo:4", "--out", str(tmp_path / "o"),
               "--params", str(tmp_path / "none.yaml"), "--verify-runs", "0",
               "--backend", "subprocess"])
    report = read_json(tmp_path / "o" / "report.json")
    assert rc == 0 and report["kept_repo"] == 4 and report["balanced"]


def test_training_tasks_from_a_frozen_repository_are_leaks_whatever_the_snapshot():
    tasks, _ = generate_repo_tasks(6, seed=31)
    minted = [replace(t, source="minted", repo="acme/widgets") for t in tasks]
    other = [replace(t, source="minted", repo="acme/other") for t in tasks[3:]]
    frozen = {"minted": [replace(minted[0], snapshot="e" * 64, task_id="f0")]}
    leaks = find_repo_leaks([*minted[1:3], *other], frozen, 0.99, 128)
    assert {(lk["task_id"], lk["view"]) for lk in leaks} == {
        (minted[1].task_id, "repository"), (minted[2].task_id, "repository")}


def test_the_report_counts_kept_repo_tasks_by_difficulty(cleaned):
    out, report = cleaned
    tasks = read_tasks(out / "tasks.parquet")
    assert sum(report["repo_by_difficulty"].values()) == len(tasks)
    assert report["repo_by_difficulty"] == {
        str(d): sum(t.difficulty == d for t in tasks) for d in sorted({t.difficulty for t in tasks})
    }


def test_the_bucket_proxies_use_the_generators_difficulty_for_repo_tasks():
    from codeloop.data.difficulty import proxies

    t = generate_repo_tasks(1, seed=2)[0][0]
    assert proxies(t)["generator_depth"] == t.difficulty


def test_the_operator_knob_reaches_training_and_heldout_repos(tmp_path):
    ops = ["compare", "condition"]
    params = _params([], repo_tasks={"enabled": True, "n": 4, "heldout_n": 3, "operators": ops})
    curate(params, tmp_path / "out")
    tasks = [*read_tasks(tmp_path / "out" / "tasks.parquet"),
             *read_tasks(tmp_path / "out" / "frozen" / "heldout_repo.parquet")]
    assert len(tasks) == 7
    assert {t.metadata["mutation"]["operator"] for t in tasks} <= set(ops)


def test_an_unknown_mutation_operator_in_params_names_the_key():
    with pytest.raises(ConfigError, match="operators"):
        parse_params({"clean": {"repo_tasks": {"operators": ["arith", "flip"]}}})


def test_config_knows_exactly_the_mutation_operators_of_the_mutator():
    from codeloop.config.data import MUTATION_OPERATORS, REPAIRABLE_OPERATORS
    from codeloop.data.repos.mutate import OPERATORS
    from codeloop.data.repos.synth import REPAIRABLE

    assert (MUTATION_OPERATORS, REPAIRABLE_OPERATORS) == (OPERATORS, REPAIRABLE)
