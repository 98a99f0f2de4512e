"""Scored trajectories as datasets other trainers take (``codeloop export``).

Formats (one ``train.parquet`` per export, so ``datasets.load_dataset(DIR)`` reads it):

- ``sft``: passing episodes (all tests passed, no infra error), deduplicated per task and
  final code, as chat ``messages`` (user: the task prompt, assistant: the final code), the
  conversational layout TRL's SFTTrainer takes.
- ``dpo``: one pair per GRPO group (``prompt_key``) whose rewards differ: ``chosen`` is
  the group's best final code, ``rejected`` its worst (ties broken by trajectory id), with
  the shared ``prompt``: TRL DPOTrainer's standard preference layout.
- ``grpo``: one row per group: ``prompt``, ``completions`` (final codes), ``rewards``
  and ``trajectory_ids``, in trajectory-id order.
- ``transitions``: one row per model step for PPO / offline RL: ``state_ids`` (every token
  before the step), ``observation`` (the text the step answered: the task prompt, then the
  previous run's result), ``action`` / ``action_ids`` / ``action_logprobs`` / ``logp``
  (the sampler's, summed), ``reward`` (the step reward, plus the episode reward on the
  last step), ``next_state_ids`` and ``done``. Steps are the loss-mask runs of the stored
  token layout (codeloop.rollout.loop), one per generate/revise action; rows
  without tokens (stripped by retention) are left out.

Infra-error rows are never exported: they measure our infrastructure, not the policy.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from codeloop.io import read_trajectories
from codeloop.schema import Observation, Trajectory

FORMATS = ("sft", "dpo", "grpo", "transitions")


def load_for_export(path: str | os.PathLike) -> list[Trajectory]:
    """Trajectories from a shard directory, one Parquet file or the archive (data/archive/)."""
    p = Path(path)
    if p.is_dir() and any(p.glob("iteration=*")):
        from codeloop.data.archive import query

        return query(p)
    return read_trajectories(p)


def _usable(trajs: list[Trajectory]) -> list[Trajectory]:
    return sorted((t for t in trajs if not t.infra_error), key=lambda t: t.trajectory_id)


def sft_rows(trajs: list[Trajectory]) -> list[dict[str, Any]]:
    seen, rows = set(), []
    for t in _usable(trajs):
        if t.terminal_reason != "all_tests_passed" or (t.task_id, t.final_code) in seen:
            continue
        seen.add((t.task_id, t.final_code))
        messages = [
            {"role": "user", "content": t.prompt},
            {"role": "assistant", "content": t.final_code},
        ]
        rows.append({"messages": messages, "task_id": t.task_id, "trajectory_id": t.trajectory_id})
    return rows


def _groups(trajs: list[Trajectory]) -> dict[str, list[Trajectory]]:
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in _usable(trajs):
        groups[t.prompt_key].append(t)
    return dict(sorted(groups.items()))


def dpo_rows(trajs: list[Trajectory]) -> list[dict[str, Any]]:
    rows = []
    for key, group in _groups(trajs).items():
        ranked = sorted(group, key=lambda t: -t.reward)  # stable: id order within a reward
        best, worst = ranked[0], ranked[-1]
        if best.reward == worst.reward:
            continue  # a tied group has no preference
        rows.append(
            {
                "prompt": best.prompt,
                "chosen": best.final_code,
                "rejected": worst.final_code,
                "prompt_key": key,
                "chosen_reward": best.reward,
                "rejected_reward": worst.reward,
            }
        )
    return rows


def grpo_rows(trajs: list[Trajectory]) -> list[dict[str, Any]]:
    return [
        {
            "prompt": group[0].prompt,
            "prompt_key": key,
            "task_id": group[0].task_id,
            "completions": [t.final_code for t in group],
            "rewards": [t.reward for t in group],
            "trajectory_ids": [t.trajectory_id for t in group],
        }
        for key, group in _groups(trajs).items()
    ]


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


def transition_rows(trajs: list[Trajectory]) -> list[dict[str, Any]]:
    rows = []
    for t in _usable(trajs):
        if not t.token_ids:
            continue  # a stripped archive row (retention over_budget: strip) has no tokens
        steps = [a for a in t.actions if a.action_type in ("generate", "revise")]
        spans = _spans(t)
        if len(spans) != len(steps):
            raise ValueError(
                f"trajectory {t.trajectory_id}: {len(steps)} model steps but {len(spans)} "
                "generated token runs in loss_mask; the row is corrupt"
            )
        for k, (a, (s, e)) in enumerate(zip(steps, spans, strict=True)):
            last = k == len(steps) - 1
            nxt = len(t.token_ids) if last else spans[k + 1][0]
            rows.append(
                {
                    "trajectory_id": t.trajectory_id,
                    "step": a.step,
                    "observation": t.prompt if k == 0 else _obs_text(steps[k - 1].observation),
                    "state_ids": t.token_ids[:s],
                    "action": a.content,
                    "action_ids": t.token_ids[s:e],
                    "action_logprobs": t.sample_logprobs[s:e],
                    "logp": float(sum(t.sample_logprobs[s:e])),
                    "reward": a.reward + (t.reward if last else 0.0),
                    "next_state_ids": t.token_ids[:nxt],
                    "done": last,
                }
            )
    return rows


BUILDERS = {"sft": sft_rows, "dpo": dpo_rows, "grpo": grpo_rows, "transitions": transition_rows}


def export(trajs: list[Trajectory], fmt: str, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Write ``out_dir/train.parquet`` in format fmt; returns {format, rows, path}."""
    if fmt not in BUILDERS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    rows = BUILDERS[fmt](trajs)
    if not rows:
        raise ValueError(f"no rows to export as {fmt} from {len(trajs)} trajectories")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return {"format": fmt, "rows": len(rows), "path": str(path)}
