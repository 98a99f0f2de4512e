"""`codeloop export`: each format loads in `datasets` and passes TRL's own dataset checks.

The trajectories are real token layouts on the tiny GPT-2 policy (tests/_tiny_policy.py);
the TRL trainers are constructed on it, which tokenizes the export (no download).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from codeloop.cli import main
from codeloop.data.export import export
from codeloop.io import write_trajectories
from codeloop.policy.model import Policy
from codeloop.schema import Action, Observation
from tests._tiny_policy import BAD, FEEDBACK, GOOD, make_tiny_policy
from tests._tiny_policy import episode as _episode

CHAT = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # the tiny tokenizer has none


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Policy:
    return Policy.load(make_tiny_policy(tmp_path_factory.mktemp("policy")))


def _ep(policy, key, turns, reward, tid, passed):
    t = _episode(policy, key, turns, reward, tid=tid)
    actions = [
        Action(
            step=i,
            action_type="generate" if i == 0 else "revise",
            content=gen,
            observation=Observation(status="failed" if fb else "passed", tests_total=1),
            reward=0.0,
        )
        for i, (gen, fb) in enumerate(turns)
    ]
    reason = "all_tests_passed" if passed else "max_steps"
    return replace(t, actions=actions, final_code=turns[-1][0], terminal_reason=reason, done=True)


@pytest.fixture(scope="module")
def trajs(tiny):
    rows = []
    for key in ("a", "b"):
        rows += [
            _ep(tiny, key, [(GOOD, "")], 1.0, f"{key}-0", True),
            _ep(tiny, key, [(GOOD, "")], 1.0, f"{key}-1", True),
            _ep(tiny, key, [(BAD, FEEDBACK), (GOOD, "")], 0.8, f"{key}-2", True),
            _ep(tiny, key, [(BAD, "")], 0.0, f"{key}-3", False),
        ]
    rows.append(replace(rows[0], trajectory_id="x", infra_error="sandbox died"))
    return rows


def _load(path: Path):
    import datasets

    return datasets.load_dataset(str(path), split="train")


def test_the_sft_export_is_deduplicated_passing_chat_messages(trajs, tmp_path):
    export(trajs, "sft", tmp_path)
    ds = _load(tmp_path)
    # Per task one row per distinct passing final code: a-0/a-1/a-2 all end in GOOD.
    assert sorted(ds["task_id"]) == ["a", "b"]


def test_sft_trainer_tokenizes_the_sft_export(trajs, tiny, tmp_path):
    from trl import SFTConfig, SFTTrainer

    export(trajs, "sft", tmp_path / "sft")
    tok = tiny.tokenizer
    tok.chat_template = CHAT
    args = SFTConfig(output_dir=str(tmp_path / "o"), report_to=[], max_length=128, use_cpu=True)
    trainer = SFTTrainer(
        model=tiny.model, args=args, train_dataset=_load(tmp_path / "sft"), processing_class=tok
    )
    first = trainer.train_dataset[0]["input_ids"]
    assert first == tok(trajs[0].prompt + GOOD)["input_ids"]


def test_the_dpo_export_pairs_the_best_and_worst_of_each_group(trajs, tmp_path):
    export(trajs, "dpo", tmp_path)
    ds = _load(tmp_path)
    assert [(r["chosen"], r["rejected"]) for r in ds] == [(GOOD, BAD), (GOOD, BAD)]


def test_a_tied_group_gives_no_dpo_pair(trajs, tmp_path):
    tied = [replace(t, reward=1.0) for t in trajs if t.prompt_key == "a"]
    with pytest.raises(ValueError, match="no rows to export as dpo"):
        export(tied, "dpo", tmp_path)


def test_dpo_trainer_tokenizes_the_dpo_export(trajs, tiny, tmp_path):
    from trl import DPOConfig, DPOTrainer

    export(trajs, "dpo", tmp_path / "dpo")
    args = DPOConfig(output_dir=str(tmp_path / "o"), report_to=[], max_length=128, use_cpu=True)
    trainer = DPOTrainer(
        model=tiny.model,
        args=args,
        train_dataset=_load(tmp_path / "dpo"),
        processing_class=tiny.tokenizer,
    )
    assert trainer.train_dataset[0]["prompt_ids"] == tiny.tokenizer(trajs[0].prompt)["input_ids"]


def test_the_grpo_export_holds_each_group_with_its_rewards(trajs, tmp_path):
    export(trajs, "grpo", tmp_path)
    row = _load(tmp_path)[0]
    assert (row["prompt_key"], row["rewards"]) == ("a", [1.0, 1.0, 0.8, 0.0])


def test_grpo_trainer_accepts_the_grpo_export(trajs, tiny, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    export(trajs, "grpo", tmp_path / "grpo")
    args = GRPOConfig(
        output_dir=str(tmp_path / "o"),
        report_to=[],
        use_cpu=True,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
    )
    trainer = GRPOTrainer(
        model=tiny.model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=_load(tmp_path / "grpo"),
        processing_class=tiny.tokenizer,
    )
    assert len(trainer.train_dataset) == 2


def test_transitions_rebuild_each_step_from_the_stored_tokens(trajs, tmp_path):
    export(trajs, "transitions", tmp_path)
    ds = _load(tmp_path)
    two_step = [r for r in ds if r["trajectory_id"] == "a-2"]
    t = next(t for t in trajs if t.trajectory_id == "a-2")
    first, second = two_step
    assert (
        second["state_ids"][: len(first["state_ids"]) + len(first["action_ids"])]
        == (first["state_ids"] + first["action_ids"])
        and second["next_state_ids"] == t.token_ids
    )


def test_transitions_carry_the_sampler_logp_and_the_reward_on_the_last_step(trajs, tmp_path):
    export(trajs, "transitions", tmp_path)
    rows = [r for r in _load(tmp_path) if r["trajectory_id"] == "a-2"]
    t = next(t for t in trajs if t.trajectory_id == "a-2")
    assert [r["done"] for r in rows] == [False, True]
    assert [r["reward"] for r in rows] == [0.0, 0.8]
    assert sum(r["logp"] for r in rows) == pytest.approx(sum(t.sample_logprobs), abs=1e-4)


def test_transition_actions_decode_to_the_action_text(trajs, tiny, tmp_path):
    export(trajs, "transitions", tmp_path)
    row = next(r for r in _load(tmp_path) if r["trajectory_id"] == "a-2")
    assert tiny.tokenizer.decode(row["action_ids"]) == row["action"]


def test_no_export_carries_an_infra_error_row(trajs, tmp_path):
    export(trajs, "transitions", tmp_path)
    assert "x" not in set(_load(tmp_path)["trajectory_id"])


def test_the_export_command_writes_the_dataset(trajs, tmp_path, capsys):
    write_trajectories(tmp_path / "t", trajs, jsonl_export=False)
    argv = ["export", "--trajectories", str(tmp_path / "t"), "--format", "sft"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    assert len(_load(tmp_path / "out")) == 2


def test_the_export_command_refuses_missing_trajectories(tmp_path, capsys):
    argv = ["export", "--trajectories", str(tmp_path / "none"), "--format", "dpo"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "not found" in capsys.readouterr().err
