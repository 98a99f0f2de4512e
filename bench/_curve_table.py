"""The comparison tables of bench/learning_curve.py (``--table CSV``): for a variants CSV each
variant's last evaluated row beside the SFT policy, for one run's ``--out`` CSV every evaluated
iteration; with the paired per-task SE.
"""

from __future__ import annotations

import csv

HEADER = ("T0.2 pass@1 (change +- paired SE) | T0.2 pass@8 | T1.0 pass@1 (change +- SE) | "
          "T1.0 pass@8 | KL to SFT | wall s | T0.2 change/SE")


def _floats(r: dict) -> dict:
    return {k: float(v) if v not in ("", None) else float("nan") for k, v in r.items()
            if k != "variant"}


def _cells(r: dict) -> str:
    f = _floats(r)
    return (
        f"{f['heldout_pass@1']:.3f} ({f['heldout_delta']:+.3f} "
        f"+- {f['heldout_delta_se']:.3f}) | {f['heldout_pass@8']:.3f} | "
        f"{f['heldout_hot_pass@1']:.3f} ({f['heldout_hot_delta']:+.3f} +- "
        f"{f['heldout_hot_delta_se']:.3f}) | {f['heldout_hot_pass@8']:.3f} | "
        f"{f['kl_to_sft']:.4f} | {f['wall_s']:.0f} | "
        f"{f['heldout_delta'] / f['heldout_delta_se'] if f['heldout_delta_se'] else 0:+.1f}"
    )


def variants_table(path: str) -> int:
    """Each variant's last evaluated row (or each evaluated iteration of one run), with the SE."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if rows and "variant" not in rows[0]:
        return curve_table(rows)
    last: dict[str, dict] = {}
    for r in rows:
        if r["heldout_pass@1"] and int(r["iteration"]) > 0:
            last[r["variant"]] = r
    base = next((r for r in rows if r["iteration"] == "0"), None)
    if base:
        print(f"SFT policy: T0.2 pass@1 {float(base['heldout_pass@1']):.3f}, "
              f"pass@8 {base['heldout_pass@8']}, T1.0 pass@1 "
              f"{float(base['heldout_hot_pass@1']):.3f}, pass@8 {base['heldout_hot_pass@8']}")
    print(f"variant | iters | {HEADER}")
    for name, r in last.items():
        print(f"{name} | {r['iteration']} | {_cells(r)}")
    return 0


def curve_table(rows: list[dict]) -> int:
    """One run's evaluated iterations, and its drift check: train reward on each slice under
    the policy and under the SFT policy (their paired per-task gain +- SE)."""
    print(f"iteration | {HEADER} | train reward (SFT policy, gain +- SE)")
    for r in rows:
        if r["heldout_pass@1"]:
            f = _floats(r)
            drift = (
                f"{f['train_reward_mean']:.3f} ({f['train_reward_sft_policy']:.3f}, "
                f"{f['train_reward_gain']:+.3f} +- {f['train_reward_gain_se']:.3f})"
            )
            print(f"{r['iteration']} | {_cells(r)} | {drift}")
    return 0
