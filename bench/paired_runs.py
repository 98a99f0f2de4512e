"""Two nightly runs compared task by task: one params change against its baseline, night by night.

Both runs are clones made by bench/week_of_nights.py from the same data seeds, so their frozen
sets hold the same tasks wherever the change leaves those sets alone, and evaluation samples
every night from the same seeds; each promoted tag's per-task results
(``metrics/eval_tasks.json`` at the tag) then pair up as the gate pairs two nights
(``codeloop.evaluate.paired.compare``: Δ = candidate − baseline, its SE, the one-sided
sign-flip p and the minimum detectable drop). ``discordant`` counts the tasks the two runs
disagree on. A set whose tasks differ between the runs (a resized one) pairs only on the
tasks both hold.

Run: ``.venv/bin/python bench/paired_runs.py BASE_REPO CANDIDATE_REPO [--tags iter-0001 ...]
[--base-tag TAG] [--out metrics/F.csv]`` (the ``repo`` dirs under each run's ``--work``).
With ``--base-tag`` every candidate tag is paired against that one tag of the baseline: the
same repo twice and ``--base-tag iter-0001`` gives a week's change since its first night.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.evaluate.paired import compare  # noqa: E402

FIELDS = ["base_tag", "tag", "set", "n_tasks", "baseline_pass@1", "candidate_pass@1", "delta",
          "se", "p_value", "mdd", "discordant"]


def eval_tasks(repo: str, tag: str) -> dict[str, dict]:
    """{set: {task_id: [passed, n]}} that the night promoted as ``tag`` evaluated."""
    out = subprocess.run(["git", "show", f"{tag}:metrics/eval_tasks.json"], cwd=repo,
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{repo}: no metrics/eval_tasks.json at tag {tag}: "
                         f"{out.stderr.strip()}")
    return json.loads(out.stdout)["sets"]


def rows_for(base: str, cand: str, tag: str, alpha: float, base_tag: str = "") -> list[dict]:
    """One row per set the baseline evaluated at ``base_tag`` (default ``tag``) and the
    candidate at ``tag``."""
    base_tag = base_tag or tag
    b, c = eval_tasks(base, base_tag), eval_tasks(cand, tag)
    rows = []
    for name in sorted(set(b) & set(c)):
        r = compare(b[name], c[name], alpha)
        if r is None:
            continue
        shared = set(b[name]) & set(c[name])

        def rate(sets: dict, ids=shared, name=name) -> float:
            return sum(sets[name][k][0] / sets[name][k][1] for k in ids) / len(ids)

        rows.append({"base_tag": base_tag, "tag": tag, "set": name, "n_tasks": r.n_tasks,
                     "baseline_pass@1": rate(b), "candidate_pass@1": rate(c),
                     "delta": r.delta, "se": r.se,
                     "p_value": r.p_value, "mdd": r.mdd,
                     "discordant": sum(b[name][k] != c[name][k] for k in shared)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("candidate")
    ap.add_argument("--tags", nargs="+", default=["iter-0001", "iter-0002", "iter-0003"])
    ap.add_argument("--base-tag", default="",
                    help="pair every tag against this tag of the baseline (default: the same tag)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--out", default="metrics/agent_at_night_paired.csv")
    a = ap.parse_args()
    rows = [r for tag in a.tags
            for r in rows_for(a.base, a.candidate, tag, a.alpha, a.base_tag)]
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(f"{r['base_tag']} -> {r['tag']} {r['set']:<12} {r['n_tasks']:>4} tasks  baseline "
              f"{r['baseline_pass@1']:.3f}  candidate {r['candidate_pass@1']:.3f}  "
              f"Δ {r['delta']:+.3f} ± {r['se']:.3f}  p {r['p_value']:.3g}  "
              f"discordant {r['discordant']}")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
