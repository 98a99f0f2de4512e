"""Canonical records shared by every stage: tasks and trajectories.

A task is what the clean stage writes and everyone else reads; a trajectory is one
episode of the agent on one task (docs/design.md, "Trajectory"). Both are plain dataclasses
so the library stays usable from a notebook; `codeloop.io` turns them into Parquet rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

IO_STYLES = ("function", "stdio")

# Why terminal reasons are a closed set: doctor and evaluation count them, and a typo
# would silently create a new category.
TERMINAL_REASONS = (
    "all_tests_passed",
    "max_steps",
    "timeout",
    "no_code",
    "error",
    "infra_error",
    "submitted",  # an agent called submit()
    "invalid_action_limit",  # an agent made too many malformed or failing calls
    "context_full",  # the episode filled the model's context
)

ACTION_TYPES = ("generate", "revise", "run_tests", "tool", "explain", "write_tests")
# Actions whose content the model generated: one run of loss_mask 1 each in the token layout
# (codeloop.rollout.loop), but for a task whose prompt left no room to answer.
MODEL_ACTIONS = ("generate", "revise", "tool", "explain", "write_tests")
PROMPT_TOO_LONG = "prompt_too_long"  # observation status of a task whose prompt overflows
TASK_KINDS = ("function", "repo")
# The agent's action space; a call naming anything else is an error observation.
TOOLS = ("list_files", "read_file", "search", "edit", "write_file", "run_tests", "bash", "submit")


@dataclass
class Task:
    """One programming task in codeloop's canonical form.

    Tests are source strings. For io_style "function" each test is one Python statement,
    normally ``assert <call> == <expected>``; ``setup_code`` runs before them (MBPP's
    test_setup_code). For io_style "stdio" each test is a JSON object string
    ``{"input": "...", "output": "..."}``.
    """

    task_id: str
    source: str
    prompt: str
    entry_point: str = ""
    io_style: str = "function"
    reference_solution: str = ""
    setup_code: str = ""
    visible_tests: list[str] = field(default_factory=list)
    hidden_tests: list[str] = field(default_factory=list)
    difficulty: int = -1  # generator knob or bucket id; -1 when unknown
    metadata: dict[str, Any] = field(default_factory=dict)  # license, provenance, ...
    # Repository tasks (kind "repo", SWE-bench's instance fields; empty for functions).
    # task_id is the instance_id, prompt the problem_statement, visible_tests the node ids
    # the agent may run and hidden_tests node ids never shown or rewarded (their files are
    # absent from the workspace). The snapshot is the pristine tree stored once under
    # data/clean/repos/<snapshot>/; bug_patch turns it into the task's base (minted and
    # synthetic tasks share one snapshot per repository, as SWE-smith does), patch is the
    # reference fix against that base, test_patch adds the tests FAIL_TO_PASS names.
    kind: str = "function"  # one of TASK_KINDS
    repo: str = ""  # owner/name or package name
    snapshot: str = ""  # content hash of the stored tree (SWE-bench's base_commit)
    bug_patch: str = ""
    patch: str = ""
    test_patch: str = ""
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    environment: str = ""  # env dir name under data/clean/envs/ or a docker image

    def all_tests(self) -> list[str]:
        return list(self.visible_tests) + list(self.hidden_tests)

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["metadata"] = json.dumps(self.metadata, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Task:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in row.items() if k in names}
        meta = kw.get("metadata", {})
        kw["metadata"] = json.loads(meta) if isinstance(meta, str) and meta else (meta or {})
        for name in ("visible_tests", "hidden_tests", "fail_to_pass", "pass_to_pass"):
            kw[name] = list(kw.get(name) or [])
        if kw.get("difficulty") is None:
            kw["difficulty"] = -1
        return cls(**kw)


def by_kind(tasks: Iterable[Task]) -> dict[str, list[Task]]:
    """Tasks split by kind (every kind of TASK_KINDS a key), each list in input order."""
    out: dict[str, list[Task]] = {k: [] for k in TASK_KINDS}
    for t in tasks:
        if t.kind not in out:
            raise ValueError(f"task {t.task_id}: field kind {t.kind!r}; allowed: {TASK_KINDS}")
        out[t.kind].append(t)
    return out


def require_kind(task: Task, kind: str, what: str) -> None:
    """ValueError naming the task when ``what`` (a caller's name) gets a task of another kind."""
    if task.kind != kind:
        raise ValueError(f"{what}: task {task.task_id} is of kind {task.kind!r}, not {kind!r}")


@dataclass
class Observation:
    """What the environment returned after running the code of one action."""

    stdout: str = ""
    stderr: str = ""
    status: str = ""  # a sandbox status: passed, failed, syntax_error, timeout, ...
    failing_test: str = ""
    duration_ms: float = 0.0
    tests_passed: int = 0
    tests_total: int = 0
    # agent tools: the tool's output as the agent read it, whether it was cut to the
    # observation budget, and the error kind ("" on success: unknown_tool, bad_args,
    # parse_error, outside_workspace, no_match, not_unique, timeout, ...)
    output: str = ""
    truncated: bool = False
    error_kind: str = ""


@dataclass
class Action:
    """One step of an episode: the model's output and the environment's answer."""

    step: int
    action_type: str  # one of ACTION_TYPES
    content: str  # the model's raw text for generate/revise
    observation: Observation = field(default_factory=Observation)
    reward: float = 0.0  # step-level reward (process reward); filled by score
    tool: str = ""  # action_type "tool": one of TOOLS (or what the model wrote)
    args: str = ""  # the call's arguments as a JSON object string
    raw: str = ""  # the model's text for this turn, unparsed
    duration_ms: float = 0.0


@dataclass
class TrajectoryMetadata:
    model_name: str = ""
    model_version: str = ""  # content hash of the checkpoint that sampled
    temperature: float = 1.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    max_new_tokens: int = 0
    env_timeout: float = 0.0
    execution_time_ms: float = 0.0
    prompt_template_version: str = ""
    dataset_version: str = ""
    reward_fn_version: str = ""  # filled by the score stage
    seed: int = 0
    episode_mode: str = ""  # rollout.mode / agent_mode that sampled it; "" = self_debug
    tests_version: str = ""  # the task's tests (codeloop.data.augment); "" = before it existed
    visible_subset: float = 1.0  # share of the visible tests the episode saw (reward.visible_subset)
    engine: str = "hf"  # what sampled it (policy.engine): train corrects an engine's log-probs


@dataclass
class Trajectory:
    """One episode. Token fields let train rebuild the exact sampled sequence.

    ``token_ids`` is the whole episode as the model saw it (prompt, generations and
    environment feedback, in order); ``loss_mask`` is 1 on model-generated tokens only;
    ``sample_logprobs`` are the sampler's log-probs on those tokens (0 elsewhere).
    """

    trajectory_id: str
    task_id: str
    prompt_key: str
    prompt: str
    initial_code: str = ""
    actions: list[Action] = field(default_factory=list)
    final_code: str = ""
    reward: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    done: bool = False
    terminal_reason: str = ""
    iteration: int = 0
    metadata: TrajectoryMetadata = field(default_factory=TrajectoryMetadata)
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    sample_logprobs: list[float] = field(default_factory=list)
    infra_error: str = ""  # non-empty: our infrastructure failed; excluded from training
    # agent episodes (repository tasks): the workspace's diff against its base (test files
    # excluded) that score judges, and the episode's tool counts
    final_diff: str = ""
    tool_calls: int = 0
    tool_errors: int = 0
    tests_run: int = 0
    # tdd episodes: the tests the model wrote before its code (assert statements, one per
    # line), judged by score against the reference and wrong variants; never in place of
    # the task's own tests
    model_tests: str = ""

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        # Components are an open set per reward version: a JSON map keeps the Parquet
        # schema stable across versions.
        row["reward_components"] = json.dumps(self.reward_components, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Trajectory:
        kw = dict(row)
        kw["actions"] = [
            Action(
                **{
                    **a,
                    "observation": Observation(**(a.get("observation") or {})),
                }
            )
            for a in (row.get("actions") or [])
        ]
        comps = row.get("reward_components") or {}
        kw["reward_components"] = json.loads(comps) if isinstance(comps, str) else dict(comps)
        # A column a file was written without reads as null: the field's default stands.
        meta = {k: v for k, v in (row.get("metadata") or {}).items() if v is not None}
        kw["metadata"] = TrajectoryMetadata(**meta)
        for name in ("token_ids", "loss_mask", "sample_logprobs"):
            kw[name] = list(row.get(name) or [])
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in kw.items() if k in names and v is not None})


def is_agent_episode(t: Trajectory) -> bool:
    """An episode of a repository task (tool calls in a workspace), told by what the row
    holds: a tool action, a final diff, or the agent prompt template that sampled it."""
    return (
        bool(t.final_diff)
        or any(a.action_type == "tool" for a in t.actions)
        or t.metadata.prompt_template_version.startswith("agent")
    )


def episode_kind(t: Trajectory) -> str:
    """The kind (TASK_KINDS) of the task an episode played: "repo" for agent episodes."""
    return "repo" if is_agent_episode(t) else "function"


def model_turns(t: Trajectory) -> list[Action]:
    """The actions the model generated, in order (none for a prompt that overflowed)."""
    return [
        a
        for a in t.actions
        if a.action_type in MODEL_ACTIONS and a.observation.status != PROMPT_TOO_LONG
    ]


def resolved_episode(t: Trajectory) -> bool:
    """A repository episode the trusted judge resolved (the repo rewards' ``resolved``
    component), not zeroed as a hack (``hack_zeroed``), not an infra failure."""
    c = t.reward_components
    return not t.infra_error and c.get("resolved", 0) >= 1 and not c.get("hack_zeroed", 0)


def passing(t: Trajectory) -> bool:
    """An episode that succeeded: every visible test passed (function) or resolved (repo)."""
    return (not t.infra_error and t.terminal_reason == "all_tests_passed") or resolved_episode(t)
