"""QLoRA through the stages: `dvc repro` on a tiny Qwen2 with ``train.lora.quantize: 4bit``,
the candidate promoted as the nightly does, then a second night's rollout and training
from the promoted adapter (bitsandbytes' CPU backend; no download anywhere)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from codeloop.config import LoraConfig
from codeloop.io import read_trajectories
from codeloop.ops.promote import promote
from codeloop.paths import Paths
from codeloop.policy.lora import QUANT_FILE, enable_lora
from codeloop.policy.model import Policy
from codeloop.policy.tiny import save_tiny
from codeloop.train.trainer import collate, forward_logps
from tests._tiny_repo import TINY, copy_repo, git, merge
from tests.test_policy_real_families_e2e import FAMILY_PARAMS, _dvc

bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes (codeloop[qlora]) not installed")
pytestmark = pytest.mark.slow

QLORA = {"train": {"lora": {"r": 4, "alpha": 8.0, "quantize": "4bit"}}}


@pytest.fixture(scope="module")
def nights(tmp_path_factory, repo_root, prefect_harness):
    model_dir = save_tiny(tmp_path_factory.mktemp("tiny-qwen2"), "qwen2")
    work = tmp_path_factory.mktemp("repo")
    copy_repo(repo_root, work)
    params = merge(merge(merge(yaml.safe_load((work / "params.yaml").read_text()), TINY),
                         FAMILY_PARAMS), QLORA)
    params["policy"]["model"] = str(model_dir)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    git(work, "init", "-q")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "tiny qlora")
    _dvc(work, "repro")
    first = json.loads(Paths(work).metrics("train").read_text())
    first_rows = read_trajectories(Paths(work).trajectories_dir)  # night 1's samples
    promote(work, 1, {"iteration": 1}, {})  # policy.checkpoint -> models/iter-0001
    promoted = (work / "models" / "iter-0001").resolve()
    _dvc(work, "repro", "train")  # night 2: rollout + train from the promoted adapter
    second = json.loads(Paths(work).metrics("train").read_text())
    trajs = read_trajectories(Paths(work).trajectories_dir)
    return work, promoted, first, second, trajs, first_rows


def test_the_candidate_is_an_adapter_recording_its_4bit_base(nights):
    _, promoted, first, _, _, _ = nights
    assert first["lora"] and (promoted / "adapter_model.safetensors").exists()
    assert json.loads((promoted / QUANT_FILE).read_text())["quantize"] == "4bit"


def test_the_promoted_qlora_checkpoint_reloads_on_a_4bit_base_and_samples(nights):
    _, promoted, _, _, trajs, _ = nights
    policy = Policy.load(promoted)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in policy.model.modules())
    [[gen]] = policy.generate([trajs[0].token_ids[:8]], max_new_tokens=4, seed=1)
    assert gen.token_ids


def test_the_second_nights_rollout_sampled_the_promoted_adapter(nights):
    _, promoted, _, _, trajs, _ = nights
    version = (promoted / "model_version.txt").read_text().strip()
    assert trajs and all(t.metadata.model_version == version for t in trajs)


def test_the_first_nights_sampler_log_probs_are_the_4bit_trainers(nights):
    work, _, first, _, _, rows = nights
    # Rollout loaded the full-precision models/init quantized as train does
    # (train.lora.quantize): the trainer's view of the rows (4-bit base, adapters at
    # zero) gives the sampler's log-probs, up to padding rounding (measured 9e-4; sampled
    # in fp32, as before train.lora.quantize reached rollout, 0.35).
    trainer = Policy.load(work / "models" / "init", quantize="4bit")
    enable_lora(trainer, LoraConfig(r=4, alpha=8.0, quantize="4bit"))
    mb = collate(rows, trainer.tokenizer.pad_token_id)
    with torch.no_grad():
        logps, _ = forward_logps(trainer.model, mb)
    on = mb["mask"].bool()
    assert first["lora"] and (logps[on] - mb["old_logps"][on]).abs().max().item() < 1e-2


def test_the_second_night_trains_the_adapter_from_ratio_one(nights):
    _, _, _, second, _, _ = nights
    # Sampler and trainer both ran the 4-bit base + adapter: before the update the
    # importance ratio is 1.
    assert second["policy_version"] != "" and second["lora"]
    assert second["ratio_mean_first_step"] == pytest.approx(1.0, abs=1e-3)
