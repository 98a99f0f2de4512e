"""Rollout: sample GRPO groups of multi-turn self-debugging episodes on a set of tasks.

Each task gets `cfg.samples_per_task` episodes sharing one ``prompt_key`` (the GRPO
group; the group is always complete: timeouts, no-code answers and infra failures are
rows too). An episode is up to `cfg.max_steps` turns. Turn 1 generates code for the
task prompt; the code runs against the task's VISIBLE tests only (hidden tests never
reach the model or its feedback); on failure the model sees the status, the failing
test, the value its code returned and the error, and revises (turn 2, ...). All
episodes' generations of one turn are one batched `Policy.generate` call and all their
runs one `executor.run_many` call.

Token layout of a trajectory (what the GRPO trainer trains on, exactly as sampled):

    token_ids       = prompt | gen_1 | feedback_1 | gen_2 | feedback_2 | ... | gen_k
    loss_mask       =   0... |  1... |   0...     |  1... |   0...     | ... |  1...
    sample_logprobs =   0... | lp... |   0...     | lp... |   0...     | ... | lp...

prompt = the policy format's first-turn ids (`codeloop.policy.formats`: for the embedded
model `prompts.task_prompt(task)`, ending with <|code|>; for a chat model the template's
system + user turns and its assistant generation prompt); gen_i are the sampled ids
including the stop token (end marker / end of turn) when the model stopped by itself;
feedback_i = the format's feedback ids (compact: `prompts.feedback_text(...)`, ending with
<|revise|>; chat: the template's next user turn and generation prompt). Turn i+1 is generated from
exactly the concatenated ids, never from re-tokenised text, so the trainer's sequence is
the sampler's. lp are log_softmax(logits / temperature) of the sampled tokens (see
codeloop.policy.model). Rewards are not computed here: `reward`, `reward_components` and
`metadata.reward_fn_version` are left for the score stage.

Terminal reasons: all_tests_passed; no_code (nothing code-like extracted); timeout (the
last run hit the deadline); max_steps (still failing after the last turn, or no room
left in the context window); infra_error (SandboxError: excluded from training); error
with observation status prompt_too_long (the task's prompt alone fills the context: a
counted per-task error, excluded from training, never a truncated prompt).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from codeloop.policy import prompts as P
from codeloop.sandbox.base import ExecJob, ExecResult, SandboxError
from codeloop.schema import Action, Observation, Task, Trajectory, TrajectoryMetadata

PROMPT_TOO_LONG = "prompt_too_long"  # observation status of a task whose prompt overflows


def is_prompt_too_long(t: Trajectory) -> bool:
    """True for the error rows of tasks whose prompt did not fit the context."""
    return bool(t.actions) and t.actions[0].observation.status == PROMPT_TOO_LONG


@dataclass
class _Episode:
    task: Task
    sample: int
    ids: list[int]
    mask: list[int]
    logps: list[float]
    actions: list[Action] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    terminal: str = ""
    infra_error: str = ""
    exec_ms: float = 0.0
    stopped: bool = True  # the last generation ended on a stop token (not the length cap)

    @property
    def done(self) -> bool:
        return bool(self.terminal)


def _sha(text: str, n: int = 16) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def prompt_key(task: Task, iteration: int, fmt=None) -> str:
    """GRPO group key: one per (task, prompt text, iteration); fmt None = compact."""
    text, version = (fmt.prompt(task), fmt.version) if fmt else (P.task_prompt(task), "")
    return f"{task.task_id}#{_sha(text + (version or P.PROMPT_TEMPLATE_VERSION), 8)}@{iteration}"


def observation_from(res: ExecResult) -> Observation:
    return Observation(
        stdout=res.stdout,
        stderr=res.stderr,
        status=res.status,
        failing_test=res.failing_test,
        duration_ms=float(res.duration_ms),
        tests_passed=int(res.tests_passed),
        tests_total=int(res.tests_total),
    )


def feedback_fields(res: ExecResult) -> dict:
    """What a failed run on visible tests shows the model: status, test, got, error."""
    failing = next((t for t in res.test_results if not t.passed), None)
    got = failing.got if failing else ""
    error = ""
    err_type = res.error_type or (failing.error_type if failing else "")
    err_msg = res.error_message or (failing.message if failing else "")
    if err_type or err_msg:
        error = f"{err_type}: {err_msg}".strip(": ")
    test = res.failing_test or (failing.test if failing else "")
    return {
        "status": res.status,
        "failing_test": test,
        "got": got,
        "error": error,
        "stderr": res.stderr,
    }


def feedback_for(res: ExecResult, prefix: str = "") -> str:
    """Feedback text (compact format) from a failed run on visible tests."""
    return P.feedback_text(**feedback_fields(res), prefix=prefix)


def isolate_faults(batch, one, items: list) -> list:
    """``batch(items)`` at once; if that raises SandboxError, ``one(item)`` for each, so
    only the faulty item(s) carry the error (in their place, as the exception)."""
    try:
        return list(batch(items))
    except SandboxError:
        out = []
        for item in items:
            try:
                out.append(one(item))
            except SandboxError as exc:
                out.append(exc)
        return out


def _run_jobs(executor, jobs: list[ExecJob]) -> list[ExecResult | SandboxError]:
    """All jobs of a turn at once; if the batch call fails, isolate the failing job(s)."""
    return isolate_faults(executor.run_many, executor.run, jobs)


def sample_turn(policy, id_lists: list[list[int]], cfg, step: int, iteration: int,
                max_new_tokens: int) -> list:
    """One batched generation (one sample each) with the rollout's per-turn seed."""
    seed = cfg.seed * 1_000_003 + iteration * 7_919 + step
    gens = policy.generate(
        id_lists,
        n=1,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        repetition_penalty=cfg.repetition_penalty,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=cfg.batch_size,
    )
    return [g for (g,) in gens]


def sampling_metadata(policy, cfg, max_new_tokens: int, **rest) -> TrajectoryMetadata:
    """The sampler's settings every trajectory records (rest: the episode's own fields)."""
    return TrajectoryMetadata(
        model_name=policy.name, model_version=policy.model_version,
        temperature=cfg.temperature, top_p=cfg.top_p,
        repetition_penalty=cfg.repetition_penalty, max_new_tokens=max_new_tokens,
        reward_fn_version="", seed=cfg.seed, **rest,
    )


def _generate_turn(policy, active: list[_Episode], cfg, step: int, iteration: int) -> None:
    """One batched generation for every active episode; appends tokens and actions."""
    gens = sample_turn(policy, [e.ids for e in active], cfg, step, iteration, cfg.max_new_tokens)
    for e, g in zip(active, gens, strict=True):
        e.ids += g.token_ids
        e.mask += [1] * len(g.token_ids)
        e.logps += list(g.logprobs)
        code = policy.format.extract(e.task, g.text)
        e.stopped = g.finish_reason == "stop"
        e.actions.append(
            Action(step=step, action_type="generate" if step == 0 else "revise", content=g.text)
        )
        e.codes.append(code)
        if g.finish_reason == "context":
            e.terminal = "max_steps"  # no room left to answer in the context window
        elif not code.strip():
            e.actions[-1].observation = Observation(status="no_code")
            e.terminal = "no_code"


def _judge_turn(policy, executor, active, timeout_s: float, last_turn: bool) -> None:
    """Run this turn's code on visible tests; end passed episodes, feed back the rest."""
    todo = [e for e in active if not e.done]
    jobs = [
        ExecJob(
            code=e.codes[-1],
            tests=list(e.task.visible_tests),
            setup_code=e.task.setup_code,
            io_style=e.task.io_style,
            entry_point=e.task.entry_point,
            timeout_s=timeout_s,
        )
        for e in todo
    ]
    results = _run_jobs(executor, jobs) if jobs else []
    for e, res in zip(todo, results, strict=True):
        if isinstance(res, SandboxError):
            e.infra_error = f"SandboxError: {res}"
            e.terminal = "infra_error"
            continue
        e.actions[-1].observation = observation_from(res)
        e.exec_ms += float(res.duration_ms)
        if res.passed:
            e.terminal = "all_tests_passed"
        elif last_turn:
            e.terminal = "timeout" if res.status == "timeout" else "max_steps"
        else:
            fb = policy.format.feedback_ids(e.task, feedback_fields(res), stopped=e.stopped)
            e.ids += fb
            e.mask += [0] * len(fb)
            e.logps += [0.0] * len(fb)


def _to_trajectory(
    e: _Episode, policy, cfg, *, timeout_s, dataset_version, iteration
) -> Trajectory:
    fmt = policy.format
    key = prompt_key(e.task, iteration, fmt)
    codes = [c for c in e.codes if c.strip()]
    return Trajectory(
        trajectory_id=_sha(f"{key}|{cfg.seed}|{e.sample}|{policy.model_version}", 24),
        task_id=e.task.task_id,
        prompt_key=key,
        prompt=fmt.prompt(e.task),
        initial_code=codes[0] if codes else "",
        actions=e.actions,
        final_code=codes[-1] if codes else "",
        done=not e.infra_error,
        terminal_reason=e.terminal or "max_steps",
        iteration=iteration,
        metadata=sampling_metadata(
            policy,
            cfg,
            cfg.max_new_tokens,
            env_timeout=float(timeout_s),
            execution_time_ms=e.exec_ms,  # sandbox time of all runs of the episode
            prompt_template_version=fmt.version,
            dataset_version=dataset_version,
        ),
        token_ids=list(e.ids),
        loss_mask=list(e.mask),
        sample_logprobs=[float(x) for x in e.logps],
        infra_error=e.infra_error,
    )


def run_rollout(
    tasks: list[Task],
    policy,
    executor,
    cfg,
    *,
    timeout_s: float,
    dataset_version: str,
    iteration: int,
) -> list[Trajectory]:
    """Episodes for `tasks` (any chunk of them; safe to fan out): samples_per_task each.

    cfg needs samples_per_task, max_steps, temperature, top_p, repetition_penalty,
    max_new_tokens, batch_size and seed (codeloop.config.RolloutConfig). Rows come out
    grouped by task, in task order.
    """
    episodes: list[_Episode] = []
    for task in tasks:
        ids = policy.format.prompt_ids(task)
        for j in range(cfg.samples_per_task):
            episodes.append(_Episode(task, j, list(ids), [0] * len(ids), [0.0] * len(ids)))
            if len(ids) >= policy.max_context:
                _too_long(episodes[-1], policy.max_context)
    for step in range(cfg.max_steps):
        active = [e for e in episodes if not e.done]
        if not active:
            break
        _generate_turn(policy, active, cfg, step, iteration)
        _judge_turn(policy, executor, active, timeout_s, last_turn=step == cfg.max_steps - 1)
    return [
        _to_trajectory(
            e,
            policy,
            cfg,
            timeout_s=timeout_s,
            dataset_version=dataset_version,
            iteration=iteration,
        )
        for e in episodes
    ]


def _too_long(e: _Episode, context: int) -> None:
    """A prompt with no room to answer: a per-task error row, never a truncated task."""
    msg = f"prompt of task {e.task.task_id} is {len(e.ids)} tokens; the context is {context}"
    obs = Observation(status=PROMPT_TOO_LONG, stderr=msg)
    e.actions.append(Action(step=0, action_type="generate", content="", observation=obs))
    e.terminal = "error"


def rollout_metrics(trajs: list[Trajectory], seconds: float) -> dict:
    """Summary for metrics/rollout.json: counts, visible pass rate, steps, tokens/s."""
    n = len(trajs)
    reasons: dict[str, int] = {}
    for t in trajs:
        reasons[t.terminal_reason] = reasons.get(t.terminal_reason, 0) + 1
    groups: dict[str, int] = {}
    for t in trajs:
        groups[t.prompt_key] = groups.get(t.prompt_key, 0) + 1
    gen_tokens = sum(sum(t.loss_mask) for t in trajs)
    first_pass = sum(1 for t in trajs if t.actions and t.actions[0].observation.status == "passed")
    return {
        "trajectories": n,
        "tasks": len({t.task_id for t in trajs}),
        "group_size_min": min(groups.values(), default=0),
        "group_size_max": max(groups.values(), default=0),
        "visible_pass_rate": reasons.get("all_tests_passed", 0) / n if n else 0.0,
        "first_turn_pass_rate": first_pass / n if n else 0.0,
        "mean_steps": sum(len(t.actions) for t in trajs) / n if n else 0.0,
        "infra_errors": reasons.get("infra_error", 0),
        "prompt_too_long": sum(is_prompt_too_long(t) for t in trajs),
        "terminal_reasons": reasons,
        "generated_tokens": gen_tokens,
        "seconds": seconds,
        "generated_tokens_per_s": gen_tokens / seconds if seconds > 0 else 0.0,
    }
