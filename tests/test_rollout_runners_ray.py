"""Rollout and score on a real Ray cluster, and agent episodes on Dask: the threaded rows.

One Ray head serves the module: ``ray start --head --block`` in a process group of its
own, its files under a pytest temp dir, stopped at the end. A tiny embedded policy
samples function tasks and synthetic repository tasks (agent episodes in the real
sandbox); the rows and rewards a Ray or Dask run brings back must be the threaded run's,
field by field (wall-clock timings aside). Each chunk opens its own policy and sandbox
executor where it runs: only plain data is shipped to a worker.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest

from codeloop.config import (
    AgentConfig,
    PolicyInitConfig,
    RewardConfig,
    RolloutConfig,
    RunnerConfig,
    SandboxConfig,
)
from codeloop.rewards.fanout import RepoSetup, fan_out_score, score_rows
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.runners import RunnerError, fan_out
from codeloop.rollout.scaleout import fan_out_rollout
from tests._ray_work import fail_on_three, threads_setting, where

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

AGENT = AgentConfig(max_steps=3, invalid_call_limit=2, observation_chars=400, test_timeout_s=30)
ROLLOUT = RolloutConfig(
    samples_per_task=2,
    max_steps=2,
    max_new_tokens=24,
    agent_max_new_tokens=24,
    batch_size=16,
    seed=3,
    iteration=2,
)
SANDBOX = SandboxConfig(timeout_s=30.0)
REWARD = RewardConfig()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _short_dir(tmp_path_factory, name: str) -> str:
    """A temp dir for Ray's files: its unix socket paths must stay under 107 characters."""
    path = str(tmp_path_factory.mktemp(name))
    if len(path) < 48:
        return path
    path = tempfile.mkdtemp(prefix=name, dir="/tmp")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@pytest.fixture(scope="module", autouse=True)
def ray_settings(tmp_path_factory):
    """Ray's files under a temp dir, no usage report, and no token auth: a new local Ray
    turns it on by default and writes ~/.ray/auth_token, which a later head then demands."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_TMPDIR", _short_dir(tmp_path_factory, "ray-local"))
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("RAY_AUTH_MODE", "disabled")
        yield


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A Ray head of two CPUs (this venv's Ray), its address and its process."""
    port = _free_port()
    log = tmp_path_factory.mktemp("ray-log") / "head.log"
    files = _short_dir(tmp_path_factory, "ray")
    cmd = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        "--head",
        "--block",
        "--num-cpus",
        "2",
        "--port",
        str(port),
        "--include-dashboard=false",
        "--disable-usage-stats",
        "--temp-dir",
        files,
    ]
    # Its workers' working dir is the head's (here its temp dir), never a driver's.
    with open(log, "w") as out:  # the head inherits ray_settings' environment
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=files, start_new_session=True
        )
    try:
        _wait_started(proc, log)
        yield SimpleNamespace(address=f"127.0.0.1:{port}", port=port, proc=proc)
    finally:
        _stop(proc)


def _wait_started(proc: subprocess.Popen, log: Path, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while "Ray runtime started" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"ray start --head did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    """Kill the head and every Ray process it started (all in its own process group):
    throwaway processes, and the GCS and raylet take seconds to honour a SIGTERM."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Function and repository tasks (interleaved: every chunk holds both kinds), their
    snapshots and env dirs, and a tiny embedded policy saved as a checkpoint."""
    from codeloop.data.generator import generate_tasks
    from codeloop.data.repos.store import store_files
    from codeloop.data.repos.synth import generate_repo_tasks
    from codeloop.policy.agent_format import repo_corpus
    from codeloop.policy.model import build_embedded

    root = tmp_path_factory.mktemp("world")
    fn = generate_tasks(4, seed=5, max_depth=1)
    repo, trees = generate_repo_tasks(2, seed=5, max_modules=2, tasks_per_repo=1)
    repos = root / "repos"
    for files in trees.values():
        store_files(files, repos)
    tasks = [fn[0], fn[1], repo[0], fn[2], fn[3], repo[1]]
    init = PolicyInitConfig(vocab_size=400, n_layer=1, n_head=2, n_embd=32, n_positions=1024)
    policy = build_embedded(SimpleNamespace(policy_init=init), tasks, repo_corpus(repo, repos))
    policy.save(root / "policy")
    return SimpleNamespace(
        root=root,
        tasks=tasks,
        repo_tasks=repo,
        by_id={t.task_id: t for t in tasks},
        policy=str(root / "policy"),
        repos=str(repos),
        envs=str(root / "envs"),
    )


def _rollout(world, runner: RunnerConfig, tasks=None, score=None):
    """Two chunks' rows (scored in the chunk when ``score`` is given). A kind's episodes
    batch apart from the other kind's, so the repository tasks alone sample the agent rows
    of the mixed set."""
    ctx = EpisodeContext.of(ROLLOUT, SANDBOX, "ds-ray", agent=AGENT, repos_dir=world.repos)
    return fan_out_rollout(
        tasks or world.tasks,
        world.policy,
        ctx,
        sandbox=SANDBOX,
        runner=runner,
        score=score,
        n_chunks=2,
        envs_root=world.envs,
    )


def _score(world, rows, runner: RunnerConfig):
    return fan_out_score(
        rows,
        world.by_id,
        reward=REWARD,
        sandbox=SANDBOX,
        runner=runner,
        n_chunks=2,
        repos=RepoSetup(AGENT, world.repos, envs_dir=world.envs),
    )


def _essence(t) -> dict:
    """Everything a trajectory says except wall-clock timings."""
    d = asdict(t)
    d["metadata"].pop("execution_time_ms")
    for a in d["actions"]:
        a.pop("duration_ms")
        a["observation"].pop("duration_ms")
    return d


def _of_kind(world, rows, kind: str) -> list[dict]:
    return [_essence(t) for t in rows if world.by_id[t.task_id].kind == kind]


@pytest.fixture(scope="module")
def threaded(world):
    rows = _rollout(world, RunnerConfig(kind="threads", workers=2))
    return SimpleNamespace(rows=rows, scored=_score(world, rows, RunnerConfig(workers=2)))


@pytest.fixture(scope="module")
def on_ray(world, threaded, head):
    """Rollout and score on the head, given paths relative to the world's dir: its workers
    run in another working dir, so the paths must be resolved before the chunks leave."""
    runner = RunnerConfig(kind="ray", address=head.address, workers=2)
    rel = SimpleNamespace(**{**vars(world), "policy": "policy", "repos": "repos", "envs": "envs"})
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(world.root)
        rows = _rollout(rel, runner)
        return SimpleNamespace(rows=rows, scored=_score(rel, threaded.rows, runner))


@pytest.fixture(scope="module")
def on_dask(world):
    """The agent episodes rolled out and scored in one pass on two Dask worker processes
    (function tasks on Dask: tests/test_rollout_scaleout.py)."""
    score = partial(score_rows, reward=REWARD, repos_dir=world.repos, agent=AGENT)
    return _rollout(world, RunnerConfig(kind="dask", workers=2), world.repo_tasks, score)


def test_the_threaded_run_has_agent_episodes_and_function_rows(world, threaded):
    assert len(threaded.rows) == len(world.tasks) * ROLLOUT.samples_per_task
    assert _of_kind(world, threaded.rows, "repo") and _of_kind(world, threaded.rows, "function")
    assert not any(t.infra_error for t in threaded.scored)
    agent = _of_kind(world, threaded.scored, "repo")
    assert all(t["reward_components"]["pass_rate"] > 0 for t in agent)  # its tests really ran


def test_ray_rollout_gives_the_threaded_function_rows(world, threaded, on_ray):
    assert _of_kind(world, on_ray.rows, "function") == _of_kind(world, threaded.rows, "function")


def test_ray_rollout_gives_the_threaded_agent_episodes(world, threaded, on_ray):
    assert _of_kind(world, on_ray.rows, "repo") == _of_kind(world, threaded.rows, "repo")


def test_ray_score_gives_the_threaded_rewards_of_both_kinds(threaded, on_ray):
    assert [_essence(t) for t in on_ray.scored] == [_essence(t) for t in threaded.scored]


def test_dask_worker_processes_give_the_threaded_agent_episodes_and_rewards(
    world, threaded, on_dask
):
    assert [_essence(t) for t in on_dask] == _of_kind(world, threaded.scored, "repo")


def test_a_cluster_at_runner_address_runs_the_work_and_keeps_running(head):
    cfg = RunnerConfig(kind="ray", address=head.address)
    out = fan_out(where, [[1], [2]], cfg)
    assert [x for part in out for x, _, _ in part] == [1, 2]
    assert {gcs.rsplit(":", 1)[1] for part in out for _, _, gcs in part} == {str(head.port)}
    assert os.getpid() not in {pid for part in out for _, pid, _ in part}
    assert not ray.is_initialized()  # this driver let go of the cluster ...
    assert head.proc.poll() is None  # ... which runs on and takes the next call
    assert fan_out(where, [[3]], cfg)[0][0][0] == 3


def test_a_driver_already_connected_is_used_and_stays_connected(head):
    ray.init(address=head.address, log_to_driver=False)
    try:
        out = fan_out(where, [[1]], RunnerConfig(kind="ray"))
        assert out[0][0][2].endswith(f":{head.port}")
        assert ray.is_initialized()
    finally:
        ray.shutdown()


def test_an_empty_address_starts_a_local_ray_for_the_call_only(head):
    out = fan_out(where, [[1]], RunnerConfig(kind="ray", workers=1))
    assert not out[0][0][2].endswith(f":{head.port}")  # not the head running on this machine
    assert not ray.is_initialized()


def test_the_drivers_codeloop_settings_reach_the_clusters_workers(head, monkeypatch):
    monkeypatch.setenv("CODELOOP_THREADS", "3")  # the head was started without it
    assert fan_out(threads_setting, [[1]], RunnerConfig(kind="ray", address=head.address)) == [
        ["3"]
    ]


def test_an_error_in_the_work_keeps_its_own_type_on_ray(head):
    with pytest.raises(ValueError, match="three") as err:
        fan_out(fail_on_three, [[1], [3]], RunnerConfig(kind="ray", address=head.address))
    assert type(err.value) is ValueError


def test_an_address_where_no_ray_listens_is_a_runner_error_within_seconds():
    t0 = time.monotonic()
    with pytest.raises(RunnerError, match="runner.address"):
        fan_out(where, [[1]], RunnerConfig(kind="ray", address=f"127.0.0.1:{_free_port()}"))
    assert time.monotonic() - t0 < 10
