"""Rollout + score on a real Dask LocalCluster of worker processes equals the threaded run.

A tiny embedded policy (random init, fixed seed) samples on a few synthetic tasks; the
real sandbox runs every episode and scores it. Same seed: the rows coming back from two
Dask worker processes must be the rows two threads produce, field by field (timings
aside), and so must the rollout and score flows run with ``runner.kind: dask``.

(These used to differ about one run in three, and now and then sampling hit NaN
probabilities: two threads loading the policy at once broke transformers' global
``tie_weights`` patching, leaving lm_head untied/uninitialised in the threaded run. See
codeloop.policy.model's module docstring and tests/test_policy_init_model.py.)
"""

from __future__ import annotations

from dataclasses import asdict
from functools import partial
from types import SimpleNamespace

import pytest

from codeloop.config import (
    PolicyInitConfig,
    RewardConfig,
    RolloutConfig,
    RunnerConfig,
    SandboxConfig,
)
from codeloop.data.generator import generate_tasks
from codeloop.paths import Paths
from codeloop.rewards.fanout import score_rows
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.scaleout import fan_out_rollout

pytestmark = pytest.mark.slow

ROLLOUT = RolloutConfig(
    samples_per_task=2, max_steps=2, max_new_tokens=24, batch_size=16, seed=3, iteration=2
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from codeloop.policy.model import build_embedded

    tasks = generate_tasks(6, seed=5, max_depth=1)
    cfg = PolicyInitConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=32, n_positions=512)
    out = tmp_path_factory.mktemp("policy")
    build_embedded(SimpleNamespace(policy_init=cfg), tasks).save(out)
    return tasks, str(out)


def _run(tiny, runner: RunnerConfig):
    tasks, policy_dir = tiny
    return _rollout(tasks, policy_dir, runner)


def _rollout(tasks, policy_dir, runner: RunnerConfig):
    return fan_out_rollout(
        tasks,
        policy_dir,
        EpisodeContext.of(ROLLOUT, SandboxConfig(), "tiny"),
        sandbox=SandboxConfig(),
        score=partial(score_rows, reward=RewardConfig(version="v1")),
        runner=runner,
        n_chunks=2,
    )


def _essence(t) -> dict:
    """Everything a trajectory says except wall-clock timings."""
    d = asdict(t)
    d.pop("metadata")
    d["actions"] = [
        (a.step, a.action_type, a.content, a.observation.status, a.observation.failing_test)
        for a in t.actions
    ]
    return d


@pytest.fixture(scope="module")
def threaded(tiny):
    return _run(tiny, RunnerConfig(kind="threads", workers=2))


@pytest.fixture(scope="module")
def on_dask(tiny):
    return _run(tiny, RunnerConfig(kind="dask", workers=2))


def test_the_threaded_run_yields_a_scored_group_per_task(threaded, tiny):
    tasks, _ = tiny
    assert len(threaded) == len(tasks) * ROLLOUT.samples_per_task
    assert all(t.metadata.reward_fn_version == "v1" and not t.infra_error for t in threaded)


def test_dask_worker_processes_give_the_threaded_trajectories_and_rewards(threaded, on_dask):
    assert [_essence(t) for t in on_dask] == [_essence(t) for t in threaded]


def test_one_chunk_samples_the_rows_of_two_chunks(tiny, threaded):
    # per-row sampling seeds: how tasks are chunked (runner.workers) does not change rows
    tasks, policy_dir = tiny
    one = fan_out_rollout(
        tasks,
        policy_dir,
        EpisodeContext.of(ROLLOUT, SandboxConfig(), "tiny"),
        sandbox=SandboxConfig(),
        score=partial(score_rows, reward=RewardConfig(version="v1")),
        runner=RunnerConfig(kind="threads", workers=1),
    )
    # Tokens, texts, statuses and rewards are equal; log-probs only up to float rounding
    # (a batch of other rows pads differently, and that changes matmul rounding).
    strip = [{**_essence(t), "sample_logprobs": None} for t in one]
    assert strip == [{**_essence(t), "sample_logprobs": None} for t in threaded]
    for a, b in zip(one, threaded, strict=True):
        assert a.sample_logprobs == pytest.approx(b.sample_logprobs, abs=1e-5)


def _stage_root(root, tiny, runner: dict):
    import shutil

    import yaml

    from codeloop.io import write_json, write_tasks

    tasks, policy_dir = tiny
    params = {
        "rollout": ROLLOUT.model_dump(),
        "score": {"replay_sample": 4},
        "runner": runner,
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    shutil.copytree(policy_dir, Paths(root).init_model)
    write_json(Paths(root).manifest, {"dataset_version": "ds-scaleout"})
    write_tasks(Paths(root).bucket_tasks, tasks)
    write_json(Paths(root).plan, {"task_ids": [t.task_id for t in tasks]})
    return root


@pytest.fixture(scope="module")
def flow_rows(tiny, tmp_path_factory, prefect_harness):
    """data/rollouts and data/trajectories written by the flows on threads and on Dask.

    Both Dask stages use one LocalCluster of 2 worker processes through runner.address
    (one cluster start-up instead of two; runner.address="" is covered above).
    """
    from distributed import LocalCluster

    from codeloop.io import read_trajectories
    from flows.rollout import rollout
    from flows.score import score

    out = {}
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        runners = {
            "threads": {"kind": "threads", "workers": 2},
            "dask": {"kind": "dask", "workers": 2, "address": cluster.scheduler_address},
        }
        for kind, runner in runners.items():
            root = _stage_root(tmp_path_factory.mktemp(kind), tiny, runner)
            rollout(root=str(root))
            score(root=str(root))
            out[kind] = (
                read_trajectories(Paths(root).rollouts_dir),
                read_trajectories(Paths(root).trajectories_dir),
            )
    return out


def test_the_rollout_flow_on_dask_writes_the_threaded_trajectories(flow_rows):
    threads, dask = flow_rows["threads"][0], flow_rows["dask"][0]
    assert len(threads) == 6 * ROLLOUT.samples_per_task
    assert [_essence(t) for t in dask] == [_essence(t) for t in threads]


def test_the_score_flow_on_dask_writes_the_threaded_rewards(flow_rows):
    threads, dask = flow_rows["threads"][1], flow_rows["dask"][1]
    assert all(t.metadata.reward_fn_version for t in threads)
    assert [_essence(t) for t in dask] == [_essence(t) for t in threads]
