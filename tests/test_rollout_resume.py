"""A rollout killed mid-way (kill -9) resumes from its finished groups.

A real rollout (tiny embedded policy, real sandbox) runs in a child process with a resume
directory, one task per shard; once two shards are on disk the child is SIGKILLed. A
rerun with the same inputs must skip those shards and end with the rows of an
uninterrupted run: same rows in the same order, no duplicates, only whole groups.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import asdict
from types import SimpleNamespace

import pytest

from codeloop.config import PolicyInitConfig, RolloutConfig, RunnerConfig, SandboxConfig
from codeloop.data.generator import generate_tasks
from codeloop.io import read_trajectories, write_trajectories
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.resume import ShardStore, shard_key
from codeloop.rollout.scaleout import fan_out_rollout
from tests._toy_pipeline import REPO_ROOT

pytestmark = pytest.mark.slow

ROLLOUT = RolloutConfig(
    samples_per_task=2, max_steps=2, max_new_tokens=24, batch_size=16, seed=3, iteration=2,
    resume_shard_tasks=1,
)
N_TASKS = 16
CHILD = """
import sys
from codeloop.config import RolloutConfig, RunnerConfig, SandboxConfig
from codeloop.data.generator import generate_tasks
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.scaleout import fan_out_rollout
fan_out_rollout(generate_tasks({n}, seed=5, max_depth=1), sys.argv[1],
                EpisodeContext.of(RolloutConfig.model_validate_json(sys.argv[2]), SandboxConfig(),
                                  "tiny"),
                sandbox=SandboxConfig(), runner=RunnerConfig(kind="threads", workers=1),
                resume_dir=sys.argv[3])
"""


def _rollout(policy_dir: str, resume_dir) -> list:
    return fan_out_rollout(
        generate_tasks(N_TASKS, seed=5, max_depth=1),
        policy_dir,
        EpisodeContext.of(ROLLOUT, SandboxConfig(), "tiny"),
        sandbox=SandboxConfig(),
        runner=RunnerConfig(kind="threads", workers=1),
        resume_dir=str(resume_dir),
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


def _on_disk(trajs, out) -> list:
    write_trajectories(out, trajs, jsonl_export=False)  # what the stage's outs hold
    return read_trajectories(out)


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    from codeloop.policy.model import build_embedded

    root = tmp_path_factory.mktemp("resume")
    cfg = PolicyInitConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=32, n_positions=512)
    tasks = generate_tasks(6, seed=5, max_depth=1)
    build_embedded(SimpleNamespace(policy_init=cfg), tasks).save(root / "policy")
    policy = str(root / "policy")
    store = ShardStore(root / "killed")
    argv = [sys.executable, "-c", CHILD.format(n=N_TASKS), policy, ROLLOUT.model_dump_json()]
    child = subprocess.Popen([*argv, str(store.root)], cwd=REPO_ROOT)
    while child.poll() is None and len(store.shards()) < 2:
        time.sleep(0.02)  # polling for progress, not a timed assert
    child.send_signal(signal.SIGKILL)
    child.wait()
    at_kill = {p.name: p.stat().st_mtime_ns for p in store.shards()}
    resumed = _rollout(policy, store.root)
    whole = _rollout(policy, root / "uninterrupted")
    return {
        "killed_by_signal": child.returncode == -signal.SIGKILL,
        "at_kill": at_kill,
        "after": {p.name: p.stat().st_mtime_ns for p in store.shards()},
        "resumed": _on_disk(resumed, root / "out-resumed"),
        "whole": _on_disk(whole, root / "out-whole"),
    }


def test_the_child_was_killed_mid_way(killed_and_resumed):
    assert killed_and_resumed["killed_by_signal"]
    assert 2 <= len(killed_and_resumed["at_kill"]) < N_TASKS


def test_the_rerun_skips_the_groups_the_killed_run_finished(killed_and_resumed):
    after = killed_and_resumed["after"]
    assert {k: after[k] for k in killed_and_resumed["at_kill"]} == killed_and_resumed["at_kill"]


def test_the_resumed_rows_equal_an_uninterrupted_run(killed_and_resumed):
    resumed, whole = killed_and_resumed["resumed"], killed_and_resumed["whole"]
    assert [_essence(t) for t in resumed] == [_essence(t) for t in whole]


def test_the_resumed_set_has_no_duplicates_and_only_whole_groups(killed_and_resumed):
    resumed = killed_and_resumed["resumed"]
    ids = [t.trajectory_id for t in resumed]
    per_group: dict[str, int] = {}
    for t in resumed:
        per_group[t.prompt_key] = per_group.get(t.prompt_key, 0) + 1
    assert len(set(ids)) == len(ids) == N_TASKS * ROLLOUT.samples_per_task
    assert set(per_group.values()) == {ROLLOUT.samples_per_task}


def test_a_changed_input_never_reuses_a_shard():
    tasks = generate_tasks(2, seed=5, max_depth=1)
    inputs = {"policy": "p", "rollout": ROLLOUT.model_dump()}
    other = {**inputs, "rollout": ROLLOUT.model_copy(update={"seed": 4}).model_dump()}
    assert shard_key(inputs, tasks) != shard_key(other, tasks)


def test_a_resume_dir_with_a_score_function_is_refused(tmp_path):
    with pytest.raises(ValueError, match="resume_dir"):
        fan_out_rollout(
            [],
            str(tmp_path),
            EpisodeContext.of(ROLLOUT, SandboxConfig(), "tiny"),
            sandbox=SandboxConfig(),
            score=lambda *a: a,
            runner=RunnerConfig(),
            resume_dir=str(tmp_path / "r"),
        )
