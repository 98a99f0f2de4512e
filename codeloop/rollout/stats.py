"""Summary of a rollout for metrics/rollout.json and the UI."""

from __future__ import annotations

from codeloop.rollout.function_env import is_prompt_too_long
from codeloop.schema import Trajectory


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
