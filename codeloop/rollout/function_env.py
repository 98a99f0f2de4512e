"""Function-task episodes: write code, run the visible tests, read the error, revise.

Turn 1 generates code for the task prompt; the code runs against the task's VISIBLE
tests only (hidden tests never reach the model or its feedback); on failure the model
sees the status, the failing test, the value its code returned and the error, and
revises. ``rollout.max_steps`` code turns at most. Two modes add a turn that needs no
sandbox:

- ``rubber_duck``: after a failed run (not the last), the feedback asks the model to
  explain in prose what its code does line by line and why the failing test fails; that
  explanation is an ``explain`` action (trained like any generated text), then the
  model is asked for the fixed code.
- ``tdd``: the first turn asks for asserts that pin the requested behaviour from the
  statement alone (a ``write_tests`` action; kept as ``Trajectory.model_tests``, judged
  by score against the reference and wrong variants, never in place of the task's
  tests), then the code.

Terminal reasons: all_tests_passed; no_code (nothing code-like extracted); timeout (the
last run hit the deadline); max_steps (still failing after the last turn, or no room
left in the context window); infra_error (SandboxError: excluded from training); error
with observation status prompt_too_long (the task's prompt alone fills the context).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codeloop.policy import prompts as P
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.loop import PROMPT_TOO_LONG, Episode
from codeloop.sandbox.base import ExecJob, ExecResult
from codeloop.schema import Action, Observation, Task, Trajectory

if TYPE_CHECKING:
    from codeloop.policy.model import Policy
    from codeloop.sandbox.base import Executor


def is_prompt_too_long(t: Trajectory) -> bool:
    """True for the error rows of tasks whose prompt did not fit the context."""
    return bool(t.actions) and t.actions[0].observation.status == PROMPT_TOO_LONG


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


class FunctionEnv:
    """Self-debugging episodes of function tasks in the function sandbox."""

    def __init__(
        self, policy: Policy, executor: Executor, ctx: EpisodeContext, agent_env: object = None
    ) -> None:
        self.policy, self.executor, self.ctx = policy, executor, ctx
        self.fmt = policy.format
        self.mode = ctx.rollout.mode
        self.version = self.fmt.version + ("" if self.mode == "self_debug" else f"+{self.mode}")
        steps = ctx.rollout.max_steps
        extra = {"self_debug": 0, "rubber_duck": steps - 1, "tdd": 1}[self.mode]
        self.max_turns = steps + extra
        self.max_new_tokens = ctx.rollout.max_new_tokens
        self.env_timeout = ctx.timeout_s

    def prompt(self, task: Task) -> str:
        return self.fmt.tests_prompt(task) if self.mode == "tdd" else self.fmt.prompt(task)

    def reset(self, task: Task, sample: int) -> Episode:
        ids = self.fmt.encode(self.prompt(task))
        e = Episode(task, sample, ids, state=_Codes())
        e.phase = "tests" if self.mode == "tdd" else "code"
        if len(ids) >= self.policy.max_context:
            e.too_long(self.policy.max_context, "generate")
        return e

    def act(self, e: Episode, gen, step: int) -> ExecJob | None:
        e.stopped = gen.finish_reason == "stop"
        if e.phase != "code":
            return self._aside(e, gen, step)
        codes: _Codes = e.state
        code = self.fmt.extract(e.task, gen.text)
        first = not codes.all
        e.actions.append(Action(step=step, action_type="generate" if first else "revise",
                                content=gen.text))
        codes.all.append(code)
        if gen.finish_reason == "context":
            e.terminal = "max_steps"  # no room left to answer in the context window
            return None
        if not code.strip():
            e.actions[-1].observation = Observation(status="no_code")
            e.terminal = "no_code"
            return None
        t = e.task
        return ExecJob(code=code, tests=list(t.visible_tests), setup_code=t.setup_code,
                       io_style=t.io_style, entry_point=t.entry_point,
                       timeout_s=self.ctx.timeout_s)

    def _aside(self, e: Episode, gen, step: int) -> None:
        """A turn that runs nothing: the explanation before a fix, or the tests first."""
        kind = "explain" if e.phase == "explain" else "write_tests"
        e.actions.append(Action(step=step, action_type=kind, content=gen.text))
        if gen.finish_reason == "context":
            e.terminal = "max_steps"
            return None
        if kind == "write_tests":
            e.state.tests = self.fmt.extract_tests(e.task, gen.text)
            e.add_context(self.fmt.code_ids(e.task, stopped=e.stopped))
        else:
            e.add_context(self.fmt.fix_ids(e.task, stopped=e.stopped))
        e.phase = "code"
        return None

    def run_batch(self, jobs: list[ExecJob]) -> list[ExecResult]:
        return self.executor.run_many(jobs)

    def run_one(self, job: ExecJob) -> ExecResult:
        return self.executor.run(job)

    def observe(self, e: Episode, res: ExecResult, last_turn: bool) -> None:
        e.actions[-1].observation = observation_from(res)
        e.exec_ms += float(res.duration_ms)
        if res.passed:
            e.terminal = "all_tests_passed"
        elif last_turn:
            e.terminal = "timeout" if res.status == "timeout" else "max_steps"
        elif self.mode == "rubber_duck":
            e.add_context(self.fmt.explain_ids(e.task, feedback_fields(res), stopped=e.stopped))
            e.phase = "explain"
        else:
            e.add_context(self.fmt.feedback_ids(e.task, feedback_fields(res), stopped=e.stopped))

    def finish(self, e: Episode) -> None:
        return None

    def close(self) -> None:
        return None  # the executor is the caller's

    def fields(self, e: Episode) -> dict:
        codes = [c for c in e.state.all if c.strip()]
        return {
            "initial_code": codes[0] if codes else "",
            "final_code": codes[-1] if codes else "",
            "model_tests": e.state.tests,
        }


class _Codes:
    """The code of every code turn, in order, and the tests a tdd episode wrote."""

    def __init__(self) -> None:
        self.all: list[str] = []
        self.tests = ""
