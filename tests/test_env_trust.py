"""A task's environment attacked as a hostile task source would: names that are no plain dir
name, links out of an env dir, an env dir changed after its tasks were minted or verified,
a second source's dir under a name already taken, image tags two names share. Clean
quarantines such a task; an executor or an env image refuses such a dir; none is run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from codeloop.data.repos.load import load_task_dir
from codeloop.io import read_tasks, write_tasks
from tests._wheel_shop import mint_shop, offline_pip


@pytest.fixture(autouse=True)
def _offline():
    with offline_pip():
        yield


@pytest.fixture(scope="module")
def minted(tmp_path_factory) -> Path:
    """A minted task dir (the shop, one task) every test copies before it attacks it."""
    tmp = tmp_path_factory.mktemp("env-trust")
    mint_shop(tmp, max_tasks=1)
    return tmp / "out"


def _source(minted: Path, dest: Path, edit=None) -> Path:
    """A copy of the minted dir; ``edit(dir, tasks)`` may change its files and task rows."""
    shutil.copytree(minted, dest, symlinks=True)
    tasks = read_tasks(dest / "tasks.parquet")
    if edit:
        edit(dest, tasks)
    write_tasks(dest / "tasks.parquet", tasks)
    return dest


def _named(name: str):
    """An edit: the tasks name env ``name`` as a plain (``--deps``) env."""
    def edit(_d, tasks):
        for t in tasks:
            t.environment = name
            t.metadata.pop("env_spec", None)
    return edit


def _env(minted: Path) -> str:
    return read_tasks(minted / "tasks.parquet")[0].environment


@pytest.mark.parametrize("name", [".", "..", "/etc", "../envs", "x\nFROM alpine\nLABEL y=x"])
def test_clean_quarantines_an_environment_that_is_no_plain_dir_name(minted, tmp_path, name):
    src = _source(minted, tmp_path / "src", _named(name))
    clean = tmp_path / "clean"
    got = load_task_dir(src, clean / "repos")
    assert not got.tasks
    assert [r["field"] for r in got.quarantine_rows] == ["environment"]
    assert "is not one plain dir name" in got.quarantine_rows[0]["reason"]
    assert not (clean / "envs").exists() or not os.listdir(clean / "envs")


def test_clean_never_copies_what_a_link_in_an_env_dir_points_at(minted, tmp_path):
    secret = tmp_path / "host-secret"
    secret.mkdir()
    (secret / "expected_values.txt").write_text("42\n")
    env = _env(minted)

    def plant(d, _tasks):
        os.symlink(secret, d / "envs" / env / "leak")

    got = load_task_dir(_source(minted, tmp_path / "src", plant), tmp_path / "clean" / "repos")
    assert not got.tasks and "leak is a link" in got.quarantine_rows[0]["reason"]
    assert not list((tmp_path / "clean").rglob("expected_values.txt"))


def test_clean_never_copies_the_host_dir_an_env_dir_link_names(minted, tmp_path):
    secret = tmp_path / "host-secret"
    secret.mkdir()
    (secret / "expected_values.txt").write_text("42\n")

    def plant(d, tasks):
        os.symlink(secret, d / "envs" / "hostdir")
        _named("hostdir")(d, tasks)

    got = load_task_dir(_source(minted, tmp_path / "src", plant), tmp_path / "clean" / "repos")
    assert not got.tasks and "not a plain directory" in got.quarantine_rows[0]["reason"]
    assert not list((tmp_path / "clean").rglob("expected_values.txt"))


def test_clean_quarantines_a_minted_env_dir_changed_after_minting(minted, tmp_path):
    env = _env(minted)

    def tamper(d, _tasks):
        (d / "envs" / env / "helperlib.py").write_text("def cents(x):\n    return 300\n")

    got = load_task_dir(_source(minted, tmp_path / "src", tamper), tmp_path / "clean" / "repos")
    assert not got.tasks
    assert "changed after its tasks were verified" in got.quarantine_rows[0]["reason"]
    assert not (tmp_path / "clean" / "envs" / env).exists()


def test_a_second_source_cannot_put_other_content_under_a_taken_env_name(minted, tmp_path):
    from codeloop.sandbox.env_trust import DIGEST_KEY, tree_digest

    env = _env(minted)
    clean = tmp_path / "clean"
    first = load_task_dir(_source(minted, tmp_path / "a"), clean / "repos")
    assert first.tasks

    def rival(d, tasks):  # the same spec, other content, its rows consistent with it
        (d / "envs" / env / "helperlib.py").write_text("def cents(x):\n    return 300\n")
        for t in tasks:
            t.metadata[DIGEST_KEY] = tree_digest(d / "envs" / env)

    second = load_task_dir(_source(minted, tmp_path / "b", rival), clean / "repos")
    assert not second.tasks and "another source put there first" in second.quarantine_rows[0][
        "reason"]
    assert "return x * HUNDRED" in (clean / "envs" / env / "helperlib.py").read_text()


def test_clean_records_the_digest_of_the_env_dir_its_tasks_are_verified_in(minted, tmp_path):
    from codeloop.sandbox.env_trust import DIGEST_KEY, tree_digest

    got = load_task_dir(_source(minted, tmp_path / "src"), tmp_path / "clean" / "repos")
    env = tmp_path / "clean" / "envs" / got.tasks[0].environment
    assert got.tasks and got.tasks[0].metadata[DIGEST_KEY] == tree_digest(env)


def _clean_then_tamper(minted: Path, tmp_path: Path):
    """Tasks through clean, their env copied where the stages mount it, then changed."""
    from codeloop.agent.executor import copy_task_envs

    tasks = load_task_dir(_source(minted, tmp_path / "src"), tmp_path / "clean" / "repos").tasks
    envs = tmp_path / "agent-envs"
    copy_task_envs(tasks, str(tmp_path / "clean" / "envs"), str(envs))
    (envs / tasks[0].environment / "helperlib.py").write_text("def cents(x):\n    return 300\n")
    return tasks, envs


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_an_executor_refuses_a_task_env_dir_changed_after_clean(minted, tmp_path, backend):
    from codeloop.agent.executor import open_executor
    from codeloop.config import AgentConfig, SandboxConfig

    if backend == "docker":
        from codeloop.sandbox.docker_backend import skip_without_docker_engine

        skip_without_docker_engine()
    tasks, envs = _clean_then_tamper(minted, tmp_path)
    with pytest.raises(ValueError, match=f"env dir {envs / tasks[0].environment} changed after"):
        ex = open_executor(SandboxConfig(backend=backend, workers=1, timeout_s=30),
                           AgentConfig(), tasks, envs_dir=str(envs),
                           clean_envs=str(tmp_path / "clean" / "envs"))
        ex.close()


def test_an_executor_never_takes_a_link_for_a_task_env_dir(minted, tmp_path):
    from codeloop.agent.executor import copy_task_envs

    tasks = load_task_dir(_source(minted, tmp_path / "src"), tmp_path / "clean" / "repos").tasks
    envs = tmp_path / "agent-envs"
    envs.mkdir()
    os.symlink(tmp_path / "clean" / "envs" / tasks[0].environment, envs / tasks[0].environment)
    with pytest.raises(ValueError, match="not a plain directory"):
        copy_task_envs(tasks, str(tmp_path / "clean" / "envs"), str(envs))


def _env_dir(root: Path, name: str, marker: str) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "spec.json").write_text('{"python": "3.11"}')
    (d / f"{marker}.py").write_text("")
    return d


@pytest.fixture
def docker_images():
    """A docker client; every codeloop-env tag a test names in ``made`` is removed after."""
    from codeloop.sandbox.docker_backend import docker_client, skip_without_docker_engine

    skip_without_docker_engine()
    client, made = docker_client(), []
    yield client, made
    for tag in made:
        try:
            client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
    client.close()


def _files_in(client, tag: str, env: Path) -> list[str]:
    out = client.containers.run(tag, ["ls", f"/opt/codeloop-env/{env.name}"], remove=True,
                                network_mode="none")
    return out.decode().split()


def test_two_env_dirs_whose_names_share_a_prefix_get_images_of_their_own(tmp_path, docker_images):
    from codeloop.sandbox.docker_backend import IMAGE
    from codeloop.sandbox.env_images import env_image, env_tag

    client, made = docker_images
    full = os.urandom(32).hex()
    short = _env_dir(tmp_path, full[:16], "short_one")
    whole = _env_dir(tmp_path, full, "whole_one")
    made += [env_tag(short), env_tag(whole)]
    first, second = env_image(client, short, IMAGE), env_image(client, whole, IMAGE)
    assert first != second
    assert "whole_one.py" in _files_in(client, second, whole)


def test_an_env_image_is_built_again_when_its_env_dir_changed(tmp_path, docker_images):
    from codeloop.sandbox.docker_backend import IMAGE
    from codeloop.sandbox.env_images import env_image, env_tag

    client, made = docker_images
    env = _env_dir(tmp_path, os.urandom(32).hex(), "before")
    made.append(env_tag(env))
    env_image(client, env, IMAGE)
    (env / "after.py").write_text("")
    tag = env_image(client, env, IMAGE)
    assert "after.py" in _files_in(client, tag, env)


def test_no_env_image_is_built_from_an_env_dir_holding_a_link(tmp_path, docker_images):
    from codeloop.sandbox import SandboxError
    from codeloop.sandbox.docker_backend import IMAGE
    from codeloop.sandbox.env_images import env_image, env_tag

    client, made = docker_images
    env = _env_dir(tmp_path, os.urandom(32).hex(), "mod")
    os.symlink("/etc", env / "host_etc")
    made.append(env_tag(env))
    with pytest.raises(SandboxError, match="host_etc is a link"):
        env_image(client, env, IMAGE)
