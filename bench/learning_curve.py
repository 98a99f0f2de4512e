"""Does GRPO learn on the embedded default? N iterations of rollout → score → train on CPU.

Run: ``.venv/bin/python bench/learning_curve.py [--iterations 6] [--out metrics/learning_curve.csv]``

Everything is the library the stages call, in process: synthetic tasks
(``codeloop.data.generator``), the embedded tiny GPT-2 with its SFT warm start
(``codeloop.policy.model`` + ``codeloop.policy.sft``), ``codeloop.rollout.envs.run_episodes`` on the real
sandbox, ``codeloop.rewards.score_trajectories`` (params ``reward.version``),
``codeloop.train.trainer.train_grpo`` (params ``train``; each iteration loads the previous
candidate, as the nightly loop does) and ``codeloop.evaluate.metrics.evaluate_sets`` on a
held-out synthetic split never trained on. Per iteration it writes one row: mean train
reward of that iteration's rollouts, held-out pass@1, and the trainer's kl / clip /
frac_reward_zero_std, as a CSV that DVC can plot (``dvc plots show <csv> -x iteration
-y heldout_pass@1``). Iteration 0 is the SFT policy before any GRPO step.

GRPO's tasks (default): each iteration rolls out a new slice of ``--pool`` tasks from
``--fresh`` extra generated tasks that SFT never saw, so every train reward is itself
measured on unseen tasks at the rollout temperature. Why not SFT's own tasks: SFT
memorises them (nearly every sample passes and most groups tie), and GRPO on a small fixed
pool learns that pool (its train reward rises) while held-out pass@1 falls. ``--fixed-pool``
and ``--fresh 0`` bring those setups back.

Noise control (the figure is a difference of a few points, so it must be measured,
not sampled): held-out pass@1 is the unbiased estimator over ``--eval-samples`` samples
of each of ``--heldout`` tasks, at evaluate.temperature and at the rollout temperature
(``heldout_hot_*``), with its standard error over tasks and the paired change per task
since the SFT policy; every seed is fixed, so a rerun gives the same rows. Row k's train
reward is of the rollouts that row k's update trained on, i.e. of the policy after k-1
iterations.

Variants (``bench/learning_curve_variants.sh``): runs from one saved SFT
policy (``--init``) with one cached iteration-0 evaluation (``--base-cache``) differ only
in their params (``--set train.replay.fraction=0.5``, ``--steps 8``, ...), so they share
held-out tasks, slices and seeds. Each appends its rows to ``--variants-out`` as they end
(variant, pass@1 and pass@8 at T 0.2 and 1.0 with the paired change and its SE, exact
KL(policy || SFT policy) per generated token on the iteration's rollout, wall time);
``--table CSV`` prints each variant's last evaluated row. Every night's scored rows go to
an in-process archive after train (retention params), which train reads for replay and
``rft_source: archive``, as the stage reads data/archive.

Drift check (``--drift``, one more rollout per iteration): each slice is also rolled out by
the frozen SFT policy with the same seeds; ``train_reward_gain`` (paired per task) is
``train_reward_mean - train_reward_sft_policy``, the learning with slice difficulty taken out.
``--out`` is rewritten after every iteration (a long run can be polled; ``--work`` resumes).
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._curve_measure import (  # noqa: E402
    drift_row,
    eval_row,
    kl_to_sft,
    sft_rollout,
    train_row,
    write_rates,
)
from bench._curve_table import variants_table  # noqa: E402
from bench._curve_work import load_base, resume, save_base, workdir  # noqa: E402
from codeloop.config import load_params  # noqa: E402
from codeloop.data.archive import append_night, query  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.policy.model import Policy, build_embedded  # noqa: E402
from codeloop.policy.sft import run_sft  # noqa: E402
from codeloop.rewards import score_trajectories  # noqa: E402
from codeloop.rollout.context import EpisodeContext  # noqa: E402
from codeloop.rollout.envs import run_episodes  # noqa: E402
from codeloop.sandbox import make_executor  # noqa: E402
from codeloop.train.trainer import train_grpo  # noqa: E402

FIELDS = (
    "iteration", "train_reward_mean", "train_reward_se", "train_pass_rate", "train_revise_fix_rate",
    "train_reward_sft_policy", "train_reward_gain", "train_reward_gain_se",
    "heldout_pass@1", "heldout_pass@1_se", "heldout_delta", "heldout_delta_se", "heldout_pass@8",
    "heldout_hot_pass@1", "heldout_hot_pass@1_se", "heldout_hot_delta", "heldout_hot_delta_se",
    "heldout_hot_pass@8", "heldout_success_rate", "kl_to_sft",
    "frac_reward_zero_std", "kl", "clip_ratio_region", "ratio_mean_first_step", "loss",
    "n_in_update", "steps", "rft_examples", "seconds", "wall_s",
)
# --variants-out: one row per iteration and variant, appended as each iteration ends.
VARIANT_FIELDS = (
    "variant", "iteration", "train_reward_mean", "heldout_pass@1", "heldout_pass@1_se",
    "heldout_delta", "heldout_delta_se", "heldout_pass@8", "heldout_hot_pass@1",
    "heldout_hot_delta", "heldout_hot_delta_se", "heldout_hot_pass@8", "kl_to_sft", "kl",
    "steps", "replay_share", "replay_ess_fraction", "replay_clipped_share", "rft_examples",
    "seconds", "wall_s",
)


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--tasks", type=int, default=1000, help="synthetic tasks generated")
    ap.add_argument("--heldout", type=int, default=200, help="held-out tasks evaluated")
    ap.add_argument("--pool", type=int, default=256, help="tasks rolled out each iteration")
    ap.add_argument(
        "--fixed-pool", action="store_true",
        help="roll out the same --pool tasks every iteration instead of a new slice",
    )
    ap.add_argument(
        "--fresh", type=int, default=2560,
        help="draw GRPO's tasks from this many extra generated tasks that SFT never saw "
        "(0: from SFT's own training tasks). 2560 = 10 slices of 256 with one depth mix "
        "(83%% depth 2, 17%% depth 3); a much larger pool exhausts the generator's depth-2 "
        "programs, and a slice of depth 3 alone has a far lower train reward",
    )
    ap.add_argument("--sft-steps", type=int, default=None, help="override sft.steps")
    ap.add_argument("--steps", type=int, default=None, help="override train.steps")
    ap.add_argument("--lr", type=float, default=None, help="override train.lr")
    ap.add_argument("--beta", type=float, default=None, help="override train.beta")
    ap.add_argument("--group", type=int, default=None, help="override rollout.samples_per_task")
    ap.add_argument("--eval-samples", type=int, default=2, help="samples per held-out task")
    ap.add_argument("--init", default="", help="start from this saved SFT policy (skip SFT)")
    ap.add_argument(
        "--work", default="",
        help="keep each iteration's policy, the archive and iteration 0's evaluation here; "
        "rerun with the same --work and --out to go on after the last finished iteration, "
        "paired with iteration 0 as before (default: a temporary directory)",
    )
    ap.add_argument("--save-init", default="", help="save the SFT policy here for reuse")
    ap.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="override any params key, e.g. --set train.loss_type=grpo (repeatable)",
    )
    ap.add_argument("--out", default="metrics/learning_curve.csv")
    ap.add_argument("--variant", default="grpo", help="this run's name in --variants-out")
    ap.add_argument("--variants-out", default="", help="append per-iteration rows here")
    ap.add_argument(
        "--eval-at", default="",
        help="comma-separated iterations to evaluate (0 and the last always); default: all",
    )
    ap.add_argument(
        "--drift", action="store_true",
        help="also roll each slice out with the SFT policy (same seeds): train_reward_sft_policy",
    )
    ap.add_argument("--kl-rows", type=int, default=64, help="rollout rows for kl_to_sft")
    ap.add_argument(
        "--base-cache", default="",
        help="JSON of iteration 0's evaluation: reused when present (same --init and eval "
        "flags), written otherwise; variants from one SFT policy then share one baseline",
    )
    ap.add_argument("--table", default="", help="print the comparison table of this CSV; exit")
    return ap.parse_args()


def _params(a: argparse.Namespace):
    p = load_params(a.params)
    train = {
        k: v for k, v in {"steps": a.steps, "lr": a.lr, "beta": a.beta}.items() if v is not None
    }
    upd = {"train": p.train.model_copy(update=train)}
    if a.group:
        upd["rollout"] = p.rollout.model_copy(update={"samples_per_task": a.group})
    # pass@1 from several samples per held-out task: with one sample of a few dozen tasks
    # two evaluations of the *same* policy differ by more than GRPO moves it.
    # Held-out answers get the rollout's token budget: every reference body fits in it,
    # so a longer answer is wrong either way, and one runaway row would keep
    # its whole generation batch running to evaluate.max_new_tokens.
    upd["evaluate"] = p.evaluate.model_copy(
        update={"samples_per_task": a.eval_samples, "max_new_tokens": p.rollout.max_new_tokens}
    )
    if a.sft_steps is not None and hasattr(p, "sft"):
        upd["sft"] = p.sft.model_copy(update={"steps": a.sft_steps})
    p = p.model_copy(update=upd)
    for item in a.set:
        key, _, value = item.partition("=")
        p = _set(p, key.split("."), value)
    return p


def _set(model, keys: list[str], value: str):
    """model with the (nested) field keys set to value, parsed as the field's type."""
    if len(keys) > 1:
        sub = getattr(model, keys[0])
        return model.model_copy(update={keys[0]: _set(sub, keys[1:], value)})
    kind = type(getattr(model, keys[0]))
    val = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return model.model_copy(update={keys[0]: val})


def _start_policy(a, p, train_tasks):
    if a.init:
        policy = Policy.load(a.init)
        print(f"start policy {a.init} ({policy.model_version[:12]})")
        return policy
    t0 = time.perf_counter()
    policy = build_embedded(p, train_tasks)
    sft = run_sft(policy, train_tasks, p.sft, mode=p.rollout.mode)
    print(
        f"SFT: {sft.get('steps')} steps, {sft.get('examples')} examples "
        f"({sft.get('revise_examples')} revise), loss {sft.get('loss_last')}, "
        f"{time.perf_counter() - t0:.0f}s"
    )
    if a.save_init:
        policy.save(a.save_init)
    return policy


def _base_row(a, policy, heldout, executor, p) -> dict:
    """Iteration 0's row (the SFT policy's evaluation), from --base-cache when it is there."""
    import json

    cache = Path(a.base_cache) if a.base_cache else None
    if cache and cache.exists():
        row = json.loads(cache.read_text())
        print(f"iteration 0 from {cache}")
        return row
    row = {"iteration": 0, **eval_row(policy, heldout, executor, p), "kl_to_sft": 0.0}
    if cache:
        cache.write_text(json.dumps(row))
    return row


def _resumed_base(a, work: Path, heldout, executor, p) -> dict:
    """Iteration 0's per-task rates for a resumed run: kept in the work directory at
    iteration 0, else --base-cache, else the SFT policy (iter-0000) evaluated again; never
    the policy the run resumes from, which would pair later rows against itself."""
    row = load_base(work)
    if row is None:
        row = _base_row(a, Policy.load(work / "iter-0000"), heldout, executor, p)
        save_base(work, row)
    return row["_rates"]


def _write_rows(path: str, rows: list[dict]) -> None:
    """The whole table so far: rewritten after every iteration, so a long run shows its rows."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    write_rates(out, rows)


def _write_variant_row(path: str, variant: str, row: dict) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    new = not out.exists() or out.stat().st_size == 0
    if not new and out.open().readline().strip() != ",".join(VARIANT_FIELDS):
        raise SystemExit(f"{out}: its header is not this bench's columns; write a new file")
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=VARIANT_FIELDS, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow({"variant": variant, **row})


def _iterate(a, p, it, state, executor, heldout, by_id, base):
    """One rollout -> score -> train (with the archive) -> evaluate iteration; its row."""
    t0 = time.perf_counter()
    rl_tasks, tmp = state["rl_tasks"], state["tmp"]
    # --fixed-pool: the same tasks every iteration, so rewards compare like with like.
    start = 0 if a.fixed_pool else (it - 1) * a.pool % len(rl_tasks)
    pool = (rl_tasks + rl_tasks)[start : start + a.pool]
    rcfg = p.rollout.model_copy(update={"seed": p.rollout.seed + it, "iteration": it})
    ctx = EpisodeContext(rcfg, "learning-curve", it, p.sandbox.timeout_s)
    trajs = run_episodes(pool, state["policy"], executor, ctx)
    scored = score_trajectories(trajs, by_id, p.reward.version, executor)
    archive = Path(tmp) / "archive"
    archived = query(archive) if archive.exists() else []  # earlier nights, as the stage reads
    nxt = Path(tmp) / f"iter-{it:04d}"
    m = train_grpo(state["current"], scored, p.train, nxt, archived, it)
    append_night(archive, scored, p.retention)  # as the nightly flow does after promotion
    state["policy"], state["current"] = Policy.load(nxt), nxt
    keys = ("frac_reward_zero_std", "kl", "clip_ratio_region", "ratio_mean_first_step")
    extra = ("steps", "replay_share", "replay_ess_fraction", "replay_clipped_share")
    row = {
        "iteration": it,
        **train_row(scored),
        **{k: m[k] for k in (*keys, "loss", "n_in_update")},
        **{k: m.get(k, 0) for k in (*extra, "rft_examples")},
        "kl_to_sft": kl_to_sft(state["policy"], state["sft"], scored, a.kl_rows),
    }
    if a.drift:  # iteration 1's rollout policy is the SFT policy: its rows are the same
        sft_rows = (
            scored if it == 1 else sft_rollout(pool, state["sft"], executor, rcfg, p, by_id, it)
        )
        row.update(drift_row(scored, sft_rows))
    if it in state["eval_at"]:
        row.update(eval_row(state["policy"], heldout, executor, p, base))
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def main() -> int:
    a = _args()
    if a.table:
        return variants_table(a.table)
    p = _params(a)
    tasks = generate_tasks(a.tasks + a.fresh, seed=0, max_depth=3)
    tasks, fresh = tasks[: a.tasks], tasks[a.tasks :]
    random.Random(1).shuffle(tasks)  # a held-out split with the corpus' depth mix
    heldout, train_tasks = tasks[: a.heldout], tasks[a.heldout :]
    by_id = {t.task_id: t for t in train_tasks + fresh}
    executor = make_executor(p.sandbox)
    eval_at = {int(x) for x in a.eval_at.split(",") if x} or set(range(a.iterations + 1))
    t_start = time.perf_counter()
    with workdir(a.work) as tmp:
        current = Path(tmp) / "iter-0000"
        rows = resume(a.work, a.out, Path(tmp))
        if rows:  # go on from the last finished iteration; wall time keeps counting
            t_start -= rows[-1]["wall_s"]
            policy = Policy.load(Path(tmp) / f"iter-{rows[-1]['iteration']:04d}")
            base = _resumed_base(a, Path(tmp), heldout, executor, p)
        else:
            policy = _start_policy(a, p, train_tasks)
            policy.save(current)
            row = _base_row(a, policy, heldout, executor, p)
            save_base(Path(tmp), row)
            row["wall_s"] = round(time.perf_counter() - t_start, 1)
            base = row["_rates"]
            rows.append(row)
            _emit(a, rows, row)
        state = {"rl_tasks": fresh or train_tasks, "tmp": tmp, "policy": policy,
                 "current": Path(tmp) / f"iter-{rows[-1]['iteration']:04d}",
                 "sft": Policy.load(current), "eval_at": eval_at | {0, a.iterations}}
        for it in range(rows[-1]["iteration"] + 1, a.iterations + 1):
            row = _iterate(a, p, it, state, executor, heldout, by_id, base)
            row["wall_s"] = round(time.perf_counter() - t_start, 1)
            rows.append(row)
            _emit(a, rows, row)
    executor.close()
    if not a.variants_out:  # a comparison run: the per-variant CSV is its output
        _summary(a, rows)
    return 0


def _summary(a, rows: list[dict]) -> None:
    """The first and last evaluated rows, side by side."""
    evaluated = [r for r in rows if "heldout_pass@1" in r]
    r0, r1 = evaluated[0], evaluated[-1]
    print(
        f"held-out pass@1: {r0['heldout_pass@1']:.3f} +- {r0['heldout_pass@1_se']:.3f} (SFT) -> "
        f"{r1['heldout_pass@1']:.3f} +- {r1['heldout_pass@1_se']:.3f} after {a.iterations} "
        f"GRPO iterations (paired change {r1['heldout_delta']:+.3f} +- {r1['heldout_delta_se']:.3f})"
    )
    if len(rows) > 1:
        # Past len(--fresh) / --pool iterations the slices come round again (new seeds).
        pool = "the fixed pool" if a.fixed_pool else "a new slice each iteration"
        print(
            f"held-out pass@1 at the rollout temperature: {r0['heldout_hot_pass@1']:.3f} -> "
            f"{r1['heldout_hot_pass@1']:.3f} (paired change {r1['heldout_hot_delta']:+.3f} +- "
            f"{r1['heldout_hot_delta_se']:.3f})"
        )
        print(
            f"train reward ({pool}): {rows[1]['train_reward_mean']:.3f} (SFT policy) -> "
            f"{rows[-1]['train_reward_mean']:.3f} (policy of iteration {a.iterations - 1})"
        )
    print(f"wrote {a.out}")


def _emit(a, rows: list[dict], row: dict) -> None:
    """Print the iteration's row and write it out (--variants-out, else --out)."""
    print(_fmt(row), flush=True)
    if a.variants_out:
        _write_variant_row(a.variants_out, a.variant, row)
    else:
        _write_rows(a.out, rows)


def _fmt(row: dict) -> str:
    return "  ".join(
        f"{k}={row[k]:.4f}" if isinstance(row[k], float) else f"{k}={row[k]}"
        for k in FIELDS
        if k in row
    )


if __name__ == "__main__":
    sys.exit(main())
