"""The episode loop: one batched loop that drives any environment, and one trajectory builder.

Every task gets ``rollout.samples_per_task`` episodes sharing one ``prompt_key`` (the
GRPO group; always complete: timeouts, unparseable turns and infra failures are rows
too). A turn of the loop is the same for every kind of episode:

    generate one continuation for every live episode (one batched ``Policy.generate``)
    -> the env reads each (``act``: the code to run, the tool call to make, or nothing
       for a turn that needs no sandbox, such as an explanation)
    -> all of the turn's work in one sandbox batch (``run_batch``; a failed batch is
       retried item by item so only the faulty episode is marked infra_error)
    -> the env records each result and appends the next observation's ids (``observe``)

With an inference engine (``policy.engine: vllm``) and ``rollout.async_turns`` the same
steps run per episode instead of per turn (``run_async``): each episode's next turn is
submitted as soon as its observation is back, so a short episode never waits for the
slowest of its batch, and the engine batches whatever is in flight.

Token layout of a trajectory (what the GRPO trainer trains on, exactly as sampled):

    token_ids       = prompt | gen_1 | obs_1 | gen_2 | obs_2 | ... | gen_k
    loss_mask       =   0... |  1... |  0... |  1... |  0... | ... |  1...
    sample_logprobs =   0... | lp... |  0... | lp... |  0... | ... | lp...

The next turn is generated from exactly the concatenated ids, never from re-tokenised
text, so the trainer's sequence is the sampler's. lp are log_softmax(logits /
temperature) of the sampled tokens (an engine's: codeloop.policy.engine). Rewards are not computed here: ``reward``,
``reward_components`` and ``metadata.reward_fn_version`` are left for the score stage.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from codeloop.policy.engine import SamplingSpec, episode_seed, is_engine
from codeloop.rollout.context import EpisodeContext
from codeloop.sandbox.base import SandboxError
from codeloop.sandbox.faults import isolate_faults
from codeloop.schema import (
    PROMPT_TOO_LONG,
    Action,
    Observation,
    Task,
    Trajectory,
    TrajectoryMetadata,
)

if TYPE_CHECKING:
    from codeloop.policy.model import Policy


@dataclass
class Episode:
    """One episode's growing token sequence, its actions and how it ended."""

    task: Task
    sample: int
    ids: list[int]
    mask: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    terminal: str = ""
    infra_error: str = ""
    exec_ms: float = 0.0
    stopped: bool = True  # the last generation ended on a stop token (not the length cap)
    phase: str = ""  # the env's own step of the episode (a mode's explain/tests turn)
    state: object = None  # the env's own per-episode object (an agent workspace episode)
    kept: dict = field(default_factory=dict)  # what the env keeps for the row (a final diff)

    def __post_init__(self) -> None:
        self.ids = list(self.ids)
        self.mask = self.mask or [0] * len(self.ids)
        self.logps = self.logps or [0.0] * len(self.ids)

    @property
    def done(self) -> bool:
        return bool(self.terminal)

    def add_generated(self, ids: list[int], logps: list[float]) -> None:
        self.ids += ids
        self.mask += [1] * len(ids)
        self.logps += list(logps)

    def add_context(self, ids: list[int]) -> None:
        """Ids the model reads but never wrote (feedback, observations, cues)."""
        self.ids += ids
        self.mask += [0] * len(ids)
        self.logps += [0.0] * len(ids)

    def fail(self, exc: SandboxError) -> None:
        self.infra_error, self.terminal = f"SandboxError: {exc}", "infra_error"

    def too_long(self, context: int, action_type: str) -> None:
        """A prompt with no room to answer: a per-task error row, never a truncated task."""
        msg = f"prompt of task {self.task.task_id} is {len(self.ids)} tokens; the context is {context}"
        obs = Observation(status=PROMPT_TOO_LONG, stderr=msg)
        self.actions.append(Action(step=0, action_type=action_type, content="", observation=obs))
        self.terminal = "error"


class Env(Protocol):
    """One kind of episode. ``version`` names the prompt template (and mode) it shows."""

    mode: str
    version: str
    max_turns: int
    max_new_tokens: int
    env_timeout: float

    def prompt(self, task: Task) -> str: ...

    def reset(self, task: Task, sample: int) -> Episode: ...

    def act(self, e: Episode, gen, step: int) -> object | None: ...

    def run_batch(self, items: list) -> list: ...

    def run_one(self, item: object) -> object: ...

    def observe(self, e: Episode, result: object, last_turn: bool) -> None: ...

    def finish(self, e: Episode) -> None: ...

    def fields(self, e: Episode) -> dict: ...

    def close(self) -> None: ...


def sha(text: str, n: int = 16) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def group_key(task: Task, iteration: int, prompt: str, version: str) -> str:
    """GRPO group key: one per (task, prompt text and template, iteration)."""
    return f"{task.task_id}#{sha(prompt + version, 8)}@{iteration}"


def turn_seed(ctx: EpisodeContext, step: int) -> int:
    """The rollout's seed stream: one seed per (rollout seed, iteration, turn)."""
    return ctx.rollout.seed * 1_000_003 + ctx.iteration * 7_919 + step


def spec_of(ctx: EpisodeContext, max_new_tokens: int) -> SamplingSpec:
    cfg = ctx.rollout
    return SamplingSpec(cfg.temperature, cfg.top_p, cfg.repetition_penalty, max_new_tokens)


def sample_turn(policy: Policy, live: list[Episode], ctx: EpisodeContext, step: int,
                max_new_tokens: int) -> list:
    """One batched generation (one sample each) with the rollout's per-turn seed. hf seeds
    a row by its prompt and rank in the batch; an engine by the episode itself."""
    seed = turn_seed(ctx, step)
    if is_engine(policy):
        seeds = [episode_seed(seed, e.task.task_id, e.sample) for e in live]
        return policy.sample_rows([e.ids for e in live], seeds, spec_of(ctx, max_new_tokens))
    cfg = ctx.rollout
    gens = policy.generate(
        [e.ids for e in live],
        n=1,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        repetition_penalty=cfg.repetition_penalty,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=cfg.batch_size,
    )
    return [g for (g,) in gens]


def run_loop(
    env: Env, tasks: list[Task], policy: Policy, ctx: EpisodeContext
) -> list[Trajectory]:
    """Episodes of ``env`` for ``tasks``: samples_per_task each, grouped by task in order.
    With an engine and ``rollout.async_turns`` each episode advances on its own
    (``run_async``); otherwise every live episode takes its turn together."""
    episodes: list[Episode] = []
    try:
        for task in tasks:
            for j in range(ctx.rollout.samples_per_task):
                episodes.append(env.reset(task, j))
        if is_engine(policy) and ctx.rollout.async_turns:
            run_async(env, episodes, policy, ctx)
        else:
            for step in range(env.max_turns):
                live = [e for e in episodes if not e.done]
                if not live:
                    break
                _turn(env, policy, ctx, live, step, last_turn=step == env.max_turns - 1)
    finally:
        for e in episodes:
            env.finish(e)
    return [build_trajectory(e, env, policy, ctx) for e in episodes]


def _turn(env: Env, policy: Policy, ctx: EpisodeContext, live: list[Episode], step: int,
          last_turn: bool) -> None:
    gens = sample_turn(policy, live, ctx, step, env.max_new_tokens)
    pending: list[tuple[Episode, object]] = []
    for e, g in zip(live, gens, strict=True):
        e.add_generated(g.token_ids, g.logprobs)
        item = env.act(e, g, step)
        if item is not None:
            pending.append((e, item))
    items = [item for _, item in pending]
    results = isolate_faults(env.run_batch, env.run_one, items) if items else []
    for (e, _), res in zip(pending, results, strict=True):
        if isinstance(res, SandboxError):
            e.fail(res)
        else:
            env.observe(e, res, last_turn)


def run_async(env: Env, episodes: list[Episode], policy: Policy, ctx: EpisodeContext) -> None:
    """Every episode on its own clock: its next turn goes to the engine as soon as its
    observation is back, its sandbox work to a worker as soon as its turn is generated.
    An episode's turn k is what lock-step makes it (the same seed, act and observe with
    last_turn at k = max_turns - 1); only the order in which episodes advance differs."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    spec = spec_of(ctx, env.max_new_tokens)
    turns = {id(e): 0 for e in episodes}
    inflight: dict = {}  # future -> (episode, "gen" | "env")

    def generate(e: Episode) -> None:
        if e.done or turns[id(e)] >= env.max_turns:
            return
        seed = episode_seed(turn_seed(ctx, turns[id(e)]), e.task.task_id, e.sample)
        inflight[policy.submit(e.ids, seed, spec)] = (e, "gen")

    with ThreadPoolExecutor(min(64, max(1, len(episodes))), "episode-env") as pool:
        for e in episodes:
            generate(e)
        while inflight:
            finished, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            for fut in finished:
                e, what = inflight.pop(fut)
                step = turns[id(e)]
                if what == "gen":
                    g = fut.result()  # an engine failure is ours: it raises
                    e.add_generated(g.token_ids, g.logprobs)
                    item = env.act(e, g, step)
                    if item is not None:
                        inflight[pool.submit(env.run_one, item)] = (e, "env")
                        continue
                else:
                    exc = fut.exception()
                    if isinstance(exc, SandboxError):
                        e.fail(exc)
                    elif exc is not None:
                        raise exc
                    else:
                        env.observe(e, fut.result(), step == env.max_turns - 1)
                turns[id(e)] += 1
                generate(e)


def build_trajectory(e: Episode, env: Env, policy: Policy, ctx: EpisodeContext) -> Trajectory:
    """The row of one episode: ids, actions, how it ended, and what sampled it."""
    prompt = env.prompt(e.task)
    key = group_key(e.task, ctx.iteration, prompt, env.version)
    cfg = ctx.rollout
    meta = TrajectoryMetadata(
        model_name=policy.name, model_version=policy.model_version,
        temperature=cfg.temperature, top_p=cfg.top_p,
        repetition_penalty=cfg.repetition_penalty, max_new_tokens=env.max_new_tokens,
        reward_fn_version="", seed=cfg.seed, env_timeout=float(env.env_timeout),
        execution_time_ms=e.exec_ms, prompt_template_version=env.version,
        dataset_version=ctx.dataset_version,
        episode_mode="" if env.mode == "self_debug" else env.mode,
        tests_version=str(e.task.metadata.get("tests_version", "")),
        visible_subset=ctx.visible_subset,
        engine=getattr(policy, "engine_kind", "hf"),
    )
    return Trajectory(
        trajectory_id=sha(f"{key}|{cfg.seed}|{e.sample}|{policy.model_version}", 24),
        task_id=e.task.task_id,
        prompt_key=key,
        prompt=prompt,
        actions=e.actions,
        done=not e.infra_error,
        terminal_reason=e.terminal or "max_steps",
        iteration=ctx.iteration,
        metadata=meta,
        token_ids=list(e.ids),
        loss_mask=list(e.mask),
        sample_logprobs=[float(x) for x in e.logps],
        infra_error=e.infra_error,
        **env.fields(e),
    )
