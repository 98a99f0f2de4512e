"""The comparison table of bench/learning_curve.py's variant runs (``--table CSV``): each
variant's last evaluated row beside the SFT policy, with the paired per-task SE.
"""

from __future__ import annotations

import csv


def variants_table(path: str) -> int:
    """Each variant's last evaluated row: the comparison table, with the paired SE."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    last: dict[str, dict] = {}
    for r in rows:
        if r["heldout_pass@1"] and int(r["iteration"]) > 0:
            last[r["variant"]] = r
    base = next((r for r in rows if r["iteration"] == "0"), None)
    if base:
        print(f"SFT policy: T0.2 pass@1 {float(base['heldout_pass@1']):.3f}, "
              f"pass@8 {base['heldout_pass@8']}, T1.0 pass@1 "
              f"{float(base['heldout_hot_pass@1']):.3f}, pass@8 {base['heldout_hot_pass@8']}")  # fmt: skip
    print("variant | iters | T0.2 pass@1 (change +- paired SE) | T0.2 pass@8 | "
          "T1.0 pass@1 (change +- SE) | T1.0 pass@8 | KL to SFT | wall s | T0.2 change/SE")  # fmt: skip
    for name, r in last.items():
        f = {k: float(v) if v not in ("", None) else float("nan") for k, v in r.items()
             if k not in ("variant",)}  # fmt: skip
        print(
            f"{name} | {r['iteration']} | {f['heldout_pass@1']:.3f} ({f['heldout_delta']:+.3f} "
            f"+- {f['heldout_delta_se']:.3f}) | {f['heldout_pass@8']:.3f} | "
            f"{f['heldout_hot_pass@1']:.3f} ({f['heldout_hot_delta']:+.3f} +- "
            f"{f['heldout_hot_delta_se']:.3f}) | {f['heldout_hot_pass@8']:.3f} | "
            f"{f['kl_to_sft']:.4f} | {f['wall_s']:.0f} | "
            f"{f['heldout_delta'] / f['heldout_delta_se'] if f['heldout_delta_se'] else 0:+.1f}"
        )
    return 0
