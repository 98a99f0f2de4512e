"""Agent episodes on repository tasks, batched: one generate per turn, one env batch.

Each repository task gets ``cfg.samples_per_task`` episodes sharing one ``prompt_key``
(the GRPO group, always complete). An episode is up to ``agent.max_steps`` turns; in
each turn every live episode's model writes ONE tool call (one batched
``Policy.generate`` for all of them), the calls that parse go to the environment in one
``AgentEnv.step_many`` batch (codeloop.agent: a sealed private workspace per episode),
and each observation is appended for the next turn. ``run_mixed_rollout`` runs a chunk
holding both kinds: function tasks through ``codeloop.rollout.episodes.run_rollout``, repo
tasks here; the task's ``kind`` decides, rows come back in task order.

Token layout (what the GRPO trainer trains on, exactly as sampled):

    token_ids = prompt | call_1 | obs_1 | call_2 | obs_2 | ... | call_k
    loss_mask =   0... |  1...  |  0... |  1...  |  0... | ... |  1...

prompt/obs are the agent format's ids (codeloop.policy.agent_format: compact grammar for
the embedded model, the chat template's tool turns for chat models); call_i the sampled
ids including the stop token.

A turn that does not parse (AgentParseError, or a generation cut by the token cap: a
half-written edit must never be applied) goes to the env as ``{"parse_error": why}``:
an observation with error kind ``parse_error``, shown to the model like any tool error
and counted by the env. The env decides ``submitted``, ``max_steps`` (``agent.max_steps``
calls) and ``invalid_action_limit`` (``agent.invalid_call_limit`` malformed calls);
this loop adds ``context_full`` (no room for the next observation or call),
``infra_error`` (SandboxError: excluded from training), ``error`` with status
prompt_too_long. Each trajectory carries its actions (tool, args JSON, raw text,
observation, duration_ms), the workspace's ``final_diff`` (what score judges) and its
tool counts. Rewards are left for the score stage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from codeloop.policy.agent_format import AgentParseError, agent_format_for
from codeloop.rollout.episodes import (
    PROMPT_TOO_LONG,
    _sha,
    isolate_faults,
    prompt_key,
    sample_turn,
    sampling_metadata,
)
from codeloop.sandbox.base import SandboxError
from codeloop.schema import Action, Observation, Task, Trajectory

MIN_ROOM = 8  # tokens a next call needs at least; less left ends the episode context_full


@dataclass
class _AgentEpisode:
    task: Task
    sample: int
    ids: list[int]
    mask: list[int]
    logps: list[float]
    env_episode: object = None
    actions: list[Action] = field(default_factory=list)
    terminal: str = ""
    infra_error: str = ""
    exec_ms: float = 0.0
    final_diff: str = ""

    @property
    def done(self) -> bool:
        return bool(self.terminal)


def _parse(fmt, text: str, stopped: bool) -> dict:
    """The call in a turn, or ``{"parse_error": why}`` (the env records it as one)."""
    if not stopped:
        return {"parse_error": "the call was cut at the token limit before its end marker"}
    try:
        return fmt.parse(text)
    except AgentParseError as exc:
        return {"parse_error": str(exc)}


def _step_batch(env, pairs: list[tuple[object, dict]]) -> list[Observation | SandboxError]:
    """All calls of a turn in one env batch; a failed batch is retried one by one so only
    the faulty episode is marked infra_error."""
    if not pairs:
        return []
    return isolate_faults(env.step_many, lambda pair: pair[0].step(pair[1]), pairs)


def _generate(policy, live: list[_AgentEpisode], cfg, step: int, iteration: int):
    return sample_turn(policy, [e.ids for e in live], cfg, step, iteration,
                       cfg.agent_max_new_tokens)


def _turn(policy, fmt, env, live: list[_AgentEpisode], cfg, step: int, iteration: int) -> None:
    """One turn of every live episode: generate, parse, step the env, append observations."""
    gens = _generate(policy, live, cfg, step, iteration)
    pending: list[tuple[_AgentEpisode, dict]] = []
    for e, g in zip(live, gens, strict=True):
        e.ids += g.token_ids
        e.mask += [1] * len(g.token_ids)
        e.logps += list(g.logprobs)
        if g.finish_reason == "context":
            e.terminal = "context_full"
            continue
        call = _parse(fmt, g.text, g.finish_reason == "stop")
        act = Action(step=step, action_type="tool", content=g.text, raw=g.text)
        if "parse_error" not in call:
            act.tool = str(call["tool"])
            act.args = json.dumps(call.get("args") or {}, sort_keys=True)
        e.actions.append(act)
        pending.append((e, call))
    results = _step_batch(env, [(e.env_episode, c) for e, c in pending])
    for (e, _), obs in zip(pending, results, strict=True):
        if isinstance(obs, SandboxError):
            e.infra_error, e.terminal = f"SandboxError: {obs}", "infra_error"
            continue
        _record(e, fmt, obs, policy)


def _record(e: _AgentEpisode, fmt, obs: Observation, policy) -> None:
    """Store the observation; end the episode where the env says so (submitted,
    invalid_action_limit, max_steps) or where the context is full; else append its ids."""
    act = e.actions[-1]
    if not obs.status:  # a status on every action, as function episodes have
        obs.status = obs.error_kind or "ok"
    act.observation = obs
    act.duration_ms = float(obs.duration_ms)
    e.exec_ms += act.duration_ms
    if e.env_episode.done:
        e.terminal = e.env_episode.terminal_reason or "max_steps"
        return
    ids = fmt.observation_ids(e.task, obs, stopped=True)
    if len(e.ids) + len(ids) + MIN_ROOM > policy.max_context:
        e.terminal = "context_full"
        return
    e.ids += ids
    e.mask += [0] * len(ids)
    e.logps += [0.0] * len(ids)


def _start(env, task: Task, sample: int, prompt: list[int], context: int) -> _AgentEpisode:
    e = _AgentEpisode(task, sample, list(prompt), [0] * len(prompt), [0.0] * len(prompt))
    if len(prompt) + MIN_ROOM > context:
        msg = f"prompt of task {task.task_id} is {len(prompt)} tokens; the context is {context}"
        obs = Observation(status=PROMPT_TOO_LONG, stderr=msg)
        e.actions.append(Action(step=0, action_type="tool", content="", observation=obs))
        e.terminal = "error"
        return e
    try:
        e.env_episode = env.reset(task)
    except SandboxError as exc:
        e.infra_error, e.terminal = f"SandboxError: {exc}", "infra_error"
    return e


def _finish(e: _AgentEpisode) -> None:
    """The workspace's diff, then the workspace is destroyed (nothing outlives it)."""
    if e.env_episode is None:
        return
    try:
        if not e.infra_error:
            e.final_diff = e.env_episode.final_diff()
    except SandboxError as exc:
        e.infra_error, e.terminal = f"SandboxError: {exc}", "infra_error"
    finally:
        e.env_episode.close()


def run_agent_rollout(
    tasks: list[Task], policy, env, cfg, agent_cfg, *, dataset_version: str, iteration: int
) -> list[Trajectory]:
    """Agent episodes for repository `tasks`: samples_per_task each, grouped by task.

    env: a codeloop.agent.AgentEnv; cfg: RolloutConfig; agent_cfg: the agent params
    (max_steps, invalid_call_limit, test timeout).
    """
    fmt = agent_format_for(policy.tokenizer)
    episodes: list[_AgentEpisode] = []
    try:
        for task in tasks:
            prompt = fmt.prompt_ids(task)
            for j in range(cfg.samples_per_task):
                episodes.append(_start(env, task, j, prompt, policy.max_context))
        for step in range(agent_cfg.max_steps):
            live = [e for e in episodes if not e.done]
            if not live:
                break
            _turn(policy, fmt, env, live, cfg, step, iteration)
    finally:
        for e in episodes:
            _finish(e)
    meta = dict(dataset_version=dataset_version, iteration=iteration)
    return [_to_trajectory(e, policy, fmt, cfg, agent_cfg, **meta) for e in episodes]


def _to_trajectory(e, policy, fmt, cfg, agent_cfg, *, dataset_version, iteration) -> Trajectory:
    key = prompt_key(e.task, iteration, fmt)
    acts = [a for a in e.actions if a.action_type == "tool"]
    return Trajectory(
        trajectory_id=_sha(f"{key}|{cfg.seed}|{e.sample}|{policy.model_version}", 24),
        task_id=e.task.task_id,
        prompt_key=key,
        prompt=fmt.prompt(e.task),
        actions=e.actions,
        done=not e.infra_error,
        terminal_reason=e.terminal or "max_steps",
        iteration=iteration,
        metadata=sampling_metadata(
            policy,
            cfg,
            cfg.agent_max_new_tokens,
            env_timeout=float(getattr(agent_cfg, "test_timeout_s", 0.0) or 0.0),
            execution_time_ms=e.exec_ms,
            prompt_template_version=fmt.version,
            dataset_version=dataset_version,
        ),
        token_ids=list(e.ids),
        loss_mask=list(e.mask),
        sample_logprobs=[float(x) for x in e.logps],
        infra_error=e.infra_error,
        final_diff=e.final_diff,
        tool_calls=sum(1 for a in acts if a.observation.status != PROMPT_TOO_LONG),
        tool_errors=sum(1 for a in acts if a.observation.error_kind),
        tests_run=sum(1 for a in acts if a.tool == "run_tests" and not a.observation.error_kind),
    )


def run_mixed_rollout(
    tasks: list[Task],
    policy,
    executor,
    cfg,
    *,
    timeout_s: float,
    dataset_version: str,
    iteration: int,
    agent_cfg=None,
    repos_dir: str = "",
) -> list[Trajectory]:
    """Function tasks through run_rollout, repo tasks through agent episodes; task order."""
    from codeloop.rollout.episodes import run_rollout

    funcs = [t for t in tasks if t.kind != "repo"]
    repos = [t for t in tasks if t.kind == "repo"]
    rows: dict[str, list[Trajectory]] = {}
    if funcs:
        for tr in run_rollout(
            funcs, policy, executor, cfg, timeout_s=timeout_s,
            dataset_version=dataset_version, iteration=iteration,
        ):
            rows.setdefault(tr.task_id, []).append(tr)
    if repos:
        if agent_cfg is None or not repos_dir:
            raise ValueError("repository tasks need the agent params and a repos_dir")
        from codeloop.agent.env import AgentEnv

        env = AgentEnv(executor, agent_cfg, repos_dir)
        try:
            trajs = run_agent_rollout(
                repos, policy, env, cfg, agent_cfg,
                dataset_version=dataset_version, iteration=iteration,
            )
        finally:
            getattr(env, "close", lambda: None)()
        for tr in trajs:
            rows.setdefault(tr.task_id, []).append(tr)
    out: list[Trajectory] = []
    for t in tasks:
        out += rows.pop(t.task_id, [])
    return out


def agent_envs_root(tasks: list[Task], clean_envs: str, scratch: str) -> str:
    """The envs root agent stages mount: ``scratch`` (pytest and our plugins are built
    there from the venv), with each task's own environment dir copied in once from the
    clean stage's ``clean_envs`` (FileNotFoundError naming the task when it is missing)."""
    import os
    import shutil

    os.makedirs(scratch, exist_ok=True)
    os.chmod(scratch, 0o755)
    for t in tasks:
        if t.kind != "repo" or not t.environment:
            continue
        dest = os.path.join(scratch, t.environment)
        if os.path.isdir(dest):
            continue
        src = os.path.join(clean_envs, t.environment)
        if not os.path.isdir(src):
            raise FileNotFoundError(f"task {t.task_id}: environment {src} does not exist")
        tmp = dest + f".tmp{os.getpid()}"
        shutil.copytree(src, tmp, symlinks=False)
        os.replace(tmp, dest)  # whole or absent: a killed copy never passes for a built env
    return scratch
