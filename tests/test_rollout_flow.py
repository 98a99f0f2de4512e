"""policy_init -> sft -> rollout flows, run for real under Prefect on tiny params."""

from __future__ import annotations

import collections

import pytest
import yaml

from codeloop.data.generator import generate_tasks
from codeloop.io import read_json, read_trajectories, write_json, write_tasks
from codeloop.paths import Paths

pytestmark = pytest.mark.slow

TINY = {
    "policy_init": {"vocab_size": 400, "n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 512},
    "sft": {"steps": 4, "batch_size": 4, "warmup_steps": 1},
    "sandbox": {"timeout_s": 2.0, "workers": 2},
    "rollout": {"samples_per_task": 3, "max_steps": 2, "max_new_tokens": 16, "batch_size": 8},
}


@pytest.fixture(scope="module")
def stage_root(tmp_path_factory, prefect_harness):
    from flows.policy_init import policy_init
    from flows.rollout import rollout
    from flows.sft import sft

    root = tmp_path_factory.mktemp("stages")
    (root / "params.yaml").write_text(yaml.safe_dump(TINY))
    tasks = generate_tasks(12, seed=2, max_depth=2)
    write_tasks(Paths(root).clean_tasks, tasks)
    write_json(Paths(root).manifest, {"dataset_version": "ds-test"})
    write_tasks(Paths(root).bucket_tasks, tasks)
    write_json(Paths(root).plan, {"task_ids": [t.task_id for t in tasks[:4]]})
    base_version = policy_init(root=str(root))["model_version"]
    stats = sft(root=str(root))
    metrics = rollout(root=str(root))
    return root, base_version, stats, metrics


def test_policy_init_writes_models_base_with_its_version(stage_root):
    root, base_version, _, _ = stage_root
    assert (Paths(root).base_model / "model_version.txt").read_text().strip() == base_version


def test_sft_writes_models_init_from_the_base(stage_root):
    root, base_version, stats, _ = stage_root
    assert stats["base_version"] == base_version
    assert (Paths(root).init_model / "model_version.txt").read_text().strip() == stats[
        "model_version"
    ]
    assert read_json(Paths(root).metrics("sft"))["model_version"] == stats["model_version"]


def test_rollout_writes_complete_groups_for_every_planned_task(stage_root):
    root, *_ = stage_root
    trajs = read_trajectories(Paths(root).rollouts_dir)
    sizes = collections.Counter(t.prompt_key for t in trajs)
    assert len(sizes) == 4 and set(sizes.values()) == {3}


def test_rollout_stamps_the_checkpoint_and_dataset_versions(stage_root):
    root, _, stats, _ = stage_root
    trajs = read_trajectories(Paths(root).rollouts_dir)
    assert {t.metadata.model_version for t in trajs} == {stats["model_version"]}
    assert {t.metadata.dataset_version for t in trajs} == {"ds-test"}


def test_rollout_metrics_are_written(stage_root):
    root, *_, metrics = stage_root
    assert (
        read_json(Paths(root).metrics("rollout"))["trajectories"] == 12 == metrics["trajectories"]
    )


def test_a_finished_rollout_leaves_no_resume_state(stage_root):
    # rollout.resume is on by default: shards were kept while it ran, and dropped after
    # the outs were written (a stale shard must never outlive the run that wrote it).
    root, *_ = stage_root
    assert not Paths(root).resume_dir("rollout").exists()
