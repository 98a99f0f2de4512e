"""The Policy wrapper: embedded build, save/load/version, batched sampling, SFT."""

from __future__ import annotations

import types

import pytest
import torch

from codeloop.config import Params, PolicyInitConfig
from codeloop.data.generator import generate_tasks
from codeloop.io import write_tasks
from codeloop.policy import prompts as P
from codeloop.policy.init import init_policy
from codeloop.policy.model import Policy, build_embedded, checkpoint_hash
from codeloop.policy.sft import run_sft, sft_examples

TINY = PolicyInitConfig(vocab_size=400, n_layer=1, n_head=2, n_embd=32, n_positions=256)


def _params() -> Params:
    return Params(policy_init=TINY)


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(30, seed=11, max_depth=2)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def policy(request, tasks):
    """Every policy test runs on both embedded architectures (policy_init.arch)."""
    return build_embedded(
        Params(policy_init=TINY.model_copy(update={"arch": request.param})), tasks
    )


def test_the_llama_arch_builds_a_rotary_model_of_the_configured_size(tasks):
    cfg = TINY.model_copy(update={"arch": "llama"})
    model = build_embedded(Params(policy_init=cfg), tasks).model
    assert type(model).__name__ == "LlamaForCausalLM"
    c = model.config
    assert (c.num_hidden_layers, c.num_attention_heads, c.hidden_size) == (1, 2, 32)
    assert c.max_position_embeddings == 256 and c.tie_word_embeddings
    assert not any("wpe" in name or "position" in name for name, _ in model.named_parameters())


def test_an_unknown_arch_is_refused_with_the_key_named():
    with pytest.raises(ValueError, match="arch"):
        PolicyInitConfig(arch="mamba")


def test_init_policy_writes_a_loadable_checkpoint_with_its_version(tmp_path, tasks):
    write_tasks(tmp_path / "tasks.parquet", tasks)
    version = init_policy(_params(), tmp_path / "tasks.parquet", tmp_path / "base")
    assert (tmp_path / "base" / "model_version.txt").read_text().strip() == version
    assert Policy.load(tmp_path / "base").model_version == version


def test_model_version_is_the_hash_of_the_saved_files(tmp_path, policy):
    version = policy.save(tmp_path / "m")
    assert version == checkpoint_hash(tmp_path / "m")


def test_changing_one_weight_changes_the_model_version(tmp_path, policy):
    v1 = policy.save(tmp_path / "a")
    other = Policy.load(tmp_path / "a")
    with torch.no_grad():
        next(other.model.parameters()).view(-1)[0] += 1.0
    assert other.save(tmp_path / "b") != v1


def test_tokenizer_keeps_markers_as_single_tokens(policy):
    for marker in P.SPECIAL_TOKENS:
        assert len(policy.encode(marker)) == 1


def test_end_marker_is_a_stop_token(policy):
    assert policy.encode(P.END)[0] in policy.stop_ids()


def test_generate_returns_n_samples_per_prompt(policy, tasks):
    out = policy.generate([P.task_prompt(t) for t in tasks[:3]], n=4, max_new_tokens=8)
    assert [len(g) for g in out] == [4, 4, 4]


def test_generate_is_deterministic_for_a_seed(policy, tasks):
    prompts = [P.task_prompt(t) for t in tasks[:2]]
    a = policy.generate(prompts, n=3, max_new_tokens=12, seed=5)
    b = policy.generate(prompts, n=3, max_new_tokens=12, seed=5)
    assert [[g.token_ids for g in row] for row in a] == [[g.token_ids for g in row] for row in b]


def test_batched_samples_are_not_all_identical(policy, tasks):
    out = policy.generate([P.task_prompt(tasks[0])], n=6, max_new_tokens=12, seed=1)
    assert len({tuple(g.token_ids) for g in out[0]}) > 1


def test_logprobs_match_a_forward_pass_at_the_sampling_temperature(policy, tasks):
    prompt = policy.encode(P.task_prompt(tasks[0]))
    gen = policy.generate([prompt], n=1, temperature=0.7, max_new_tokens=10, seed=3)[0][0]
    full = torch.tensor([prompt + gen.token_ids])
    with torch.no_grad():
        logits = policy.model(full).logits[0, len(prompt) - 1 : -1] / 0.7
    want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
    assert torch.allclose(want, torch.tensor(gen.logprobs), atol=1e-4)


def _texts(rows) -> list[list[str]]:
    return [[g.text for g in row] for row in rows]


def test_a_rows_sample_does_not_depend_on_the_rest_of_its_batch(policy, tasks):
    prompts = [P.task_prompt(t) for t in tasks[:5]]
    alone = policy.generate(prompts[2:3], n=2, max_new_tokens=16, seed=7, top_p=0.9)
    together = policy.generate(prompts, n=2, max_new_tokens=16, seed=7, top_p=0.9, batch_size=3)
    assert _texts(together)[2] == _texts(alone)[0]


def test_identical_prompts_in_one_call_are_sampled_independently(policy, tasks):
    # rollout passes a GRPO group as n=1 copies of one prompt: they must not all agree
    out = policy.generate([P.task_prompt(tasks[0])] * 6, n=1, max_new_tokens=12, seed=1)
    assert len({row[0].text for row in out}) > 1


def test_generate_leaves_torch_global_rng_untouched(policy, tasks):
    torch.manual_seed(123)
    state = torch.get_rng_state()
    policy.generate([P.task_prompt(tasks[0])], n=2, max_new_tokens=6, seed=4)
    assert torch.equal(state, torch.get_rng_state())


def test_repetition_penalty_and_top_p_still_change_what_is_sampled(policy, tasks):
    prompts = [P.task_prompt(t) for t in tasks[:3]]
    plain = policy.generate(prompts, n=2, max_new_tokens=16, seed=2, top_p=1.0)
    shaped = policy.generate(
        prompts, n=2, max_new_tokens=16, seed=2, top_p=0.5, repetition_penalty=2.0
    )
    assert _texts(plain) != _texts(shaped)


def test_non_finite_logits_raise_a_policy_error_naming_the_model(tmp_path, policy, tasks):
    from codeloop.policy.model import PolicyError

    policy.save(tmp_path / "m")
    broken = Policy.load(tmp_path / "m")
    with torch.no_grad():
        broken.model.get_output_embeddings().weight[3, 0] = float("nan")
    with pytest.raises(PolicyError, match="non-finite logits"):
        broken.generate([P.task_prompt(tasks[0])], n=1, max_new_tokens=4)


def test_loads_racing_in_threads_keep_embeddings_tied_for_later_loads(tmp_path, policy):
    # transformers' from_pretrained patches process-global functions while loading; two
    # overlapping loads used to leave lm_head untied (meta/garbage) for the whole process
    from concurrent.futures import ThreadPoolExecutor

    policy.save(tmp_path / "m")
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(lambda _: Policy.load(tmp_path / "m"), range(4)))
    loaded.append(Policy.load(tmp_path / "m"))
    for p in loaded:
        head, emb = p.model.get_output_embeddings(), p.model.get_input_embeddings()
        assert head.weight.data_ptr() == emb.weight.data_ptr()


def test_token_ids_and_logprobs_have_equal_length(policy, tasks):
    out = policy.generate([P.task_prompt(t) for t in tasks[:4]], n=2, max_new_tokens=9)
    assert all(len(g.token_ids) == len(g.logprobs) <= 9 for row in out for g in row)


def test_prompt_longer_than_context_yields_a_context_finish(policy):
    gen = policy.generate([[5] * 300], n=1, max_new_tokens=4)[0][0]
    assert gen.finish_reason == "context" and gen.token_ids == []


def test_sft_examples_mask_nothing_but_keep_prompt_length(policy, tasks):
    ids, mask = sft_examples(policy, tasks[:1], 256)[0]
    n_prompt = mask.index(1)
    assert mask == [0] * n_prompt + [1] * (len(ids) - n_prompt)
    assert ids[:n_prompt] == policy.encode(P.task_prompt(tasks[0]))
    assert ids[-1] == policy.encode(P.END)[0]


def test_sft_lowers_the_completion_loss(tasks):
    pol = build_embedded(_params(), tasks)
    cfg = types.SimpleNamespace(
        steps=40, batch_size=8, lr=5e-3, warmup_steps=5, max_len=256, seed=0, revise_fraction=0.0
    )
    stats = run_sft(pol, tasks, cfg)
    assert stats["loss_last"] < 0.7 * stats["loss_first"]


def test_odd_head_count_is_refused_with_the_key_named(tasks):
    bad = Params(policy_init=PolicyInitConfig(n_embd=30, n_head=4, vocab_size=400))
    with pytest.raises(ValueError, match="policy_init.n_embd"):
        build_embedded(bad, tasks)


def test_torch_uses_one_thread_unless_codeloop_threads_says_otherwise(monkeypatch):
    from codeloop.policy.model import set_threads

    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("CODELOOP_THREADS", raising=False)
        assert set_threads() == 1 == torch.get_num_threads()
        monkeypatch.setenv("CODELOOP_THREADS", "2")
        assert set_threads() == 2 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
