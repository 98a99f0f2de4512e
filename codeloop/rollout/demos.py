"""Expert demonstrations: a scripted expert's tool calls played through the real env.

``expert_demos(tasks, env, expert)`` runs ``expert(task)`` (a list of tool calls, e.g.
``codeloop.data.repos.expert.expert_calls``) for every task in the real ``AgentEnv``,
batched like a rollout (all episodes' i-th calls in one ``step_many``), and keeps the
calls with the observations the environment really returned. SFT renders them in the
agent's exact token format (``codeloop.policy.sft.agent_examples``), so the model learns
from the same observation text it will read in rollout, never from a hand-written one.

A demonstration is kept only when every call succeeded (no error kind) but its slips
(calls marked ``"slip"``, which must fail with ``no_match``) and it ends with an accepted
``submit``; the others are counted (an expert that fails on a task is
a data bug worth seeing in metrics/sft.json, not a lesson to teach).
"""

from __future__ import annotations

from collections.abc import Callable

from codeloop.schema import Observation, Task


def expert_demos(
    tasks: list[Task], env, expert: Callable[[Task], list[dict]]
) -> tuple[list[tuple[Task, list[tuple[dict, Observation]]]], dict]:
    """([(task, [(call, observation), ...])], {"demos", "rejected", "reasons"})."""
    plans = [list(expert(t)) for t in tasks]
    episodes = [env.reset(t) for t in tasks]
    steps: list[list[tuple[dict, Observation]]] = [[] for _ in tasks]
    try:
        for k in range(max((len(p) for p in plans), default=0)):
            live = [i for i, p in enumerate(plans) if k < len(p)]
            obs = env.step_many([(episodes[i], plans[i][k]) for i in live])
            for i, o in zip(live, obs, strict=True):
                steps[i].append((plans[i][k], o))
    finally:
        for e in episodes:
            e.close()
    kept, reasons = [], {}
    for task, st in zip(tasks, steps, strict=True):
        why = _reject_reason(st)
        if why:
            reasons[why] = reasons.get(why, 0) + 1
        else:
            kept.append((task, st))
    return kept, {"demos": len(kept), "rejected": len(tasks) - len(kept), "reasons": reasons}


def _reject_reason(steps: list[tuple[dict, Observation]]) -> str:
    if not steps:
        return "no_calls"
    for call, obs in steps:
        if call.get("slip") and obs.error_kind != "no_match":
            return f"slip:{obs.error_kind or 'matched'}"
        if obs.error_kind and not call.get("slip"):
            return f"{call.get('tool')}:{obs.error_kind}"
    if steps[-1][0].get("tool") != "submit":
        return "no_submit"
    return ""
