"""Does GRPO learn on the embedded default? N iterations of rollout → score → train on CPU.

Run: ``.venv/bin/python bench/learning_curve.py [--iterations 5] [--out metrics/learning_curve.csv]``

Everything is the library the stages call, in process: synthetic tasks
(``codeloop.generator``), the embedded tiny GPT-2 with its SFT warm start
(``codeloop.policy`` + ``codeloop.sft``), ``codeloop.rollout.run_rollout`` on the real
sandbox, ``codeloop.rewards.score_trajectories`` (params ``reward.version``),
``codeloop.trainer.train_grpo`` (params ``train``; each iteration loads the previous
candidate, as the nightly loop does) and ``codeloop.evaluation.evaluate_sets`` on a
held-out synthetic split never trained on. Per iteration it writes one row: mean train
reward of that iteration's rollouts, held-out pass@1, and the trainer's kl / clip /
frac_reward_zero_std, as a CSV that DVC can plot (``dvc plots show <csv> -x iteration
-y heldout_pass@1``). Iteration 0 is the SFT policy before any GRPO step.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.config import load_params  # noqa: E402
from codeloop.evaluation import evaluate_sets  # noqa: E402
from codeloop.generator import generate_tasks  # noqa: E402
from codeloop.policy import Policy, build_embedded  # noqa: E402
from codeloop.rewards import score_trajectories  # noqa: E402
from codeloop.rollout import run_rollout  # noqa: E402
from codeloop.sandbox import make_executor  # noqa: E402
from codeloop.sft import run_sft  # noqa: E402
from codeloop.trainer import train_grpo  # noqa: E402

FIELDS = (
    "iteration", "train_reward_mean", "train_pass_rate", "heldout_pass@1", "heldout_success_rate",
    "frac_reward_zero_std", "kl", "clip_ratio_region", "loss", "n_in_update", "seconds",
)  # fmt: skip


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=600, help="synthetic tasks generated")
    ap.add_argument("--heldout", type=int, default=60, help="held-out tasks evaluated")
    ap.add_argument("--per-iteration", type=int, default=32, help="train tasks per rollout")
    ap.add_argument("--sft-steps", type=int, default=None, help="override sft.steps")
    ap.add_argument("--steps", type=int, default=None, help="override train.steps")
    ap.add_argument("--lr", type=float, default=None, help="override train.lr")
    ap.add_argument("--beta", type=float, default=None, help="override train.beta")
    ap.add_argument("--group", type=int, default=None, help="override rollout.samples_per_task")
    ap.add_argument("--eval-samples", type=int, default=4, help="samples per held-out task")
    ap.add_argument("--init", default="", help="start from this saved SFT policy (skip SFT)")
    ap.add_argument("--save-init", default="", help="save the SFT policy here for reuse")
    ap.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="override any params key, e.g. --set train.loss_type=grpo (repeatable)",
    )  # fmt: skip
    ap.add_argument("--out", default="metrics/learning_curve.csv")
    return ap.parse_args()


def _params(a: argparse.Namespace):
    p = load_params(a.params)
    train = {
        k: v for k, v in {"steps": a.steps, "lr": a.lr, "beta": a.beta}.items() if v is not None
    }
    upd = {"train": p.train.model_copy(update=train)}
    if a.group:
        upd["rollout"] = p.rollout.model_copy(update={"samples_per_task": a.group})
    # pass@1 from several samples per held-out task: 60 tasks x 1 sample moves by ~6
    # points between two evaluations of the *same* policy, more than GRPO moves it.
    upd["evaluate"] = p.evaluate.model_copy(update={"samples_per_task": a.eval_samples})
    if a.sft_steps is not None and hasattr(p, "sft"):
        upd["sft"] = p.sft.model_copy(update={"steps": a.sft_steps})
    p = p.model_copy(update=upd)
    for item in a.set:
        key, _, value = item.partition("=")
        section, _, field = key.partition(".")
        sec = getattr(p, section)
        kind = type(getattr(sec, field))
        val = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
        p = p.model_copy(update={section: sec.model_copy(update={field: val})})
    return p


def _heldout(policy, tasks, executor, p) -> dict:
    m = evaluate_sets(
        policy, {"heldout": tasks}, executor, p.evaluate, timeout_s=p.sandbox.timeout_s
    )
    return m["sets"]["heldout"]


def main() -> int:
    a = _args()
    p = _params(a)
    tasks = generate_tasks(a.tasks, seed=0, max_depth=3)
    random.Random(1).shuffle(tasks)  # a held-out split with the corpus' depth mix
    heldout, train_tasks = tasks[: a.heldout], tasks[a.heldout :]
    by_id = {t.task_id: t for t in train_tasks}
    rng = random.Random(0)
    executor = make_executor(p.sandbox)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        current = Path(tmp) / "iter-0000"
        if a.init:
            policy = Policy.load(a.init)
            print(f"start policy {a.init} ({policy.model_version[:12]})")
        else:
            policy = build_embedded(p, train_tasks)
            sft = run_sft(policy, train_tasks, p.sft)
            print(
                f"SFT: {sft.get('steps')} steps, loss {sft.get('loss_last')}, {time.perf_counter() - t0:.0f}s"
            )
            if a.save_init:
                policy.save(a.save_init)
        policy.save(current)
        row = {"iteration": 0, **_eval_row(policy, heldout, executor, p)}
        rows.append(row)
        print(_fmt(row))
        for it in range(1, a.iterations + 1):
            t0 = time.perf_counter()
            batch = rng.sample(train_tasks, a.per_iteration)
            rcfg = p.rollout.model_copy(update={"seed": it, "iteration": it})
            trajs = run_rollout(
                batch, policy, executor, rcfg, timeout_s=p.sandbox.timeout_s,
                dataset_version="learning-curve", iteration=it,
            )  # fmt: skip
            scored = score_trajectories(trajs, by_id, p.reward.version, executor)
            nxt = Path(tmp) / f"iter-{it:04d}"
            m = train_grpo(current, scored, p.train, nxt)
            policy, current = Policy.load(nxt), nxt
            ok = [t for t in scored if not t.infra_error]
            row = {
                "iteration": it,
                "train_reward_mean": m["reward_mean"],
                "train_pass_rate": sum(t.terminal_reason == "all_tests_passed" for t in ok) / max(1, len(ok)),
                **{k: m[k] for k in ("frac_reward_zero_std", "kl", "clip_ratio_region", "loss", "n_in_update")},
                **_eval_row(policy, heldout, executor, p),
                "seconds": round(time.perf_counter() - t0, 1),
            }  # fmt: skip
            rows.append(row)
            print(_fmt(row))
    executor.close()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    first, last = rows[0]["heldout_pass@1"], rows[-1]["heldout_pass@1"]
    print(f"held-out pass@1: {first:.3f} (SFT) -> {last:.3f} after {a.iterations} GRPO iterations")
    print(f"wrote {out}")
    return 0


def _eval_row(policy, heldout, executor, p) -> dict:
    s = _heldout(policy, heldout, executor, p)
    return {"heldout_pass@1": s["pass@1"], "heldout_success_rate": s["success_rate"]}


def _fmt(row: dict) -> str:
    return "  ".join(
        f"{k}={row[k]:.4f}" if isinstance(row[k], float) else f"{k}={row[k]}"
        for k in FIELDS
        if k in row
    )


if __name__ == "__main__":
    sys.exit(main())
