"""Sampling from real architectures (tiny random Qwen2 and Llama with chat templates):
batched KV-cache generation with left padding, end-of-turn stops, context errors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from codeloop.config import RolloutConfig
from codeloop.policy.model import Policy
from codeloop.policy.sft import run_sft
from codeloop.policy.tiny import build_model, build_tokenizer
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.envs import run_episodes
from codeloop.rollout.function_env import is_prompt_too_long
from codeloop.schema import Task

TASK = Task(
    task_id="t1",
    source="synthetic",
    prompt="Return the double of x.",
    reference_solution="def double(x):\n    return 2 * x\n",
    visible_tests=["assert double(2) == 4"],
    hidden_tests=[],
    entry_point="double",
)


def _policy(family: str, **sizes) -> Policy:
    tok = build_tokenizer(family)
    return Policy(build_model(family, tok, seed=0, **sizes), tok, name=f"tiny-{family}")


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def policy(request):
    return _policy(request.param)


def test_a_rows_sample_is_the_same_alone_and_in_a_left_padded_batch(policy):
    short = policy.format.prompt_ids(TASK)
    longer = short + policy.encode(" and some more words to pad the other row")
    [[alone]] = policy.generate([short], max_new_tokens=12, seed=3)
    batched = policy.generate([longer, short], max_new_tokens=12, seed=3)
    assert batched[1][0].token_ids == alone.token_ids
    assert batched[1][0].logprobs == pytest.approx(alone.logprobs, abs=1e-4)


def test_generation_stops_at_the_templates_end_of_turn_after_sft(policy):
    cfg = SimpleNamespace(
        steps=80, batch_size=1, lr=1e-2, warmup_steps=0, max_len=512, revise_fraction=0.0, seed=0
    )
    trained = _policy(policy.name.split("-")[1])
    run_sft(trained, [TASK], cfg)
    [[gen]] = trained.generate([trained.format.prompt_ids(TASK)], temperature=0.05, seed=0)
    assert gen.finish_reason == "stop" and gen.token_ids[-1] in trained.stop_ids()
    assert trained.format.extract(TASK, gen.text) == TASK.reference_solution


def test_a_prompt_longer_than_the_context_is_a_counted_error_row(policy):
    small = _policy(policy.name.split("-")[1], max_position_embeddings=16)
    cfg = RolloutConfig(samples_per_task=2, max_steps=1, top_p=1.0, max_new_tokens=4,
                        batch_size=4, seed=0)
    rows = run_episodes([TASK], small, None, EpisodeContext(cfg, "d", 0, 1.0))
    assert [is_prompt_too_long(t) for t in rows] == [True, True]
    assert all(t.terminal_reason == "error" and sum(t.loss_mask) == 0 for t in rows)
