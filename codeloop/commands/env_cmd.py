"""`codeloop env`: play an agent episode of one repository task through the real environment.

``--script actions.jsonl`` (one JSON tool call per line, e.g. ``{"tool": "read_file",
"args": {"path": "pkg/a.py"}}``) plays them in order and writes the episode to ``--out``:
``{"trajectory": <the trajectory row>, "counters": {...}}`` (actions carry tool, args, raw,
observation and duration_ms; the row has final_diff and the tool counts). ``--interactive``
reads calls from stdin and prints each observation, so a person can drive the agent's
environment by hand. Exit status: 0 played; 2 bad input (task, script, params).
"""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import asdict

HELP = "Play a scripted (or typed) agent episode of one repository task; write the trajectory."


def add_arguments(p) -> None:
    p.add_argument("--tasks", required=True, help="tasks file (Parquet, or JSON lines of rows)")
    p.add_argument("--task-id", required=True, help="the repository task to play")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--script", help="JSON lines, one tool call per line")
    src.add_argument("--interactive", action="store_true", help="read calls from stdin")
    p.add_argument("--out", help="where to write the episode JSON (default: not written)")
    p.add_argument("--repos", default="data/clean/repos", help="snapshot store (repos dir)")
    p.add_argument("--params", default="params.yaml", help="params file (sandbox, agent)")
    p.add_argument("--bash", action="store_true", help="offer the bash tool (agent.bash)")


def load_task(path: str, task_id: str):
    """The task ``task_id`` of a Parquet or JSON-lines tasks file (ValueError if absent)."""
    from codeloop.io import read_tasks
    from codeloop.schema import Task

    if path.endswith((".jsonl", ".json")):
        with open(path, encoding="utf-8") as fh:
            tasks = [Task.from_row(json.loads(line)) for line in fh if line.strip()]
    else:
        tasks = read_tasks(path)
    for t in tasks:
        if t.task_id == task_id:
            return t
    raise ValueError(f"{path}: no task {task_id!r}")


def episode_row(ep) -> dict:
    """The episode as ``{"trajectory": row, "counters": ...}``."""
    from codeloop.schema import Trajectory

    c = ep.counters
    traj = Trajectory(
        trajectory_id=f"env-{uuid.uuid4().hex[:12]}", task_id=ep.task.task_id,
        prompt_key=ep.task.task_id, prompt=ep.task.prompt, actions=list(ep.actions),
        done=ep.done, terminal_reason=ep.terminal_reason, final_diff=ep.final_diff(),
        tool_calls=c.tool_calls, tool_errors=c.tool_errors, tests_run=c.tests_run,
    )
    return {"trajectory": traj.to_row(), "counters": asdict(c)}


def _judge(task, diff: str, repos: str, executor) -> dict:
    """The score stage's verdict on the episode's final diff (codeloop.agent.judge): a fresh
    base, test files restored, FAIL_TO_PASS + PASS_TO_PASS + hidden run in the sandbox."""
    from codeloop.agent.judge import judge_patch

    return judge_patch(task, diff, repos, executor).to_row()


def _calls(args):
    if args.interactive:
        for line in sys.stdin:
            if line.strip():
                yield line.strip()
        return
    with open(args.script, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield line.strip()  # a malformed line is the agent's parse error, played


def run(args) -> int:
    from codeloop.agent.env import AgentEnv
    from codeloop.agent.executor import open_executor
    from codeloop.config import ConfigError, load_params

    try:
        params = load_params(args.params)
        task = load_task(args.tasks, args.task_id)
        if args.script:
            open(args.script).close()
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"codeloop env: {exc}", file=sys.stderr)
        return 2
    cfg = params.agent.model_copy(update={"bash": params.agent.bash or args.bash})
    executor = open_executor(params.sandbox, cfg, [task])
    try:
        env = AgentEnv(executor, cfg, args.repos)
        try:
            ep = env.reset(task)
        except (FileNotFoundError, ValueError) as exc:  # no snapshot, a patch that fails
            print(f"codeloop env: {exc}", file=sys.stderr)
            return 2
        try:
            if args.interactive:
                print(f"task {task.task_id}: {task.prompt}\n(one JSON tool call per line)")
            for call in _calls(args):
                obs = ep.step(call)
                if args.interactive:
                    kind = f" [{obs.error_kind}]" if obs.error_kind else ""
                    print(f"--- observation{kind}\n{obs.output}", flush=True)
                if ep.done:
                    break
            row = episode_row(ep)
        finally:
            ep.close()
        row["verdict"] = _judge(task, row["trajectory"]["final_diff"], args.repos, executor)
    finally:
        executor.close()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(row, fh, indent=1, default=str)
    t = row["trajectory"]
    v = row["verdict"]
    print(f"{task.task_id}: {t['tool_calls']} calls, {t['tool_errors']} errors, "
          f"{t['tests_run']} test runs, end: {t['terminal_reason'] or 'script ended'}; "
          f"resolved: {v['resolved']} (FAIL_TO_PASS {v['f2p_passed']}/{v['f2p_total']}, "
          f"PASS_TO_PASS {v['p2p_passed']}/{v['p2p_total']}"
          f"{', flags ' + ','.join(v['hack_flags']) if v['hack_flags'] else ''})")
    return 0
