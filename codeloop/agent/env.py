"""The coding agent's environment: episodes over sealed repository workspaces.

``AgentEnv(executor, cfg, repos_dir)`` needs an executor made with workspaces and the
envs dir (``codeloop.agent.executor.open_executor``). ``env.reset(task)`` gives an ``Episode`` on a fresh
workspace (a copy of the task's cached base); ``episode.step(call)`` plays one tool call
and returns its ``Observation``; ``env.step_many([(episode, call), ...])`` plays one call of
each of many episodes with all their sandbox commands in one batch (one rollout turn).
``episode.counters`` feeds process rewards (visible passes per run_tests);
``episode.final_diff()`` is what score judges; ``episode.close()`` destroys the workspace.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from codeloop.agent.envdirs import boot_file, env_paths
from codeloop.agent.lines import truncate
from codeloop.agent.tools import INVALID_KINDS, Pending, ToolResult, Tools, parse_call
from codeloop.agent.workspace import BaseCache, Workspace
from codeloop.config import AgentConfig
from codeloop.sandbox import SandboxError
from codeloop.schema import Action, Observation, Task, require_kind


@dataclass
class Counters:
    tool_calls: int = 0
    tool_errors: int = 0
    invalid_calls: int = 0
    tests_run: int = 0
    visible_passed: list[int] = field(default_factory=list)  # per run_tests, in order
    by_tool: dict[str, int] = field(default_factory=dict)


class Episode:
    """One task's episode on its own workspace."""

    def __init__(self, env: AgentEnv, task: Task, workspace: Workspace, tools: Tools) -> None:
        self.env, self.task, self.workspace, self.tools = env, task, workspace, tools
        self.counters = Counters()
        self.actions: list[Action] = []
        self.done, self.terminal_reason = False, ""

    def step(self, call: object) -> Observation:
        """Play one tool call (a dict, its JSON text, or ``{"parse_error": ...}``)."""
        return self.env.step_many([(self, call)])[0]

    def final_diff(self) -> str:
        return self.workspace.diff()

    def close(self) -> None:
        """Destroy the workspace (idempotent)."""
        if self.workspace is not None:
            self.workspace.destroy()
            self.workspace = None

    def _record(self, tool: str, args: dict, raw: str, res: ToolResult, ms: float) -> Observation:
        cfg, c = self.env.cfg, self.counters
        text, cut = truncate(res.output, cfg.observation_chars)
        cut = cut or res.truncated  # read_file and search cut their own lines to the budget
        obs = Observation(output=text, truncated=cut, error_kind=res.error_kind, duration_ms=ms)
        if res.report is not None:
            c.tests_run += 1
            c.visible_passed.append(res.visible_passed)
            obs.tests_passed, obs.tests_total = res.visible_passed, len(self.task.visible_tests)
            obs.status = res.report.status
        c.tool_calls += 1
        c.by_tool[tool or "?"] = c.by_tool.get(tool or "?", 0) + 1
        c.tool_errors += bool(res.error_kind)
        c.invalid_calls += res.error_kind in INVALID_KINDS
        self.actions.append(Action(step=len(self.actions), action_type="tool", content=raw,
                                   observation=obs, tool=tool, args=json.dumps(args), raw=raw,
                                   duration_ms=ms))
        if res.done:
            self.done, self.terminal_reason = True, "submitted"
        elif c.invalid_calls >= cfg.invalid_call_limit:
            self.done, self.terminal_reason = True, "invalid_action_limit"
        elif c.tool_calls >= cfg.max_steps:
            self.done, self.terminal_reason = True, "max_steps"
        return obs


class AgentEnv:
    """Episodes of repository tasks on ``executor`` (made by ``make_agent_executor``)."""

    def __init__(self, executor, cfg: AgentConfig, repos_dir: str, cache_dir: str | None = None):
        if getattr(executor, "workspaces", None) is None:
            raise SandboxError("AgentEnv needs an executor with workspaces (make_agent_executor)")
        self.executor, self.cfg = executor, cfg
        self.envs_root = executor.workspaces.envs_root or os.path.abspath(cfg.envs_dir)
        self.cache = BaseCache(repos_dir, cache_dir)

    def reset(self, task: Task) -> Episode:
        """A new episode of ``task`` on a fresh workspace."""
        require_kind(task, "repo", "AgentEnv.reset")
        inside = [self.executor.workspaces.env_inside(p) for p in env_paths(task, self.envs_root)]
        ws = Workspace.create(task, self.cache, self.executor.workspaces.new_workspace)
        boot = self.executor.workspaces.env_inside(boot_file(self.envs_root))
        tools = Tools(ws.path, task, self.cfg, inside, base=ws.base, boot=boot)
        return Episode(self, task, ws, tools)

    def step_many(self, calls: list[tuple[Episode, object]]) -> list[Observation]:
        """One call for each of several (distinct) episodes; their sandbox commands run as
        one batch. Observations in input order."""
        if len({id(ep) for ep, _ in calls}) != len(calls):
            raise ValueError("step_many: one call per episode per batch")
        planned: list = []
        for ep, call in calls:
            start = time.monotonic()
            raw = call if isinstance(call, str) else json.dumps(call, default=str)
            tool, args, problem = parse_call(call)
            if ep.done or ep.workspace is None:
                res = ToolResult("error: the episode is over", error_kind="episode_over")
            elif problem:
                kind, _, why = problem.partition(": ")
                res = ToolResult(f"error: {why}", error_kind=kind)
            else:
                res = ep.tools.plan(tool, args)
            planned.append([ep, tool, args, raw, res, (time.monotonic() - start) * 1000.0])
        pending = [p for p in planned if isinstance(p[4], Pending)]
        results = self.executor.run_commands([p[4].job for p in pending]) if pending else []
        for p, cmd in zip(pending, results, strict=True):
            start = time.monotonic()
            p[4] = p[4].finish(cmd)  # its time: planning, the command's own, reading it
            p[5] += cmd.duration_ms + (time.monotonic() - start) * 1000.0
        out = []
        for ep, tool, args, raw, res, ms in planned:
            if res.error_kind == "episode_over":
                out.append(Observation(output=res.output, error_kind=res.error_kind))
                continue
            out.append(ep._record(tool, args, raw, res, ms))
        return out
