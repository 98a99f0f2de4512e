"""A score stage killed mid-way (kill -9) resumes from its finished shards.

Real rollout rows (tiny embedded policy, real sandbox) are scored in a child process
with a resume directory, one GRPO group per shard; once two shards are on disk the child
is SIGKILLed. A rerun with the same inputs must skip those shards and end with the rows
of an uninterrupted run: same rows in the same order, no duplicates, only whole groups.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import asdict
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
from codeloop.io import read_trajectories, write_tasks, write_trajectories
from codeloop.rewards.fanout import fan_out_score
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.resume import ShardStore
from codeloop.rollout.scaleout import fan_out_rollout
from tests._toy_pipeline import REPO_ROOT

pytestmark = pytest.mark.slow

N_TASKS = 16
ROLLOUT = RolloutConfig(samples_per_task=2, max_steps=1, max_new_tokens=24, batch_size=32)
CHILD = """
import sys
from codeloop.config import RewardConfig, RunnerConfig, SandboxConfig
from codeloop.io import read_tasks, read_trajectories
from codeloop.rewards.fanout import fan_out_score
tasks = {t.task_id: t for t in read_tasks(sys.argv[2])}
fan_out_score(read_trajectories(sys.argv[1]), tasks, reward=RewardConfig(version="v2"),
              sandbox=SandboxConfig(), runner=RunnerConfig(kind="threads", workers=1),
              resume_dir=sys.argv[3], resume_shard_groups=1)
"""


def _score(trajs, tasks, resume_dir) -> list:
    return fan_out_score(
        trajs,
        {t.task_id: t for t in tasks},
        reward=RewardConfig(version="v2"),
        sandbox=SandboxConfig(),
        runner=RunnerConfig(kind="threads", workers=1),
        resume_dir=str(resume_dir),
        resume_shard_groups=1,
    )


def _essence(t) -> dict:
    """Everything a scored trajectory says except wall-clock timings."""
    d = asdict(t)
    d["metadata"] = t.metadata.reward_fn_version
    d["actions"] = [(a.step, a.content, a.observation.status, a.reward) for a in t.actions]
    return d


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    from codeloop.policy.model import build_embedded

    root = tmp_path_factory.mktemp("score-resume")
    tasks = generate_tasks(N_TASKS, seed=5, max_depth=1)
    cfg = PolicyInitConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=32, n_positions=512)
    build_embedded(SimpleNamespace(policy_init=cfg), tasks).save(root / "policy")
    rows = fan_out_rollout(
        tasks,
        str(root / "policy"),
        EpisodeContext.of(ROLLOUT, SandboxConfig(), "tiny"),
        sandbox=SandboxConfig(),
        runner=RunnerConfig(kind="threads", workers=1),
    )
    write_trajectories(root / "rollouts", rows, jsonl_export=False)
    write_tasks(root / "tasks.parquet", tasks)
    trajs = read_trajectories(root / "rollouts")  # as the score stage reads them
    store = ShardStore(root / "killed")
    argv = [sys.executable, "-c", CHILD, str(root / "rollouts"), str(root / "tasks.parquet")]
    child = subprocess.Popen([*argv, str(store.root)], cwd=REPO_ROOT)
    while child.poll() is None and len(store.shards()) < 2:
        time.sleep(0.02)  # polling for progress, not a timed assert
    child.send_signal(signal.SIGKILL)
    child.wait()
    at_kill = {p.name: p.stat().st_mtime_ns for p in store.shards()}
    resumed = _score(trajs, tasks, store.root)
    whole = _score(trajs, tasks, root / "uninterrupted")
    write_trajectories(root / "out-r", resumed, jsonl_export=False)
    write_trajectories(root / "out-w", whole, jsonl_export=False)
    return {
        "killed_by_signal": child.returncode == -signal.SIGKILL,
        "at_kill": at_kill,
        "after": {p.name: p.stat().st_mtime_ns for p in store.shards()},
        "resumed": read_trajectories(root / "out-r"),
        "whole": read_trajectories(root / "out-w"),
    }


def test_the_scoring_child_was_killed_mid_way(killed_and_resumed):
    assert killed_and_resumed["killed_by_signal"]
    assert 2 <= len(killed_and_resumed["at_kill"]) < N_TASKS


def test_the_rerun_skips_the_shards_the_killed_run_scored(killed_and_resumed):
    after = killed_and_resumed["after"]
    assert {k: after[k] for k in killed_and_resumed["at_kill"]} == killed_and_resumed["at_kill"]


def test_the_resumed_scores_equal_an_uninterrupted_run(killed_and_resumed):
    resumed, whole = killed_and_resumed["resumed"], killed_and_resumed["whole"]
    assert [_essence(t) for t in resumed] == [_essence(t) for t in whole]


def test_the_resumed_scores_have_no_duplicates_and_every_row_is_scored(killed_and_resumed):
    resumed = killed_and_resumed["resumed"]
    ids = [t.trajectory_id for t in resumed]
    assert len(set(ids)) == len(ids) == N_TASKS * ROLLOUT.samples_per_task
    assert {t.metadata.reward_fn_version for t in resumed} == {"v2"}
