"""Sharded training (train.strategy: fsdp, codeloop.train.sharding) for real: FSDP2 on 2 gloo ranks.

Every launch is the documented command (torchrun, or accelerate launch with
configs/accelerate_fsdp.yaml) of the real train stage on a tiny two-layer policy whose
LM head is tied to its embeddings. A sharded update must equal the single process's on
the full batch, the candidate must be an ordinary checkpoint the loader reads, and LoRA,
gradient checkpointing and a resumed AdamW must shard too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from codeloop.config import Params
from codeloop.io import read_json
from codeloop.paths import Paths
from codeloop.policy.model import Policy
from codeloop.train import sharding
from codeloop.train.distributed import param_digest
from tests._train_launch import (
    BIN,
    REPO,
    SINGLE,
    TORCHRUN,
    copy_workspace,
    launch,
    make_workspace,
    weights,
)

pytestmark = pytest.mark.slow

# Two steps: the first moves every weight by about lr (Adam), the second has a non-zero
# loss and KL. 20 rows in micro-batches of 4 split 2 + 2 on each rank.
TRAIN = {"steps": 2, "lr": 0.01, "micro_batch_size": 4, "grad_accum": 8, "seed": 4}
FSDP = {**TRAIN, "strategy": "fsdp"}
ACCELERATE = [
    str(BIN / "accelerate"),
    "launch",
    "--config_file",
    str(REPO / "configs" / "accelerate_fsdp.yaml"),
    "-m",
    "codeloop.stages.train",
]
# Both runs sum the same gradients in another order; the sharded one in halves. 1e-5 is
# 0.1% of the update (lr 0.01 a step), far below any real disagreement.
ATOL = 1e-5


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("base"), TRAIN, n_layer=2)


def _run(base: Path, tmp_path_factory, name: str, cmd: list[str], train: dict) -> Path:
    root = copy_workspace(base, tmp_path_factory.mktemp(name), train)
    launch(cmd, root)
    return root


@pytest.fixture(scope="module")
def single(base, tmp_path_factory) -> Path:
    return _run(base, tmp_path_factory, "single", SINGLE, TRAIN)


@pytest.fixture(scope="module")
def fsdp(base, tmp_path_factory) -> Path:
    return _run(base, tmp_path_factory, "fsdp", TORCHRUN, FSDP)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _candidate(root: Path) -> Path:
    return Paths(root).candidate_model


def _history(root: Path) -> list[dict]:
    return read_jsonl(_candidate(root) / "train_history.jsonl")


def _assert_same_weights(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        assert torch.allclose(got[k], want[k], atol=ATOL, rtol=0), k


def _with_policy(train: dict, checkpoint: Path) -> dict:
    return {"train": train, "policy": {"checkpoint": str(checkpoint)}}


def test_an_fsdp_update_equals_the_single_process_update(fsdp, single, base):
    init = weights(Paths(base).init_model)
    want = weights(_candidate(single))
    assert max(float((want[k] - init[k]).abs().max()) for k in want) > 1e-3  # a real update
    _assert_same_weights(weights(_candidate(fsdp)), want)
    for got, ref in zip(_history(fsdp), _history(single), strict=True):
        assert got["loss"] == pytest.approx(ref["loss"], abs=1e-6)
        assert got["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-5)
        assert got["kl"] == pytest.approx(ref["kl"], abs=1e-7)
    assert abs(_history(single)[-1]["loss"]) > 1e-4  # the second step's loss is not trivially 0


def test_the_gathered_adamw_state_is_the_single_process_optimizer_file(fsdp, single):
    got = torch.load(_candidate(fsdp) / "optimizer.pt", weights_only=True)
    want = torch.load(_candidate(single) / "optimizer.pt", weights_only=True)
    assert got["param_groups"] == want["param_groups"]
    assert got["state"].keys() == want["state"].keys()
    for i, entry in want["state"].items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.allclose(got["state"][i][key], entry[key], atol=1e-8, rtol=1e-4)


def test_the_sharded_candidate_loads_as_an_ordinary_checkpoint_and_generates(fsdp, single):
    policy = Policy.load(_candidate(fsdp))  # what policy.checkpoint and the engine read
    model = policy.model
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert "lm_head.weight" not in weights(_candidate(fsdp))  # tied: saved once, as unsharded
    out = policy.generate(["def add(a, b):"], max_new_tokens=6, seed=1)
    assert len(out[0][0].token_ids) > 0
    assert policy.model_version == (_candidate(fsdp) / "model_version.txt").read_text().strip()


def test_ranks_record_their_own_shards_and_the_digest_of_the_saved_weights(fsdp):
    rows = read_jsonl(_candidate(fsdp) / "ranks.jsonl")
    assert [r["rank"] for r in rows] == [0, 1]
    assert {r["strategy"] for r in rows} == {"fsdp"}
    assert rows[0]["shard_sha256"] != rows[1]["shard_sha256"]  # each holds half
    reloaded = param_digest(Policy.load(_candidate(fsdp)).model)
    assert rows[0]["param_sha256"] == rows[1]["param_sha256"] == reloaded
    assert read_json(Paths(fsdp).metrics("train"))["world_size"] == 2


def test_accelerate_launch_with_the_fsdp_config_trains_the_same_weights(
    base, single, tmp_path_factory
):
    root = _run(base, tmp_path_factory, "accelerate", ACCELERATE, FSDP)
    assert read_json(Paths(root).metrics("train"))["world_size"] == 2
    assert read_jsonl(_candidate(root) / "ranks.jsonl")[0]["strategy"] == "fsdp"
    _assert_same_weights(weights(_candidate(root)), weights(_candidate(single)))


def test_fsdp_with_gradient_checkpointing_resumes_adamw_and_matches_one_process(
    single, tmp_path_factory
):
    """From the single run's candidate and its optimizer.pt: sharded + checkpointed vs alone."""
    start = _candidate(single)
    roots = {}
    for name, cmd, train in (
        ("resume_single", SINGLE, TRAIN),
        ("resume_fsdp", TORCHRUN, {**FSDP, "gradient_checkpointing": True}),
    ):
        root = tmp_path_factory.mktemp(name)
        copy_workspace(single, root, train)
        (root / "params.yaml").write_text(json.dumps(_with_policy(train, start)))
        launch(cmd, root)
        roots[name] = root
    assert read_json(Paths(roots["resume_fsdp"]).metrics("train"))["optimizer_resumed"]
    _assert_same_weights(
        weights(_candidate(roots["resume_fsdp"])), weights(_candidate(roots["resume_single"]))
    )


def test_fsdp_with_lora_trains_only_the_adapter(base, tmp_path_factory):
    lora = {"r": 4, "target_modules": ["q_proj", "v_proj"]}
    root = _run(base, tmp_path_factory, "lora", TORCHRUN, {**FSDP, "lora": lora})
    cand = _candidate(root)
    adapter = weights(cand, "adapter_model.safetensors")
    assert adapter and all("lora_" in k for k in adapter)
    assert all(
        float(v.abs().max()) > 0 for k, v in adapter.items() if "lora_B" in k
    )  # B starts at 0
    policy = Policy.load(cand)  # base + adapter, as policy.checkpoint loads it
    init = weights(Paths(base).init_model)
    merged_base = {
        k.removeprefix("base_model.model.").replace(".base_layer", ""): v
        for k, v in policy.model.state_dict().items()
        if "lora_" not in k
    }
    for k, v in init.items():
        assert torch.equal(merged_base[k], v), k
    assert policy.generate(["x = "], max_new_tokens=4, seed=1)[0][0].token_ids


# ---------------------------------------------------------------- preflight, no launch


def test_fsdp_with_one_process_passes_preflight_as_unsharded_training(base):
    from codeloop.ops.preflight import strategy_check

    params = Params(train=FSDP, policy={"checkpoint": str(Paths(base).init_model)})
    check = strategy_check(params, base)
    assert check.ok and "unsharded" in check.reason


def test_a_quantized_base_is_refused_for_fsdp_naming_train_strategy(base, monkeypatch, capsys):
    from codeloop.stages.train import main

    lora = {"r": 4, "quantize": "4bit"}
    (base / "qlora.yaml").write_text(json.dumps({"train": {**FSDP, "lora": lora}}))
    monkeypatch.setenv("WORLD_SIZE", "2")  # as a launcher sets it; refused before joining
    assert main(["--root", str(base), "--params", "qlora.yaml", "--skip-preflight"]) == 2
    assert (
        "train.strategy fsdp cannot shard a bitsandbytes-quantized base" in capsys.readouterr().err
    )


def test_an_accelerate_fsdp_launch_refuses_a_ddp_params_file(base, monkeypatch):
    from codeloop.ops.preflight import strategy_check

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    check = strategy_check(Params(train=TRAIN), base)
    assert not check.ok and "set train.strategy: fsdp" in check.reason


def test_a_model_without_layers_cannot_be_sharded():
    assert "declares no layers" in sharding.check_launch("fsdp", 2, 0)
    assert sharding.check_launch("fsdp", 2, 2) == ""
    assert sharding.check_launch("fsdp", 1, 0) == ""  # one process: nothing is sharded
    assert sharding.layers_of("/nonexistent") is None


def test_a_model_without_transformer_blocks_names_train_strategy():
    with pytest.raises(sharding.ShardingError, match="train.strategy: ddp"):
        sharding.blocks(torch.nn.Sequential(torch.nn.Linear(2, 2)))
