"""Environments per repository: a content-addressed spec (interpreter, pinned requirements,
install and test commands) built once from a wheel cache with real pip; a task whose
environment cannot be built, or needs another interpreter, is quarantined by clean; the
docker backend runs a task's tests in an image of its own environment."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from codeloop.data.repos.envbuild import (
    EnvBuildError,
    build_spec_env,
    env_complete,
    sandbox_python,
)
from codeloop.data.repos.envspec import EnvSpec
from codeloop.data.repos.mint import MintConfig, mint_repo
from codeloop.io import read_json, read_tasks, write_tasks
from tests._repo_fixture import write_files
from tests._wheel_shop import SHOP, make_wheel, mint_shop, offline_pip, shop_wheels


@pytest.fixture(autouse=True)
def _offline():
    # every install here must come from the local wheels: a registry would hide a bad pin
    with offline_pip():
        yield


def test_the_spec_hash_is_stable_and_changes_when_a_pin_changes():
    spec = EnvSpec(python="3.11", requirements=("tinyunits==0.2", "helperlib==1.0"))
    same = EnvSpec(python="3.11", requirements=("HelperLib==1.0", "tinyunits==0.2"))
    assert spec.spec_hash() == same.spec_hash()  # order and name spelling do not count
    assert len(spec.spec_hash()) == 64
    bumped = EnvSpec(python="3.11", requirements=("helperlib==1.1", "tinyunits==0.2"))
    assert bumped.spec_hash() != spec.spec_hash()
    assert dataclasses.replace(spec, python="3.12").spec_hash() != spec.spec_hash()
    assert EnvSpec.from_dict(json.loads(spec.canonical_json())) == spec


def test_a_requirement_that_is_not_pinned_is_refused():
    with pytest.raises(ValueError, match="helperlib>=1.0.*not pinned"):
        EnvSpec(python="3.11", requirements=("helperlib>=1.0",))


def test_building_twice_reuses_the_env_dir(tmp_path):
    cache = shop_wheels(tmp_path)
    spec = EnvSpec(python="3.11", requirements=("helperlib==1.0", "tinyunits==0.2"))
    first = build_spec_env(spec, tmp_path / "envs", cache)
    assert first.name == spec.spec_hash() and env_complete(first)
    assert (first / "helperlib.py").is_file() and (first / "tinyunits.py").is_file()
    stamp = (first / "spec.json").stat().st_mtime_ns
    shutil.rmtree(cache)  # a rebuild would fail now: the second call must not build
    again = build_spec_env(spec, tmp_path / "envs", cache)
    assert again == first and (first / "spec.json").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in (tmp_path / "envs").iterdir()) == [spec.spec_hash()]


def test_two_builds_of_one_spec_in_two_places_are_the_same_bytes(tmp_path):
    from codeloop.sandbox.env_trust import tree_digest

    cache = shop_wheels(tmp_path)
    spec = EnvSpec(python="3.11", requirements=("helperlib==1.0", "tinyunits==0.2"))
    one = build_spec_env(spec, tmp_path / "one", cache)
    other = build_spec_env(spec, tmp_path / "other" / "envs", cache)
    assert list((one / "__pycache__").iterdir())  # compiled files are part of the content
    assert tree_digest(one) == tree_digest(other)


def test_a_half_made_env_dir_is_rebuilt_not_reused(tmp_path):
    cache = shop_wheels(tmp_path)
    spec = EnvSpec(python="3.11", requirements=("tinyunits==0.2",))
    half = tmp_path / "envs" / spec.spec_hash()
    half.mkdir(parents=True)  # what a killed copy leaves: no spec.json
    assert not env_complete(half)
    assert build_spec_env(spec, tmp_path / "envs", cache) == half
    assert (half / "tinyunits.py").is_file() and env_complete(half)


def test_a_pin_missing_from_the_wheel_cache_fails_with_pips_error(tmp_path):
    cache = shop_wheels(tmp_path)
    spec = EnvSpec(python="3.11", requirements=("helperlib==9.9",))
    with pytest.raises(
        EnvBuildError,
        match=r"helperlib==9\.9.*(No matching distribution|"
        r"Could not find a version)",
    ):
        build_spec_env(spec, tmp_path / "envs", cache)
    assert not list((tmp_path / "envs").iterdir())  # nothing half-built is left behind


def test_mint_refuses_a_repository_that_needs_another_python(tmp_path):
    files = {**SHOP, "pyproject.toml": '[project]\nname = "shop"\nrequires-python = "<3.10"\n'}
    with pytest.raises(ValueError, match=f"needs python 3.9; sandbox has {sandbox_python()}"):
        mint_repo(
            write_files(tmp_path / "shop", files),
            tmp_path / "out",
            MintConfig(max_tasks=1, workers=1, wheel_cache=str(tmp_path / "w")),
        )


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("envspec")
    return tmp / "out", mint_shop(tmp, max_tasks=2)


def test_a_minted_task_names_its_spec_by_hash_and_carries_it(shop):
    out, res = shop
    t = res.tasks[0]
    spec = EnvSpec.from_dict(t.metadata["env_spec"])
    assert t.environment == spec.spec_hash()
    assert spec.python == sandbox_python()
    assert spec.requirements == ("helperlib==1.0", "tinyunits==0.2")
    assert read_json(out / "envs" / t.environment / "spec.json") == spec.to_dict()
    assert sorted(p.name for p in (out / "wheels").iterdir()) == [
        "helperlib-1.0-py3-none-any.whl",
        "tinyunits-0.2-py3-none-any.whl",
    ]


def _load(task_dir: Path, tmp: Path):
    from codeloop.data.repos.load import load_task_dir

    return load_task_dir(task_dir, tmp / "clean" / "repos")


def test_clean_rebuilds_a_missing_env_dir_offline_from_the_tasks_own_wheels(shop, tmp_path):
    out, res = shop
    copy = tmp_path / "tasks"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "envs")
    got = _load(copy, tmp_path)
    assert not got.quarantine_rows and len(got.tasks) == len(res.tasks)
    env = tmp_path / "clean" / "envs" / res.tasks[0].environment
    assert env_complete(env) and (env / "helperlib.py").is_file()


def test_clean_copies_a_complete_minted_env_dir_without_rebuilding_it(shop, tmp_path):
    out, res = shop
    copy = tmp_path / "tasks"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "wheels")  # a rebuild would fail: the dir must be copied
    got = _load(copy, tmp_path)
    assert not got.quarantine_rows and len(got.tasks) == len(res.tasks)
    env = tmp_path / "clean" / "envs" / res.tasks[0].environment
    assert env_complete(env) and (env / "tinyunits.py").is_file()


def _with_spec(out: Path, dest: Path, spec: EnvSpec) -> Path:
    """A copy of the task dir whose tasks name ``spec`` (and have no env dir built)."""
    shutil.copytree(out, dest)
    shutil.rmtree(dest / "envs")
    tasks = read_tasks(dest / "tasks.parquet")
    for t in tasks:
        t.environment, t.metadata["env_spec"] = spec.spec_hash(), spec.to_dict()
    write_tasks(dest / "tasks.parquet", tasks)
    return dest


def test_a_task_whose_env_cannot_be_built_is_quarantined_with_pips_error(shop, tmp_path):
    out, res = shop
    bad = EnvSpec(python=sandbox_python(), requirements=("helperlib==9.9", "tinyunits==0.2"))
    got = _load(_with_spec(out, tmp_path / "tasks", bad), tmp_path)
    assert not got.tasks and len(got.quarantine_rows) == len(res.tasks)
    row = got.quarantine_rows[0]
    assert row["field"] == "environment" and res.tasks[0].task_id in row["reason"]
    assert "helperlib==9.9" in row["reason"]
    assert "No matching distribution" in row["reason"] or "Could not find" in row["reason"]
    assert not (tmp_path / "clean" / "envs" / bad.spec_hash()).exists()


def test_a_task_needing_python_3_9_is_quarantined_naming_both_interpreters(shop, tmp_path):
    out, res = shop
    old = EnvSpec(python="3.9", requirements=("helperlib==1.0", "tinyunits==0.2"))
    got = _load(_with_spec(out, tmp_path / "tasks", old), tmp_path)
    assert not got.tasks and {r["field"] for r in got.quarantine_rows} == {"environment"}
    assert f"needs python 3.9; sandbox has {sandbox_python()}" in got.quarantine_rows[0]["reason"]


def test_the_clean_stage_goes_on_past_a_task_whose_env_cannot_be_built(shop, tmp_path):
    from codeloop.config import parse_params
    from codeloop.data.curate import curate

    out, res = shop
    bad = EnvSpec(python=sandbox_python(), requirements=("helperlib==9.9",))
    broken = _with_spec(out, tmp_path / "broken", bad)
    params = parse_params(
        {
            "clean": {
                "sources": [
                    {"kind": "repo", "path": str(out)},
                    {"kind": "repo", "path": str(broken)},
                ],
                "frozen": [],
                "verify_runs": 0,
                "repo_verify_runs": 1,
                "repo_tasks": {"enabled": False},
            },
            "sandbox": {"backend": "local", "timeout_s": 30},
        }
    )
    report = curate(params, tmp_path / "clean")
    assert report["kept_repo"] == len(res.tasks) and report["quarantined"] >= len(res.tasks)
    lines = (tmp_path / "clean" / "quarantine.jsonl").read_text().splitlines()
    assert any("helperlib==9.9" in json.loads(x)["reason"] for x in lines)


def test_the_docker_backend_runs_a_tasks_tests_in_its_envs_own_image(shop, tmp_path):
    from codeloop.agent.envdirs import env_paths
    from codeloop.agent.testrun import run_pytest
    from codeloop.agent.workspace import copy_tree
    from codeloop.config import SandboxConfig
    from codeloop.sandbox import CmdJob, make_executor
    from codeloop.sandbox.docker_backend import docker_client, skip_without_docker_engine
    from codeloop.sandbox.env_images import ENV_ROOT, env_tag

    skip_without_docker_engine()
    out, res = shop
    t = res.tasks[0]
    envs = tmp_path / "envs"
    shutil.copytree(out / "envs", envs)
    own = envs / t.environment
    client = docker_client()
    try:  # a fresh image each run: the test must see it built, not left by an earlier run
        client.images.remove(env_tag(own), force=True)
    except Exception:  # noqa: BLE001 - not there
        pass
    ex = make_executor(
        SandboxConfig(backend="docker", workers=1, timeout_s=60),
        workspaces=True,
        envs_root=str(envs),
        env_dir=str(own),
    )
    try:
        assert ex.image == env_tag(own) == f"codeloop-env:{t.environment}"
        assert client.images.get(ex.image).labels["codeloop.env"] == t.environment
        ws = ex.workspaces.new_workspace()
        copy_tree(str(out / "repos" / t.snapshot), ws)
        report = run_pytest(ex, ws, None, env_paths(t, str(envs)), 60)
        assert (
            report.collected_ok
            and report.outcomes
            and report.count("passed") == len(report.outcomes)
        ), report.output_tail
        paths = [ex.workspaces.env_inside(p) for p in env_paths(t, str(envs))]
        probe = CmdJob(
            argv=["/usr/bin/python3", "-c", "import helperlib; print(helperlib.__file__)"],
            cwd_host=ws,
            env={"PYTHONPATH": ":".join(paths)},
        )
        got = ex.run_commands([probe])[0]
        assert got.stdout.strip() == f"{ENV_ROOT}/{t.environment}/helperlib.py", got.stderr
    finally:
        ex.close()
        client.close()


def test_one_docker_executor_runs_each_environment_s_tests_in_that_environment_s_image(
    shop, tmp_path
):
    from codeloop.agent.envdirs import env_paths
    from codeloop.agent.testrun import run_pytest
    from codeloop.agent.workspace import copy_tree
    from codeloop.config import SandboxConfig
    from codeloop.sandbox import make_executor
    from codeloop.sandbox.docker_backend import skip_without_docker_engine
    from codeloop.sandbox.env_images import env_tag

    skip_without_docker_engine()
    out, res = shop
    t = res.tasks[0]
    envs = tmp_path / "envs"
    shutil.copytree(out / "envs", envs)
    cache = shop_wheels(tmp_path)  # helperlib 2.0 counts in tenths of a cent: test_total fails
    make_wheel(cache, "helperlib", "2.0", {"helperlib.py": "def cents(x):\n    return x * 1000\n"})
    other = EnvSpec(python=sandbox_python(), requirements=("helperlib==2.0",))
    build_spec_env(other, envs, cache)
    t2 = dataclasses.replace(t, environment=other.spec_hash())
    ex = make_executor(
        SandboxConfig(backend="docker", workers=1, timeout_s=60),
        workspaces=True,
        envs_root=str(envs),
    )
    try:
        reports = {}
        for task in (t, t2):
            ws = ex.workspaces.new_workspace()
            copy_tree(str(out / "repos" / t.snapshot), ws)
            reports[task.environment] = run_pytest(
                ex, ws, ["tests/test_price.py::test_total"], env_paths(task, str(envs)), 60
            )
        assert ex.env_images() == {
            f"/opt/codeloop-env/{e}": env_tag(envs / e) for e in (t.environment, other.spec_hash())
        }
    finally:
        ex.close()
    assert reports[t.environment].outcomes == {"tests/test_price.py::test_total": "passed"}
    assert reports[other.spec_hash()].outcomes == {"tests/test_price.py::test_total": "failed"}


def test_docker_refuses_an_environment_whose_spec_names_another_python_than_its_image(
    tmp_path,
):
    from codeloop.config import SandboxConfig
    from codeloop.sandbox import SandboxError, make_executor
    from codeloop.sandbox.docker_backend import skip_without_docker_engine

    skip_without_docker_engine()
    envs = tmp_path / "envs"
    old = build_spec_env(EnvSpec(python="3.9"), envs, tmp_path / "wheels")  # nothing to install
    ex = make_executor(
        SandboxConfig(backend="docker", workers=1, timeout_s=30),
        workspaces=True,
        envs_root=str(envs),
    )
    try:
        with pytest.raises(SandboxError, match=r"needs python 3\.9; its image has 3\.11"):
            ex.workspaces.env_inside(str(old))
        assert ex.env_images() == {}
    finally:
        ex.close()
    with pytest.raises(SandboxError, match=r"needs python 3\.9; its image has 3\.11"):
        make_executor(
            SandboxConfig(backend="docker", workers=1, timeout_s=30),
            workspaces=True,
            envs_root=str(envs),
            env_dir=str(old),
        )
