"""SFT on agent demonstrations (codeloop.policy.sft.agent_examples / mix_examples): the
loss is on the model's calls only, in the agent's exact token format."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from codeloop.data.generator import generate_tasks
from codeloop.policy.agent_format import CompactAgentFormat, call_of
from codeloop.policy.model import Policy, train_tokenizer
from codeloop.policy.sft import agent_examples, mix_examples, pad_batch, run_sft
from codeloop.schema import Observation, Task

TASK = Task("repo-1", "synthetic_repo", "total([1, 2]) returns 2; expected 3.", kind="repo")
STEPS = [
    (call_of("run_tests"), Observation(output="FAILED tests/test_a.py::test_total")),
    (call_of("read_file", path="pkg/a.py"), Observation(output="def total(xs):\n    return 0")),
    (
        call_of("edit", path="pkg/a.py", old="return 0", new="return sum(xs)"),
        Observation(output="edited pkg/a.py"),
    ),
    (call_of("submit"), Observation(output="submitted")),
]


@pytest.fixture(scope="module")
def policy() -> Policy:
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = train_tokenizer(generate_tasks(12, seed=4), vocab_size=400)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=512, n_embd=32, n_layer=1, n_head=2)
    return Policy(GPT2LMHeadModel(cfg), tok, name="tiny")


def _pieces(ids: list[int], mask: list[int], want: int) -> list[list[int]]:
    out: list[list[int]] = []
    for i, (t, m) in enumerate(zip(ids, mask, strict=True)):
        if m == want:
            if i == 0 or mask[i - 1] != want:
                out.append([])
            out[-1].append(t)
    return out


def test_sft_agent_example_is_the_prompt_then_calls_and_observations_piece_by_piece(policy):
    ((ids, mask),) = agent_examples(policy, [(TASK, STEPS)], 512)
    fmt = CompactAgentFormat(policy.tokenizer)
    want = fmt.prompt_ids(TASK)
    for k, (c, o) in enumerate(STEPS):
        want += fmt.call_ids(TASK, c) + (fmt.observation_ids(TASK, o) if k < 3 else [])
    assert ids == want


def test_sft_agent_example_puts_the_loss_on_the_calls_only(policy):
    ((ids, mask),) = agent_examples(policy, [(TASK, STEPS)], 512)
    fmt = CompactAgentFormat(policy.tokenizer)
    calls = [fmt.parse(policy.tokenizer.decode(p)) for p in _pieces(ids, mask, 1)]
    assert calls == [c for c, _ in STEPS]


def test_sft_agent_observations_carry_no_loss(policy):
    ((ids, mask),) = agent_examples(policy, [(TASK, STEPS)], 512)
    masked = "".join(policy.tokenizer.decode(p) for p in _pieces(ids, mask, 0))
    assert "FAILED tests/test_a.py::test_total" in masked and "edited pkg/a.py" in masked


def test_sft_agent_batch_labels_are_minus_100_off_the_mask(policy):
    ex = agent_examples(policy, [(TASK, STEPS)], 512)
    _, _, lab = pad_batch(ex, policy.tokenizer.pad_token_id)
    ids, mask = ex[0]
    assert [int(x) for x in lab[0]] == [t if m else -100 for t, m in zip(ids, mask, strict=True)]


def test_sft_agent_an_experts_slip_is_context_and_never_a_target(policy):
    slip = {**call_of("edit", path="pkg/a.py", old="return 1", new="return sum(ys)"), "slip": True}
    steps = [*STEPS[:2], (slip, Observation(output="error: no match", error_kind="no_match")),
             *STEPS[2:]]
    ((ids, mask),) = agent_examples(policy, [(TASK, steps)], 512)
    fmt = CompactAgentFormat(policy.tokenizer)
    targets = [fmt.parse(policy.tokenizer.decode(p)) for p in _pieces(ids, mask, 1)]
    context = "".join(policy.tokenizer.decode(p) for p in _pieces(ids, mask, 0))
    assert targets == [c for c, _ in STEPS] and "sum(ys)" in context


def test_sft_agent_an_episode_longer_than_max_len_is_skipped(policy):
    assert agent_examples(policy, [(TASK, STEPS)], 20) == []


def test_sft_agent_examples_make_up_the_configured_fraction():
    func = [([1, 2], 1)] * 30
    agent = [([3, 4], [0, 1])] * 2
    mixed = mix_examples(func, agent, 0.25, random.Random(0))
    assert len(mixed) == 40 and sum(1 for e in mixed if isinstance(e[1], list)) == 10


def test_sft_agent_fraction_zero_adds_no_agent_example():
    assert mix_examples([([1], 0)], [([2], [1])], 0.0, random.Random(0)) == [([1], 0)]


def test_sft_agent_training_with_demos_lowers_the_loss(policy):
    cfg = SimpleNamespace(
        steps=30, batch_size=4, lr=3e-3, warmup_steps=2, max_len=512, revise_fraction=0.0,
        agent_fraction=0.5, seed=0,
    )
    stats = run_sft(policy, generate_tasks(8, seed=1), cfg, demos=[(TASK, STEPS)])
    assert stats["agent_demos"] == 1 and stats["agent_examples"] == 8
    assert stats["loss_last"] < stats["loss_first"]


def test_sft_with_fewer_agent_slots_than_demos_draws_them_from_all_demos():
    func = [([1, 2], 1)] * 90
    agent = [([100 + i], [1]) for i in range(40)]
    mixed = mix_examples(func, agent, 0.1, random.Random(0))
    picked = [e[0][0] - 100 for e in mixed if isinstance(e[1], list)]
    assert len(picked) == 10 == len(set(picked)) and max(picked) >= 10
