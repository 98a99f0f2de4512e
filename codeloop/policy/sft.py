"""SFT warm-start: teach the base policy the answer format on reference solutions.

Each example is the first-turn prompt of the policy's format (`codeloop.policy.formats`:
the compact markers, the chat template or a completion prompt) followed by the reference
solution and the format's end of turn; the loss is on the completion tokens only, so the model
learns to answer, not to write prompts. Without this the embedded tiny model never
passes a test and every GRPO group ties at reward 0 (no gradient).

Revise examples (``sft.revise_fraction`` of the tasks, generated tasks only): the prompt,
a plausible wrong program (`generator.wrong_solution`), the feedback the rollout would
show for it (`prompts.feedback_text`: status, failing visible test, got) and then the
reference; loss on the reference only. Without them the model has never seen text after
<|revise|> and the multi-turn fix essentially never succeeds. Token ids are the
concatenation of separately encoded pieces, exactly as `codeloop.rollout.loop` builds them.

Agent demonstrations (``sft.agent_fraction``): expert episodes on repository tasks,
played through the real environment (codeloop.rollout.demos), rendered in the agent
format the rollout uses (`codeloop.policy.agent_format`): prompt | call_1 | obs_1 | ... |
call_k with the loss on the calls only (observations are the environment's words).
They make up ``agent_fraction`` of the examples (repeated when there are few).
"""

from __future__ import annotations

import math
import random
import time

import torch

from codeloop.data.generator import wrong_solution
from codeloop.policy.model import Policy, set_threads
from codeloop.sandbox.values import short_repr
from codeloop.schema import Task

GROUP_BATCHES = 8  # batches per length-sorted window (see length_grouped_batches)


def sft_examples(
    policy: Policy, tasks: list[Task], max_len: int, revise_fraction: float = 0.0, seed: int = 0,
    mode: str = "self_debug",
) -> list[tuple[list[int], list[int]]]:
    """(token ids, loss mask) per example that fits max_len, in the layout of ``mode``.

    One first-turn example per task with a reference solution, plus a revise example for
    about ``revise_fraction`` of the generated tasks (see the module docstring). tdd
    examples first write the task's visible asserts, then the code; rubber_duck revise
    examples explain the failure (a templated explanation naming the failing test and
    the value returned) before the fix.
    """
    rng = random.Random(f"sft-revise:{seed}")
    out = []
    for t in tasks:
        if not t.reference_solution.strip():
            continue
        fmt = policy.format  # compact (embedded), chat (template) or base
        ids, mask = _opening(fmt, t, mode)
        answer = fmt.answer_ids(t, t.reference_solution)
        candidates = [(ids + answer, mask + [1] * len(answer))]
        wrong = wrong_solution(t, rng) if rng.random() < revise_fraction else None
        if wrong is not None:
            candidates.append(_revise_example(fmt, t, wrong, ids, mask, answer, mode))
        out += [(i, m) for i, m in candidates if len(i) <= max_len]
    return out


def _opening(fmt, t: Task, mode: str) -> tuple[list[int], list[int]]:
    """(ids, loss mask) of a first turn up to where the code starts."""
    if mode != "tdd":
        ids = fmt.prompt_ids(t)
        return ids, [0] * len(ids)
    prompt = fmt.encode(fmt.tests_prompt(t))
    asserts = "".join(a.strip() + "\n" for a in t.visible_tests if a.startswith("assert "))
    tests, cue = fmt.tests_answer_ids(t, asserts), fmt.code_ids(t)
    return prompt + tests + cue, [0] * len(prompt) + [1] * len(tests) + [0] * len(cue)


def _revise_example(fmt, t: Task, wrong, ids, mask, answer, mode: str):
    """A wrong program, the feedback it gets, (rubber_duck: an explanation,) the fix."""
    code, test, value = wrong
    feedback = {"status": "failed", "failing_test": test, "got": short_repr(value)}
    shown = fmt.answer_ids(t, code)
    ids, mask = ids + shown, mask + [0] * len(shown)
    if mode == "rubber_duck":
        cue = fmt.explain_ids(t, feedback)
        why = fmt.explanation_ids(t, explanation(test, short_repr(value)))
        fix = fmt.fix_ids(t)
        ids = ids + cue + why + fix
        mask = mask + [0] * len(cue) + [1] * len(why) + [0] * len(fix)
    else:
        fb = fmt.feedback_ids(t, feedback)
        ids, mask = ids + fb, mask + [0] * len(fb)
    return ids + answer, mask + [1] * len(answer)


def explanation(test: str, got: str) -> str:
    """The explanation a rubber_duck demo teaches: the failing test, the value, the culprit."""
    return (f"The test {test} fails: the code returns {got}, not the expected value, so the "
            "line that computes the result is wrong.")


def agent_examples(
    policy: Policy, demos: list, max_len: int, mode: str = "self_debug"
) -> list[tuple[list[int], list[int]]]:
    """(token ids, loss mask) per demonstration episode that fits max_len.

    demos: (task, [(call, Observation), ...]) pairs; the ids are built piece by piece in
    the agent format, as `codeloop.rollout.repo_env` builds a rollout's. A call
    marked ``"slip"`` (the expert's deliberate wrong edit) is context, never a target.
    rubber_duck: a failing run_tests is followed by a templated explanation (a target).
    """
    from codeloop.policy.agent_format import agent_format_for

    fmt = agent_format_for(policy.tokenizer)
    out = []
    for task, steps in demos:
        ids = fmt.encode(fmt.tdd_prompt(task) if mode == "tdd" else fmt.prompt(task))
        mask = [0] * len(ids)
        for k, (call, obs) in enumerate(steps):
            c = fmt.call_ids(task, call)
            ids, mask = ids + c, mask + [int(not call.get("slip"))] * len(c)
            if k + 1 < len(steps):  # nothing follows the last call (submit)
                i, m = _after_call(fmt, task, call, obs, mode)
                ids, mask = ids + i, mask + m
        if steps and len(ids) <= max_len:
            out.append((ids, mask))
    return out


def _after_call(fmt, task: Task, call: dict, obs, mode: str) -> tuple[list[int], list[int]]:
    """(ids, loss mask) between a demo's call and its next one."""
    failed = (call.get("tool") == "run_tests" and not obs.error_kind
              and obs.tests_passed < obs.tests_total)
    if mode != "rubber_duck" or not failed:
        o = fmt.observation_ids(task, obs)
        return o, [0] * len(o)
    cue, nxt = fmt.explain_observation_ids(task, obs), fmt.next_call_ids(task)
    why = fmt.explanation_ids(task, agent_explanation(obs.failing_test))
    return cue + why + nxt, [0] * len(cue) + [1] * len(why) + [0] * len(nxt)


def agent_explanation(failing_test: str) -> str:
    """The explanation an agent rubber_duck demo teaches after a failing test run."""
    test = failing_test or "a visible test"
    return (f"{test} fails, so the code it calls returns the wrong value; read that code "
            "and fix the line that computes it.")


def mix_examples(func: list, agent: list, fraction: float, rng: random.Random) -> list:
    """func + agent examples with agent ones about ``fraction`` of the whole (cycled)."""
    if not agent or fraction <= 0:
        return list(func)
    if not func:
        return list(agent)
    want = max(1, round(fraction * len(func) / (1 - fraction)))
    # Fewer slots than demos: a seeded draw over all of them, not the first ones (demos come
    # ordered by repository, so the first 24 of 60 were 8 repositories' episodes only).
    picked = (
        rng.sample(agent, want)
        if want < len(agent)
        else [agent[i % len(agent)] for i in range(want)]
    )
    rng.shuffle(picked)
    return list(func) + picked


def _as_mask(example) -> tuple[list[int], list[int]]:
    ids, ctx = example
    return (ids, list(ctx)) if isinstance(ctx, list) else (ids, [0] * ctx + [1] * (len(ids) - ctx))


def pad_batch(examples: list, pad: int):
    """Right-padded (B, T) input ids, attention mask and labels (-100 off the loss).

    An example is (ids, context length) — loss on ids[context:] — or (ids, loss mask).
    """
    rows = [_as_mask(e) for e in examples]
    longest = max(len(ids) for ids, _ in rows)
    inp, att, lab = [], [], []
    for ids, mask in rows:
        fill = longest - len(ids)
        inp.append(ids + [pad] * fill)
        att.append([1] * len(ids) + [0] * fill)
        lab.append([t if m else -100 for t, m in zip(ids, mask, strict=True)] + [-100] * fill)
    return torch.tensor(inp), torch.tensor(att), torch.tensor(lab)


def length_grouped_batches(
    lengths: list[int], batch_size: int, rng: random.Random
) -> list[list[int]]:
    """One epoch of shuffled batches whose examples have similar lengths.

    Why: a revise example is about twice as long as a first-turn one, and a right-padded
    batch costs its longest row times its size; random batches carry far more padding than
    real tokens need. Shuffled windows of ``GROUP_BATCHES`` batches are sorted by length before
    cutting, so batches stay random in content and order but pad little.
    """
    order = rng.sample(range(len(lengths)), len(lengths))
    window = batch_size * GROUP_BATCHES
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lengths.__getitem__)
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def lr_schedule(cfg):
    """Multiplier of cfg.lr at each step: linear warmup, then cosine to ``lr_floor``.

    ``lr_floor`` (getattr default 0.1, the schedule before it was a param) is the
    multiplier the cosine ends at on the last step.
    """
    floor = getattr(cfg, "lr_floor", 0.1)

    def lr_at(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac))

    return lr_at


class WeightEMA:
    """Exponential moving average of a model's parameters: shadow <- d*shadow + (1-d)*w.

    Why an option: at a high learning rate the last step's weights are one noisy draw
    around the optimum and the average over the last ~1/(1-d) steps is nearer its centre.
    On the embedded default it did not steady held-out pass@1 (bench/sft_stability.py,
    metrics/sft_stability.jsonl: its spread matched the last weights'): the runs differ
    in how far they got, not in last-step noise.
    """

    def __init__(self, model: torch.nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"ema decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.shadow = [p.detach().clone() for p in model.parameters()]

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        """Move the average one step towards the model's current weights."""
        params = [p.detach() for p in model.parameters()]
        torch._foreach_lerp_(self.shadow, params, 1.0 - self.decay)

    @torch.no_grad()
    def copy_to(self, model: torch.nn.Module) -> None:
        """Load the averaged weights into ``model`` (the same architecture)."""
        for p, s in zip(model.parameters(), self.shadow, strict=True):
            p.copy_(s)


def run_sft(
    policy: Policy, tasks: list[Task], cfg, demos: list | None = None, on_step=None,
    mode: str = "self_debug", agent_mode: str = "self_debug",
) -> dict:
    """Train `policy` in place on reference solutions (and agent demos); returns stats.

    cfg: codeloop.config.SftConfig (steps, batch_size, lr, warmup_steps, lr_floor, ema,
    revise_fraction, agent_fraction, seed). demos: expert agent episodes (see
    `agent_examples`). Linear warmup then cosine decay to ``lr_floor`` x lr; AdamW;
    grad-norm clip 1.0. With ``ema`` > 0 the policy ends with the exponential moving
    average of its weights (`WeightEMA`) instead of the last step's. mode / agent_mode:
    the rollout's episode modes, whose layouts the examples take. on_step(step, model,
    loss), when given, is called after every optimizer step (bench/sft_stability.py keeps its own
    averages there).
    """
    set_threads()
    stats = {"steps": cfg.steps, "examples": 0, "loss_first": None, "loss_last": None}
    if cfg.steps == 0:
        return stats
    max_len = min(policy.max_context, cfg.max_len)
    # getattr: callers may pass a plain namespace without the newer field.
    revise = getattr(cfg, "revise_fraction", 0.0)
    examples = sft_examples(policy, tasks, max_len, revise, cfg.seed, mode)
    n_func = len(examples)
    stats["revise_examples"] = n_func - len(sft_examples(policy, tasks, max_len, mode=mode))
    rng = random.Random(cfg.seed)
    agent = agent_examples(policy, demos or [], max_len, agent_mode)
    examples = mix_examples(examples, agent, getattr(cfg, "agent_fraction", 0.0), rng)
    if not examples:
        raise ValueError("sft: no task has a reference solution that fits sft.max_len")
    stats["examples"] = len(examples)
    stats["agent_demos"], stats["agent_examples"] = len(agent), len(examples) - n_func
    torch.manual_seed(cfg.seed)
    model = policy.model
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(cfg))
    # getattr: a plain namespace without the newer field trains as before (no average).
    decay = getattr(cfg, "ema", 0.0)
    ema = WeightEMA(model, decay) if decay > 0 else None
    lengths = [len(ids) for ids, _ in examples]
    batches: list[list[int]] = []
    losses: list[float] = []
    t0 = time.perf_counter()
    for _step in range(cfg.steps):
        if not batches:  # epoch boundary: reshuffle
            batches = length_grouped_batches(lengths, cfg.batch_size, rng)
        picked = batches.pop()
        inp, att, lab = pad_batch([examples[i] for i in picked], policy.tokenizer.pad_token_id)
        dev = policy.device  # policy.device, as the stage loaded it
        loss = model(input_ids=inp.to(dev), attention_mask=att.to(dev), labels=lab.to(dev)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if ema is not None:
            ema.update(model)
        if on_step is not None:
            on_step(_step, model, losses[-1])
    if ema is not None:
        ema.copy_to(model)
        stats["ema"] = decay
    model.eval()
    tail = losses[-10:]
    stats.update(
        loss_first=losses[0],
        loss_last=sum(tail) / len(tail),
        seconds=time.perf_counter() - t0,
        epochs=cfg.steps * cfg.batch_size / len(examples),
    )
    return stats
