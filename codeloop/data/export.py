"""Scored trajectories as datasets other trainers take (``codeloop export``).

Formats (one ``train.parquet`` per export, so ``datasets.load_dataset(DIR)`` reads it).
Function episodes and agent episodes (repository tasks: tool calls in a workspace) both
export; an agent row needs its task (``tasks``, by task_id: the problem statement and
the judge's spec live there, not in the trajectory).

- ``sft``: passing episodes, deduplicated per task and answer, as chat ``messages``, the
  conversational layout TRL's SFTTrainer takes. A function episode that passed every
  visible test: user (the task prompt), assistant (the final code). An agent episode the
  judge resolved (not zeroed as a hack): system, user (the problem statement), then each
  tool call as an assistant ``tool_calls`` message and each observation the model read
  as a ``tool`` message (codeloop.policy.agent_format.episode_messages), with the tool
  schemas in ``tools``.
- ``dpo``: function groups (``prompt_key``) whose rewards differ give one pair: ``chosen``
  the group's best final code, ``rejected`` its worst (ties broken by trajectory id),
  with the shared ``prompt`` text: TRL DPOTrainer's standard preference layout. Agent
  groups give one pair per resolved episode while unresolved ones last (the best resolved
  with the worst unresolved, and so on; no episode twice), in TRL's conversational layout:
  ``prompt`` the system and user messages, ``chosen`` / ``rejected`` the rest of each
  episode, ``tools`` the schemas. The two layouts cannot share a column, so a dpo export
  of both kinds at once is refused (export one ``kind`` at a time).
- ``grpo``: one row per group: ``prompt`` (the text the policy was shown),
  ``completions`` (final codes; an agent group's final diffs), ``rewards`` and
  ``trajectory_ids``, in trajectory-id order; ``kind`` and, for agent groups, the judge's
  spec of the task (``repo``, ``snapshot``, ``environment``, ``bug_patch``,
  ``test_patch``, ``fail_to_pass``, ``pass_to_pass``, ``visible_tests``; empty for
  function groups). The reference patch and the hidden tests are left out: neither is
  rewarded, and a training row never carries the answer.
- ``transitions``: one row per model step for PPO / offline RL (a function episode's
  generate/revise turns, an agent episode's tool calls and explanations): ``state_ids``
  (every token before the step), ``observation`` (the text the step answered: the task
  prompt, then the previous run's result or tool observation), ``action`` /
  ``action_ids`` / ``action_logprobs`` / ``logp`` (the sampler's, summed),
  ``action_type``, ``tool`` and ``args`` (an agent call's name and JSON arguments),
  ``reward``, ``next_state_ids`` and ``done``. The reward share of a step is its step
  reward (score's process shaping and step costs), and the last step also takes the rest
  of the episode reward (reward minus the step rewards), so an episode's shares sum to
  its reward: the episode reward already holds its step terms, never counted twice.
  Steps are the loss-mask runs of the stored token layout (codeloop.rollout.loop), one
  per model action; an agent turn cut by the context (context_full) has a run but no
  action and exports with an empty action text. Rows without tokens (stripped by
  retention) are left out.

Message columns (``messages``, a conversational ``prompt``/``chosen``/``rejected``) and
``tools`` are Arrow JSON: each message keeps exactly its own keys (a struct column would
give every message every key, null-filled, and a tool call every tool's arguments),
and ``datasets`` decodes them to plain dicts and lists.

Infra-error rows are never exported: they measure our infrastructure, not the policy.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from codeloop.io import read_trajectories
from codeloop.policy.agent_format import TOOL_SCHEMAS, episode_messages, observation_text
from codeloop.schema import (
    TASK_KINDS,
    Action,
    Observation,
    Task,
    Trajectory,
    episode_kind,
    is_agent_episode,
    model_turns,
    require_kind,
    resolved_episode,
)

FORMATS = ("sft", "dpo", "grpo", "transitions")
JSON = pa.json_()
MESSAGES = pa.list_(JSON)


def load_for_export(path: str | os.PathLike) -> list[Trajectory]:
    """Trajectories from a shard directory, one Parquet file or the archive (data/archive/)."""
    p = Path(path)
    if p.is_dir() and any(p.glob("iteration=*")):
        from codeloop.data.archive import query

        return query(p)
    return read_trajectories(p)


def of_kind(trajs: list[Trajectory], kind: str) -> list[Trajectory]:
    """The episodes of one task kind (TASK_KINDS; "repo": the agent episodes)."""
    if kind not in TASK_KINDS:
        raise ValueError(f"unknown episode kind {kind!r}; choose one of {', '.join(TASK_KINDS)}")
    return [t for t in trajs if episode_kind(t) == kind]


def _usable(trajs: list[Trajectory]) -> list[Trajectory]:
    return sorted((t for t in trajs if not t.infra_error), key=lambda t: t.trajectory_id)


def _task(t: Trajectory, tasks: dict[str, Task] | None) -> Task:
    """The repository task of agent episode t; a ValueError naming the row if there is none."""
    if tasks is None:
        raise ValueError(
            f"trajectory {t.trajectory_id} is an agent episode: its export needs the tasks "
            "file (the problem statement and the judge's spec of its task)"
        )
    task = tasks.get(t.task_id)
    if task is None:
        raise ValueError(
            f"trajectory {t.trajectory_id}: field task_id {t.task_id!r} is not in the tasks file"
        )
    require_kind(task, "repo", f"trajectory {t.trajectory_id} (an agent episode)")
    return task


def _messages(t: Trajectory, tasks: dict[str, Task] | None) -> list[dict]:
    """Agent episode t as chat messages; a bad action is a ValueError naming the row."""
    task = _task(t, tasks)
    try:
        return episode_messages(task, model_turns(t), t.metadata.episode_mode)
    except ValueError as exc:
        raise ValueError(f"trajectory {t.trajectory_id}: {exc}") from None


SFT_SCHEMA = pa.schema(
    [
        ("messages", MESSAGES),
        ("tools", JSON),
        ("task_id", pa.string()),
        ("trajectory_id", pa.string()),
        ("kind", pa.string()),
    ]
)


def sft_rows(trajs: list[Trajectory], tasks: dict[str, Task] | None = None) -> list[dict]:
    seen, rows = set(), []
    for t in _usable(trajs):
        if is_agent_episode(t):
            if not resolved_episode(t) or (t.task_id, t.final_diff) in seen:
                continue
            seen.add((t.task_id, t.final_diff))
            messages, tools = _messages(t, tasks), TOOL_SCHEMAS
        else:
            if t.terminal_reason != "all_tests_passed" or (t.task_id, t.final_code) in seen:
                continue
            seen.add((t.task_id, t.final_code))
            messages = [
                {"role": "user", "content": t.prompt},
                {"role": "assistant", "content": t.final_code},
            ]
            tools = None
        rows.append(
            {
                "messages": messages,
                "tools": tools,
                "task_id": t.task_id,
                "trajectory_id": t.trajectory_id,
                "kind": episode_kind(t),
            }
        )
    return rows


def _groups(trajs: list[Trajectory]) -> dict[str, list[Trajectory]]:
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in _usable(trajs):
        groups[t.prompt_key].append(t)
    return dict(sorted(groups.items()))


def _function_pair(key: str, group: list[Trajectory]) -> list[dict]:
    ranked = sorted(group, key=lambda t: -t.reward)  # stable: id order within a reward
    best, worst = ranked[0], ranked[-1]
    if best.reward == worst.reward:
        return []  # a tied group has no preference
    return [
        {
            "prompt": best.prompt,
            "chosen": best.final_code,
            "rejected": worst.final_code,
            "prompt_key": key,
            "chosen_reward": best.reward,
            "rejected_reward": worst.reward,
        }
    ]


def _agent_pairs(key: str, group: list[Trajectory], tasks) -> list[dict]:
    played = [t for t in group if model_turns(t)]  # an overflowed prompt has no answer to rank
    won = sorted((t for t in played if resolved_episode(t)), key=lambda t: -t.reward)
    lost = sorted((t for t in played if not resolved_episode(t)), key=lambda t: t.reward)
    rows = []
    for chosen, rejected in zip(won, lost, strict=False):
        good, bad = _messages(chosen, tasks), _messages(rejected, tasks)
        rows.append(
            {
                "prompt": good[:2],  # system and user: the same task and template (prompt_key)
                "chosen": good[2:],
                "rejected": bad[2:],
                "tools": TOOL_SCHEMAS,
                "prompt_key": key,
                "task_id": chosen.task_id,
                "chosen_reward": chosen.reward,
                "rejected_reward": rejected.reward,
                "chosen_id": chosen.trajectory_id,
                "rejected_id": rejected.trajectory_id,
            }
        )
    return rows


AGENT_DPO_SCHEMA = pa.schema(
    [
        ("prompt", MESSAGES),
        ("chosen", MESSAGES),
        ("rejected", MESSAGES),
        ("tools", JSON),
        ("prompt_key", pa.string()),
        ("task_id", pa.string()),
        ("chosen_reward", pa.float64()),
        ("rejected_reward", pa.float64()),
        ("chosen_id", pa.string()),
        ("rejected_id", pa.string()),
    ]
)


def dpo_rows(trajs: list[Trajectory], tasks: dict[str, Task] | None = None) -> list[dict]:
    kinds = {episode_kind(t) for t in _usable(trajs)}
    if len(kinds) > 1:
        raise ValueError(
            "dpo: the trajectories hold function and agent episodes, whose pairs have "
            "different layouts (prompt text vs chat messages); export one kind at a time "
            "(--kind function or --kind repo)"
        )
    rows = []
    for key, group in _groups(trajs).items():
        if is_agent_episode(group[0]):
            rows += _agent_pairs(key, group, tasks)
        else:
            rows += _function_pair(key, group)
    return rows


GRPO_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("prompt_key", pa.string()),
        ("task_id", pa.string()),
        ("completions", pa.list_(pa.string())),
        ("rewards", pa.list_(pa.float64())),
        ("trajectory_ids", pa.list_(pa.string())),
        ("kind", pa.string()),
        ("repo", pa.string()),
        ("snapshot", pa.string()),
        ("environment", pa.string()),
        ("bug_patch", pa.string()),
        ("test_patch", pa.string()),
        ("fail_to_pass", pa.list_(pa.string())),
        ("pass_to_pass", pa.list_(pa.string())),
        ("visible_tests", pa.list_(pa.string())),
    ]
)
JUDGE_SPEC = ("repo", "snapshot", "environment", "bug_patch", "test_patch")
JUDGE_TESTS = ("fail_to_pass", "pass_to_pass", "visible_tests")


def grpo_rows(trajs: list[Trajectory], tasks: dict[str, Task] | None = None) -> list[dict]:
    rows = []
    for key, group in _groups(trajs).items():
        agent = is_agent_episode(group[0])
        row = {
            "prompt": group[0].prompt,
            "prompt_key": key,
            "task_id": group[0].task_id,
            "completions": [t.final_diff if agent else t.final_code for t in group],
            "rewards": [t.reward for t in group],
            "trajectory_ids": [t.trajectory_id for t in group],
            "kind": episode_kind(group[0]),
        }
        task = _task(group[0], tasks) if agent else None
        row |= {f: getattr(task, f) if task else "" for f in JUDGE_SPEC}
        row |= {f: list(getattr(task, f)) if task else [] for f in JUDGE_TESTS}
        rows.append(row)
    return rows


def _spans(t: Trajectory) -> list[tuple[int, int]]:
    """[start, end) of each run of loss_mask 1: the tokens of one model step."""
    spans, start = [], None
    for i, m in enumerate([*t.loss_mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _obs_text(o: Observation) -> str:
    parts = [f"status: {o.status}", f"tests passed: {o.tests_passed}/{o.tests_total}"]
    parts += [f"failing test: {o.failing_test}"] if o.failing_test else []
    parts += [f"stdout: {o.stdout}"] if o.stdout else []
    parts += [f"stderr: {o.stderr}"] if o.stderr else []
    return "\n".join(parts)


def _observation(t: Trajectory, steps: list, k: int, agent: bool) -> str:
    """What step k answered: the prompt, then the previous step's result as the model read
    it (an agent's tool observation; nothing but the next-call ask after an explanation)."""
    if k == 0:
        return t.prompt
    prev = steps[k - 1]
    if not agent:
        return _obs_text(prev.observation)
    return observation_text(prev.observation) if prev.action_type == "tool" else ""


TRANSITIONS_SCHEMA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("step", pa.int64()),
        ("observation", pa.string()),
        ("state_ids", pa.list_(pa.int64())),
        ("action", pa.string()),
        ("action_ids", pa.list_(pa.int64())),
        ("action_logprobs", pa.list_(pa.float64())),
        ("logp", pa.float64()),
        ("reward", pa.float64()),
        ("next_state_ids", pa.list_(pa.int64())),
        ("done", pa.bool_()),
        ("kind", pa.string()),
        ("action_type", pa.string()),
        ("tool", pa.string()),
        ("args", pa.string()),
    ]
)


def _steps(t: Trajectory) -> list:
    """The episode's model actions, one per generated run of its loss mask. An agent turn
    cut by the context (context_full) generated ids but made no action: it is the last run,
    exported as an action of type "cut" with no text."""
    steps = model_turns(t)
    n_runs = len(_spans(t))
    if n_runs == len(steps) + 1 and t.terminal_reason == "context_full":
        steps.append(Action(step=len(t.actions), action_type="cut", content=""))
    if n_runs != len(steps):
        raise ValueError(
            f"trajectory {t.trajectory_id}: {len(steps)} model steps in field actions but "
            f"{n_runs} generated token runs in field loss_mask; the row is corrupt"
        )
    return steps


def transition_rows(trajs: list[Trajectory], tasks: dict[str, Task] | None = None) -> list[dict]:
    rows = []
    for t in _usable(trajs):
        if not t.token_ids:
            continue  # a stripped archive row (retention over_budget: strip) has no tokens
        agent, steps, spans = is_agent_episode(t), _steps(t), _spans(t)
        rest = t.reward - sum(a.reward for a in steps)  # the episode reward past its steps'
        for k, (a, (s, e)) in enumerate(zip(steps, spans, strict=True)):
            last = k == len(steps) - 1
            nxt = len(t.token_ids) if last else spans[k + 1][0]
            rows.append(
                {
                    "trajectory_id": t.trajectory_id,
                    "step": a.step,
                    "observation": _observation(t, steps, k, agent),
                    "state_ids": t.token_ids[:s],
                    "action": a.content,
                    "action_ids": t.token_ids[s:e],
                    "action_logprobs": t.sample_logprobs[s:e],
                    "logp": float(sum(t.sample_logprobs[s:e])),
                    "reward": a.reward + (rest if last else 0.0),
                    "next_state_ids": t.token_ids[:nxt],
                    "done": last,
                    "kind": episode_kind(t),
                    "action_type": a.action_type,
                    "tool": a.tool,
                    "args": a.args,
                }
            )
    return rows


BUILDERS = {"sft": sft_rows, "dpo": dpo_rows, "grpo": grpo_rows, "transitions": transition_rows}


def _schema(fmt: str, rows: list[dict]) -> pa.Schema | None:
    """The Arrow schema of an export (None: inferred, the function dpo layout)."""
    if fmt == "dpo":
        return AGENT_DPO_SCHEMA if isinstance(rows[0]["prompt"], list) else None
    return {"sft": SFT_SCHEMA, "grpo": GRPO_SCHEMA, "transitions": TRANSITIONS_SCHEMA}.get(fmt)


def _table(rows: list[dict], schema: pa.Schema | None) -> pa.Table:
    """Rows as a table; JSON columns are written as strings, then typed as Arrow JSON."""
    if schema is None:
        return pa.Table.from_pylist(rows)

    def plain(t: pa.DataType) -> pa.DataType:
        if t == JSON:
            return pa.string()
        return pa.list_(plain(t.value_type)) if pa.types.is_list(t) else t

    def encode(value: Any, t: pa.DataType) -> Any:
        if value is None:
            return None
        if t == JSON:
            return json.dumps(value)
        return [encode(v, t.value_type) for v in value] if pa.types.is_list(t) else value

    storage = pa.schema([(f.name, plain(f.type)) for f in schema])
    encoded = [{f.name: encode(r[f.name], f.type) for f in schema} for r in rows]
    return pa.Table.from_pylist(encoded, schema=storage).cast(schema)


def export(
    trajs: list[Trajectory],
    fmt: str,
    out_dir: str | os.PathLike,
    tasks: dict[str, Task] | None = None,
) -> dict[str, Any]:
    """Write ``out_dir/train.parquet`` in format fmt; returns {format, rows, path}.

    ``tasks`` (by task_id) must hold the task of every agent episode that sft, dpo and
    grpo export (transitions need none)."""
    if fmt not in BUILDERS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    rows = BUILDERS[fmt](trajs, tasks)
    if not rows:
        raise ValueError(f"no rows to export as {fmt} from {len(trajs)} trajectories")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "train.parquet"
    pq.write_table(_table(rows, _schema(fmt, rows)), path)
    return {"format": fmt, "rows": len(rows), "path": str(path)}
