"""Repository-task episodes: tool calls in a sealed private workspace per episode.

In each turn every live episode's model writes ONE tool call; the calls that parse go to
the agent environment (codeloop.agent: ``AgentEnv.step_many``) in one batch and each
observation is appended for the next turn. prompt/obs ids are the agent format's
(codeloop.policy.agent_format: compact grammar for the embedded model, the chat
template's tool turns for chat models); call ids are the sampled ids including the stop
token.

A turn that does not parse (AgentParseError, or a generation cut by the token cap: a
half-written edit must never be applied) goes to the env as ``{"parse_error": why}``:
an observation with error kind ``parse_error``, shown to the model like any tool error
and counted by the env. The env decides ``submitted``, ``max_steps`` (``agent.max_steps``
calls) and ``invalid_action_limit`` (``agent.invalid_call_limit`` malformed calls);
this env adds ``context_full`` (no room for the next observation or call),
``infra_error`` (SandboxError: excluded from training), ``error`` with status
prompt_too_long. In ``tdd`` mode the prompt asks for a test file first; the test files
the model writes are kept as ``model_tests`` (judged by score on the reference and the
buggy tree; the judged ``final_diff`` leaves test files out). In ``rubber_duck`` mode a failing ``run_tests`` is followed by a turn
in which the model explains in prose why the tests fail (an ``explain`` action), then
its next call. Each trajectory carries the workspace's ``final_diff`` (what score
judges) and its tool counts.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from codeloop.agent.env import AgentEnv
from codeloop.agent.model_tests import is_model_test
from codeloop.policy.agent_format import AgentParseError, agent_format_for
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.loop import PROMPT_TOO_LONG, Episode
from codeloop.sandbox.base import SandboxError
from codeloop.schema import Action, Observation, Task

if TYPE_CHECKING:
    from codeloop.policy.model import Policy
    from codeloop.sandbox.base import Executor

MIN_ROOM = 8  # tokens a next call needs at least; less left ends the episode context_full


class RepoEnv:
    """Agent episodes of repository tasks on ``AgentEnv`` workspaces."""

    def __init__(
        self, policy: Policy, executor: Executor, ctx: EpisodeContext,
        agent_env: AgentEnv | None = None,
    ) -> None:
        self.policy, self.ctx = policy, ctx
        if agent_env is None and not ctx.repos_dir:
            raise ValueError("repository tasks need the repos_dir of their snapshots")
        self.fmt = agent_format_for(policy.tokenizer)
        self.owned = agent_env is None
        self.agent_env = agent_env or AgentEnv(executor, ctx.agent, ctx.repos_dir)
        self.mode = ctx.rollout.agent_mode
        self.version = self.fmt.version + ("" if self.mode == "self_debug" else f"+{self.mode}")
        steps = ctx.agent.max_steps
        self.max_turns = 2 * steps if self.mode == "rubber_duck" else steps
        self.max_new_tokens = ctx.rollout.agent_max_new_tokens
        self.env_timeout = float(ctx.agent.test_timeout_s or 0.0)

    def prompt(self, task: Task) -> str:
        return self.fmt.tdd_prompt(task) if self.mode == "tdd" else self.fmt.prompt(task)

    def reset(self, task: Task, sample: int) -> Episode:
        e = Episode(task, sample, self.fmt.encode(self.prompt(task)))
        if len(e.ids) + MIN_ROOM > self.policy.max_context:
            e.too_long(self.policy.max_context, "tool")
            return e
        try:
            e.state = self.agent_env.reset(task)
        except SandboxError as exc:
            e.fail(exc)
        return e

    def act(self, e: Episode, gen, step: int) -> tuple[object, dict] | None:
        if gen.finish_reason == "context":
            e.terminal = "context_full"
            return None
        if e.phase == "explain":
            e.actions.append(Action(step=step, action_type="explain", content=gen.text,
                                    raw=gen.text))
            e.phase = ""
            self._append(e, self.fmt.next_call_ids(e.task, stopped=gen.finish_reason == "stop"))
            return None
        call = _parse(self.fmt, gen.text, gen.finish_reason == "stop")
        act = Action(step=step, action_type="tool", content=gen.text, raw=gen.text)
        if "parse_error" not in call:
            act.tool = str(call["tool"])
            act.args = json.dumps(call.get("args") or {}, sort_keys=True)
        e.actions.append(act)
        return (e.state, call)

    def run_batch(self, pairs: list[tuple[object, dict]]) -> list[Observation]:
        return self.agent_env.step_many(pairs)

    def run_one(self, pair: tuple[object, dict]) -> Observation:
        return pair[0].step(pair[1])

    def observe(self, e: Episode, obs: Observation, last_turn: bool) -> None:
        """Store the observation; end the episode where the env says so (submitted,
        invalid_action_limit, max_steps) or where the context is full; else append its ids."""
        act = e.actions[-1]
        if not obs.status:  # a status on every action, as function episodes have
            obs.status = obs.error_kind or "ok"
        act.observation = obs
        act.duration_ms = float(obs.duration_ms)
        e.exec_ms += act.duration_ms
        if e.state.done:
            e.terminal = e.state.terminal_reason or "max_steps"
            return
        if self.mode == "rubber_duck" and _tests_failed(act, obs):
            e.phase = "explain"
            self._append(e, self.fmt.explain_observation_ids(e.task, obs))
            return
        self._append(e, self.fmt.observation_ids(e.task, obs, stopped=True))

    def _append(self, e: Episode, ids: list[int]) -> None:
        if len(e.ids) + len(ids) + MIN_ROOM > self.policy.max_context:
            e.terminal = "context_full"
            return
        e.add_context(ids)

    def finish(self, e: Episode) -> None:
        """The workspace's diff, then the workspace is destroyed (nothing outlives it)."""
        if e.state is None:
            return
        try:
            if not e.infra_error:
                e.kept["final_diff"] = e.state.final_diff()
        except SandboxError as exc:
            e.fail(exc)
        finally:
            e.state.close()

    def close(self) -> None:
        if self.owned:
            getattr(self.agent_env, "close", lambda: None)()

    def fields(self, e: Episode) -> dict:
        acts = [a for a in e.actions if a.action_type == "tool"]
        return {
            "final_diff": e.kept.get("final_diff", ""),
            "tool_calls": sum(1 for a in acts if a.observation.status != PROMPT_TOO_LONG),
            "tool_errors": sum(1 for a in acts if a.observation.error_kind),
            "tests_run": sum(
                1 for a in acts if a.tool == "run_tests" and not a.observation.error_kind
            ),
            "model_tests": model_test_files(acts),
        }


def model_test_files(acts: list[Action]) -> str:
    """The test files the model wrote (its last write_file of each test_*.py path, when the
    write succeeded) as a JSON object path -> content; "" when it wrote none."""
    files: dict[str, str] = {}
    for a in acts:
        if a.tool != "write_file" or a.observation.error_kind:
            continue
        args = json.loads(a.args or "{}")
        path = str(args.get("path", ""))
        if is_model_test(path):
            files[path] = str(args.get("content", ""))
    return json.dumps(files, sort_keys=True) if files else ""


def _parse(fmt, text: str, stopped: bool) -> dict:
    """The call in a turn, or ``{"parse_error": why}`` (the env records it as one)."""
    if not stopped:
        return {"parse_error": "the call was cut at the token limit before its end marker"}
    try:
        return fmt.parse(text)
    except AgentParseError as exc:
        return {"parse_error": str(exc)}


def _tests_failed(act: Action, obs: Observation) -> bool:
    """A run_tests call whose tests ran and did not all pass."""
    return act.tool == "run_tests" and not obs.error_kind and obs.tests_passed < obs.tests_total
