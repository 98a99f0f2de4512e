"""Can a policy copy what its edits need? Teacher-forced accuracy on held-out expert episodes.

Run: ``.venv/bin/python bench/agent_copy.py CHECKPOINT [CHECKPOINT ...] [--heldout 90]``
(e.g. the iteration-0 policies ``bench/agent_curve.py --save-init DIR`` writes, one per
``--arch``; under a minute a checkpoint after the demos are played)

The scripted expert (``codeloop.data.repos.expert``) solves the held-out synthetic repository
tasks of params.yaml's frozen set (seed ``clean.repo_tasks.heldout_seed``, never a training
repository) through the real ``AgentEnv``; each episode is tokenised as SFT and rollout do
(``agent_format``), and one forward pass scores, per tool call, how many of the call's tokens
are the policy's argmax given the expert's prefix. An edit's ``old`` text must match the file
exactly, so an edit call is "exact" only if every token is; the digits in an edit (numbers
the model must copy from the file it read, or from its own ``old`` text just above, since
the planted bugs of the default operators never change a number) are scored apart.
The baseline is the other checkpoint(s) in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from codeloop.agent.env import AgentEnv  # noqa: E402
from codeloop.agent.executor import copy_task_envs  # noqa: E402
from codeloop.config import load_params  # noqa: E402
from codeloop.data.repos.expert import expert_calls  # noqa: E402
from codeloop.data.repos.store import store_files  # noqa: E402
from codeloop.data.repos.synth import generate_repo_tasks  # noqa: E402
from codeloop.policy.agent_format import agent_format_for  # noqa: E402
from codeloop.policy.model import Policy  # noqa: E402
from codeloop.rollout.demos import expert_demos  # noqa: E402
from codeloop.sandbox import make_executor  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_curve import KNOB  # noqa: E402  (the difficulty knob's keys, one list for both benches)


def heldout_demos(params_file: str, n: int) -> list:
    """The expert's episodes on the first ``n`` held-out repository tasks."""
    p = load_params(params_file)
    r = p.clean.repo_tasks
    tasks, trees = generate_repo_tasks(n, seed=r.heldout_seed, tasks_per_repo=r.tasks_per_repo,
                                       operators=tuple(r.operators),
                                       **{k: getattr(r, k) for k in KNOB})
    with tempfile.TemporaryDirectory() as tmp:
        repos = f"{tmp}/repos"
        for files in trees.values():
            store_files(files, repos)
        ex = make_executor(p.sandbox, workspaces=True,
                           envs_root=copy_task_envs(tasks, f"{tmp}/none", f"{tmp}/envs"))
        try:
            env = AgentEnv(ex, p.agent.model_copy(update={"max_steps": 500}), repos)
            demos, report = expert_demos(tasks, env, lambda t: expert_calls(t, repos))
        finally:
            ex.close()
    print(f"held-out expert episodes: {report}")
    return demos


def _spans(fmt, task, steps) -> tuple[list[int], list[tuple[str, int, int]]]:
    """The episode's token ids and (tool, start, end) of each call the model writes."""
    ids, spans = fmt.prompt_ids(task), []
    for k, (call, obs) in enumerate(steps):
        c = fmt.call_ids(task, call)
        spans.append((call["tool"], len(ids), len(ids) + len(c)))
        ids = ids + c
        if k + 1 < len(steps):
            ids = ids + fmt.observation_ids(task, obs)
    return ids, spans


def score(policy: Policy, demos: list) -> dict[str, list[int]]:
    """{row: [tokens right, tokens, calls exact, calls]} per tool, plus edit digits."""
    fmt, tok, rows = agent_format_for(policy.tokenizer), policy.tokenizer, {}
    for task, steps in demos:
        ids, spans = _spans(fmt, task, steps)
        with torch.no_grad():
            pred = policy.model(torch.tensor([ids])).logits[0].argmax(-1).tolist()
        for tool, a, b in spans:
            ok = [pred[i - 1] == ids[i] for i in range(a, b)]
            row = rows.setdefault(tool, [0, 0, 0, 0])
            row[0], row[1], row[2], row[3] = (
                row[0] + sum(ok),
                row[1] + len(ok),
                row[2] + all(ok),
                row[3] + 1,
            )
            if tool != "edit":
                continue
            digits = [o for i, o in zip(range(a, b), ok, strict=True)
                      if tok.decode([ids[i]]).strip().isdigit()]
            d = rows.setdefault("edit digits", [0, 0, 0, 0])
            d[0], d[1] = d[0] + sum(digits), d[1] + len(digits)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--heldout", type=int, default=90, help="held-out repo tasks (expert-solved)")
    a = ap.parse_args()
    demos = heldout_demos(a.params, a.heldout)
    print(f"{'checkpoint':40s} {'row':12s} {'token acc':>9s} {'calls exact':>12s}")
    for path in a.checkpoints:
        policy = Policy.load(path, device="cpu")
        for row, (right, n, exact, calls) in score(policy, demos).items():
            calls_txt = f"{exact}/{calls}" if calls else "-"
            print(f"{path[-40:]:40s} {row:12s} {right / max(1, n):9.3f} {calls_txt:>12s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
