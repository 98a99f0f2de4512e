"""Multi-process GRPO training (codeloop.train.distributed) for real: torchrun, gloo, 2 ranks on CPU.

The launched command is the documented one (docs/operations.md, codeloop/train/distributed.py)
with 2 processes on CPU. Each rank trains on its shard of every micro-batch; both
ranks must end with identical parameters (their digests, recorded by rank 0), and the
candidate must equal the one a single process trains on the same full batch, within
float tolerance: DDP's gradient averaging is equivalent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from codeloop.config import TrainConfig
from codeloop.io import read_json, read_trajectories
from codeloop.paths import Paths
from codeloop.train import distributed as ddp
from tests._train_launch import SINGLE, TORCHRUN, launch, make_workspace, weights

TRAIN = {"steps": 3, "lr": 0.01, "micro_batch_size": 5, "grad_accum": 2, "seed": 4}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("ddp"), TRAIN)


@pytest.fixture(scope="module")
def runs(workspace, tmp_path_factory) -> dict[str, Path]:
    """The same workspace trained by torchrun x2 and by one plain process."""
    single = tmp_path_factory.mktemp("single")
    for name in ("params.yaml", "models", "data"):
        src = workspace / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, single / name)
    launch(TORCHRUN, workspace)
    launch(SINGLE, single)
    return {"ddp": workspace, "single": single}


pytestmark = pytest.mark.slow


def test_both_ranks_end_with_identical_parameters(runs):
    path = Paths(runs["ddp"]).candidate_model / "ranks.jsonl"
    ranks = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["param_sha256"] == ranks[1]["param_sha256"]


def test_two_ranks_train_the_single_process_candidate(runs, workspace):
    init = weights(Paths(workspace).init_model)
    got = weights(Paths(runs["ddp"]).candidate_model)
    want = weights(Paths(runs["single"]).candidate_model)
    assert got.keys() == want.keys()
    moved = max(float((want[k] - init[k]).abs().max()) for k in want)
    assert moved > 1e-3  # the update is real, so agreeing is not trivial
    # atol 1e-4 (0.3% of the update): the attention key bias has a mathematically zero
    # gradient, so its float noise, which differs with the summation order, is all that
    # Adam normalises into a step there (measured: 3e-5 apart; every other weight < 4e-6).
    for k in want:
        assert torch.allclose(got[k], want[k], atol=1e-4, rtol=0), k


def test_only_rank_zero_writes_the_metrics_with_the_world_size(runs):
    assert read_json(Paths(runs["ddp"]).metrics("train"))["world_size"] == 2
    assert read_json(Paths(runs["single"]).metrics("train"))["world_size"] == 1


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_reweighted_shard_gradients_average_to_the_full_batch_gradient(workspace, loss_type):
    from codeloop.policy.model import Policy
    from codeloop.train.grpo import grpo_loss
    from codeloop.train.trainer import collate, forward_logps, prepare_batch

    policy = Policy.load(Paths(workspace).init_model)
    cfg = TrainConfig(**TRAIN, loss_type=loss_type)
    trajs = read_trajectories(Paths(workspace).trajectories_dir)
    items, _ = prepare_batch(trajs, cfg, policy.max_context)
    items = items[:7]  # odd on purpose: unequal shards
    num_items = sum(sum(t.loss_mask[1:]) for t, _ in items)

    def grad(rows, weight: float) -> torch.Tensor:
        policy.model.zero_grad()
        mb = collate([t for t, _ in rows], policy.tokenizer.pad_token_id)
        logps, _ = forward_logps(policy.model, mb)
        adv = torch.tensor([a for _, a in rows])
        loss, _ = grpo_loss(
            logps,
            mb["old_logps"],
            None,
            adv,
            mb["mask"],
            loss_type=loss_type,
            max_completion_length=16,
            num_items=num_items,
        )
        (loss * weight).backward()
        return torch.cat([p.grad.flatten() for p in policy.model.parameters()])

    full = grad(items, 1.0)
    world = 3
    averaged = sum(grad(*ddp.shard(items, loss_type, r, world)) for r in range(world)) / world
    assert torch.allclose(averaged, full, atol=1e-6, rtol=1e-4)
