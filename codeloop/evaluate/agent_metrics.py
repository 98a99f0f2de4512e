"""Frozen repository sets: resolved rate (pass@1, unbiased pass@k) and agent behaviour.

An evaluated repository episode is resolved when the trusted judge
(codeloop.agent.judge.judge_patch) says so on its ``final_diff``: the diff applied to a
fresh base, every test file restored, FAIL_TO_PASS passing, no PASS_TO_PASS broken, no
disqualifying hack. The agent's own word (its submit, its last run_tests) counts for
nothing.

Per set: ``pass@k`` over the resolved flags (``pass@1`` is the resolved rate, which the
gate compares like any set's pass@1), ``resolved_rate``, ``avg_steps`` (tool calls per
episode), ``tool_call_success_rate`` (calls without an error kind), ``invalid_call_rate``
(calls that did not parse or named an unknown tool / bad arguments),
``timeout_rate`` (episodes with a timed-out call), ``tests_before_submit_rate`` (episodes
that ran the tests before submitting), ``submitted_rate``, ``avg_tokens`` (tokens the
model generated per episode), ``terminal_reasons``. Episodes whose infrastructure failed
are excluded and counted, never scored as failures.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from codeloop.evaluate.passk import PASS_KS, pass_at_k
from codeloop.schema import Trajectory

INVALID_KINDS = frozenset({"parse_error", "unknown_tool", "bad_args"})


def _rate(num: float, den: float) -> float:
    return num / den if den else 0.0


def _tests_before_submit(t: Trajectory) -> bool:
    seen = False
    for a in t.actions:
        if a.tool == "run_tests" and not a.observation.error_kind:
            seen = True
        if a.tool == "submit":
            return seen
    return False


def agent_set_metrics(
    trajs: list[Trajectory], resolved: list[bool], n: int, difficulty: dict[str, int] | None = None
) -> dict[str, Any]:
    """Metrics of one repository set; resolved[i] is the judge's verdict on trajs[i]."""
    if len(trajs) != len(resolved):
        raise ValueError(f"{len(trajs)} trajectories but {len(resolved)} verdicts")
    out = _summarize(trajs, resolved, n)
    if difficulty:
        groups: dict[int, list[int]] = defaultdict(list)
        for i, t in enumerate(trajs):
            groups[difficulty.get(t.task_id, -1)].append(i)
        out["by_difficulty"] = {
            str(d): _summarize([trajs[i] for i in ix], [resolved[i] for i in ix], n)
            for d, ix in sorted(groups.items())
        }
    return out


def _summarize(trajs: list[Trajectory], resolved: list[bool], n: int) -> dict[str, Any]:
    ok = [(t, r) for t, r in zip(trajs, resolved, strict=True) if not t.infra_error]
    per_task: dict[str, list[bool]] = defaultdict(list)
    for t, r in ok:
        per_task[t.task_id].append(bool(r))
    out: dict[str, Any] = {
        "kind": "repo",
        "n_tasks": len(per_task),
        "n_episodes": len(ok),
        "infra_errors": len(trajs) - len(ok),
    }
    for k in sorted(set(PASS_KS) | {n}):  # pass@n too: the widest the samples allow
        if k <= n:
            vals = [pass_at_k(len(v), sum(v), k) for v in per_task.values() if len(v) >= k]
            out[f"pass@{k}"] = _rate(sum(vals), len(vals))
    m = len(ok)
    calls = [a for t, _ in ok for a in t.actions if a.action_type == "tool" and a.raw]
    reasons: dict[str, int] = defaultdict(int)
    for t, _ in ok:
        reasons[t.terminal_reason] += 1
    out.update(
        resolved_rate=_rate(sum(r for _, r in ok), m),
        success_rate=_rate(sum(r for _, r in ok), m),
        avg_steps=_rate(len(calls), m),
        tool_call_success_rate=_rate(sum(not a.observation.error_kind for a in calls), len(calls)),
        invalid_call_rate=_rate(
            sum(a.observation.error_kind in INVALID_KINDS for a in calls), len(calls)
        ),
        timeout_rate=_rate(
            sum(any(a.observation.error_kind == "timeout" for a in t.actions) for t, _ in ok), m
        ),
        tests_before_submit_rate=_rate(sum(_tests_before_submit(t) for t, _ in ok), m),
        submitted_rate=_rate(reasons.get("submitted", 0), m),
        avg_tokens=_rate(sum(sum(t.loss_mask) for t, _ in ok), m),
        terminal_reasons=dict(sorted(reasons.items())),
    )
    return out


def failure_step(t: Trajectory, resolved: bool) -> str:
    """Where an episode went wrong, the first cause that explains it: ``resolved``; the
    first failed call as ``<tool>:<error kind>`` (a malformed call is ``?:parse_error``);
    ``no_edit`` (it changed nothing); ``wrong_fix`` (edits applied, the judge says no);
    ``infra`` (our side failed). The held-out diagnosis in bench/agent_curve.py."""
    if t.infra_error:
        return "infra"
    if resolved:
        return "resolved"
    for a in t.actions:
        if a.action_type == "tool" and a.observation.error_kind:
            return f"{a.tool or '?'}:{a.observation.error_kind}"
    return "wrong_fix" if t.final_diff.strip() else "no_edit"


def failure_steps(trajs: list[Trajectory], resolved: list[bool]) -> dict[str, int]:
    """Counts of ``failure_step`` over a set's episodes, most frequent first."""
    counts: dict[str, int] = defaultdict(int)
    for t, r in zip(trajs, resolved, strict=True):
        counts[failure_step(t, r)] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def tool_mix(trajs: list[Trajectory]) -> dict[str, dict[str, int]]:
    """Per tool name: calls and failed calls (the UI's tool-call mix)."""
    mix: dict[str, dict[str, int]] = {}
    for t in trajs:
        for a in t.actions:
            if a.action_type != "tool" or not a.raw:
                continue
            name = a.tool or "(unparsed)"
            row = mix.setdefault(name, {"calls": 0, "errors": 0})
            row["calls"] += 1
            row["errors"] += bool(a.observation.error_kind)
    return dict(sorted(mix.items()))


def render_episode(t: Trajectory, max_chars: int = 600) -> str:
    """One episode step by step as markdown (the Prefect UI's sampled episode)."""
    lines = [
        f"### Episode `{t.trajectory_id}` on task `{t.task_id}`",
        "",
        f"terminal: **{t.terminal_reason}**, reward {t.reward:.3f}, "
        f"{t.tool_calls} calls, {t.tool_errors} errors, {t.tests_run} test runs",
        "",
    ]
    for a in t.actions:
        obs = a.observation
        kind = f" — error `{obs.error_kind}`" if obs.error_kind else ""
        lines += [
            f"**step {a.step}: `{a.tool or '?'}`**{kind}",
            "",
            "```",
            a.raw[:max_chars],
            "```",
        ]
        text = obs.output or obs.stderr
        if text:
            cut = " (cut)" if len(text) > max_chars or obs.truncated else ""
            lines += [f"observation{cut}:", "", "```", text[:max_chars], "```", ""]
    if t.final_diff:
        lines += ["final diff:", "", "```diff", t.final_diff[: max_chars * 3], "```"]
    return "\n".join(lines)


def agent_summary(trajs: list[Trajectory], iteration: int, resolved: list[bool] | None = None):
    """What the UI shows of a stage's agent episodes: per-tool mix, counts, the resolved
    rate (when verdicts are known) and one episode picked by a seeded draw, as markdown.
    None when no trajectory is an agent episode."""
    import random

    agent = [t for t in trajs if any(a.action_type == "tool" for a in t.actions)]
    if not agent:
        return None
    pick = random.Random(f"episode:{iteration}").randrange(len(agent))
    reasons: dict[str, int] = defaultdict(int)
    for t in agent:
        reasons[t.terminal_reason] += 1
    out: dict[str, Any] = {
        "iteration": iteration,
        "episodes": len(agent),
        "tool_mix": tool_mix(agent),
        "terminal_reasons": dict(sorted(reasons.items())),
        "mean_tool_calls": _rate(sum(t.tool_calls for t in agent), len(agent)),
        "episode_markdown": render_episode(agent[pick]),
    }
    if resolved is not None:
        out["resolved_rate"] = _rate(sum(resolved), len(resolved))
    return out
