"""What bench/learning_curve.py measures each iteration: held-out pass@k (paired to the SFT
policy), train reward of the slice, the drift check (the same slice under the SFT policy), and
the exact KL to the SFT policy.
"""

from __future__ import annotations

from codeloop.evaluate.metrics import evaluate_sets, pass_at_k
from codeloop.rewards import score_trajectories
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.envs import run_episodes


def se(values: list[float]) -> float:
    """Standard error of the mean (sample std / sqrt(n))."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5


def eval_row(policy, heldout, executor, p, base=None) -> dict:
    """Held-out pass@1 at evaluate.temperature, and again at the rollout temperature.

    Why both: at T 0.2 a sample is nearly the argmax, so only tasks whose argmax flips
    count; at the rollout temperature the estimate also sees the policy get surer of
    what it already half knows, which is most of what a few GRPO steps change.
    """
    hot = p.evaluate.model_copy(update={"temperature": p.rollout.temperature})
    row, base = {"_rates": {}}, base or {}
    for suffix, ev in (("", p.evaluate), ("_hot", hot)):
        m = evaluate_sets(policy, {"heldout": heldout}, executor, ev, timeout_s=p.sandbox.timeout_s,
                          modes=p.rollout)
        s, rates = m["sets"]["heldout"], m["pass_rates"]["heldout"]
        # pass@1 = mean over tasks of c/n (unbiased); its SE is over tasks, the unit
        # sampled. The change since the SFT policy is paired per task: the same tasks
        # are evaluated every iteration, so task difficulty cancels out of its SE.
        ref = base.get(suffix, rates)
        diffs = [rates[t] - ref[t] for t in rates]
        n = ev.samples_per_task
        at8 = [pass_at_k(n, round(r * n), 8) for r in rates.values()] if n >= 8 else []
        row.update({
            f"heldout{suffix}_pass@8": sum(at8) / len(at8) if at8 else float("nan"),
            f"heldout{suffix}_pass@1": s["pass@1"],
            f"heldout{suffix}_pass@1_se": se(list(rates.values())),
            f"heldout{suffix}_delta": sum(diffs) / len(diffs),
            f"heldout{suffix}_delta_se": se(diffs),
        })
        row["_rates"][suffix] = rates
        if not suffix:
            row["heldout_success_rate"] = s["success_rate"]
    return row


def task_rewards(scored) -> dict[str, float]:
    """Mean reward per task of the rows without an infrastructure error."""
    by_task: dict[str, list[float]] = {}
    for t in scored:
        if not t.infra_error:
            by_task.setdefault(t.task_id, []).append(t.reward)
    return {k: sum(v) / len(v) for k, v in by_task.items()}


def train_row(scored) -> dict:
    """Mean train reward (SE over tasks), pass rate, and how often a revise turn fixed it."""
    ok = [t for t in scored if not t.infra_error]
    passed = [t for t in ok if t.terminal_reason == "all_tests_passed"]
    revised = [t for t in ok if len(t.actions) > 1]
    return {
        "train_reward_mean": sum(t.reward for t in ok) / max(1, len(ok)),
        "train_reward_se": se(list(task_rewards(scored).values())),
        "train_pass_rate": len(passed) / max(1, len(ok)),
        # Of the episodes that reached a revise turn, the share a revision made pass.
        "train_revise_fix_rate": sum(len(t.actions) > 1 for t in passed) / max(1, len(revised)),
    }


def drift_row(scored, sft_scored) -> dict:
    """The slice's train reward under the frozen SFT policy, and the paired per-task gain.

    A rising train_reward_mean may only mean an easier slice; the same slice rolled out by
    the SFT policy with the same seeds takes the slice's difficulty out of the difference.
    """
    ok = [t for t in sft_scored if not t.infra_error]
    now, sft = task_rewards(scored), task_rewards(sft_scored)
    gains = [now[t] - sft[t] for t in now if t in sft]
    return {
        "train_reward_sft_policy": sum(t.reward for t in ok) / max(1, len(ok)),
        "train_reward_gain": sum(gains) / max(1, len(gains)),
        "train_reward_gain_se": se(gains),
    }


def sft_rollout(pool, sft, executor, rcfg, p, by_id, it: int):
    """The slice rolled out and scored under the SFT policy, with the iteration's seeds."""
    ctx = EpisodeContext(rcfg, "learning-curve", it, p.sandbox.timeout_s)
    trajs = run_episodes(pool, sft, executor, ctx)
    return score_trajectories(trajs, by_id, p.reward.version, executor)


def kl_to_sft(policy, sft, rows, n_rows: int) -> float:
    """Mean exact KL(policy || SFT policy) over the vocabulary, per generated token.

    Measured at the generated positions of this iteration's rollout (contexts the recent
    policy visits), on the first n_rows by id; temperature 1, the models' own distributions.
    """
    import torch

    rows = sorted((t for t in rows if sum(t.loss_mask[1:])), key=lambda t: t.trajectory_id)
    total, count = 0.0, 0
    with torch.no_grad():
        for t in rows[:n_rows]:
            ids = torch.tensor([t.token_ids])
            lp = torch.log_softmax(policy.model(input_ids=ids).logits[0, :-1].float(), -1)
            lq = torch.log_softmax(sft.model(input_ids=ids).logits[0, :-1].float(), -1)
            mask = torch.tensor(t.loss_mask[1:], dtype=torch.bool)
            kl = (lp.exp() * (lp - lq)).sum(-1)[mask]  # (generated tokens,)
            total, count = total + float(kl.sum()), count + int(mask.sum())
    return total / max(1, count)


def write_rates(out, rows: list[dict]) -> None:
    """Per-task held-out rates of every evaluated row, beside the CSV (``<out>.rates.json``):
    what bench/mode_variants.py pairs across runs on the same held-out tasks."""
    import json
    from pathlib import Path

    rates = {str(r["iteration"]): r["_rates"] for r in rows if r.get("_rates")}
    Path(str(out) + ".rates.json").write_text(json.dumps(rates, sort_keys=True))
