"""How often does the gate refuse an equally good candidate, and catch a worse one?

The old gate against the paired gate (codeloop.evaluate.gate), on simulated candidates
built from a real night's per-task results (``--rates``: a history/eval_baseline.json or
metrics/eval_tasks.json; by default metrics/gate_noise_rates.json, the first promoted night
of bench/week_of_nights.py). At evaluation's temperature the embedded policy's samples of
one task agree, so a task either passes or fails; what moves a candidate's figure is
which tasks an update flips. An equally good candidate flips a share ``--flip`` of the
promoted policy's passing tasks to failing and as many failing tasks (in expectation) to
passing; a worse one flips more passing tasks, by ``drop`` of the set in expectation.
``--flip`` defaults to a little more than the share of tasks that changed between
consecutive promoted nights of the week run (docs/week_of_nights.md); ``--tasks`` asks
what a set of another size would do.

- old: refuse when pass@1 drops by more than 0.02.
- paired: refuse when the drop is significant at alpha (exact one-sided sign-flip over the
  per-task differences) and larger than the tolerance.

Printed: the refusal rate per gate and scenario over ``--nights`` simulated candidates;
written to metrics/gate_noise.csv (one row per set size, gate and scenario).

Run: ``.venv/bin/python bench/gate_noise.py [--nights 2000] [--flip 0.05] [--tasks 250]``
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codeloop.evaluate.gate import GateRule, TaskResults, decide  # noqa: E402

OLD_TOLERANCE = 0.02


def flipped(passing: list[bool], down: float, up: float, rng: random.Random) -> list[bool]:
    """A candidate: each passing task fails with probability ``down``, each failing task
    passes with probability ``up``."""
    return [(rng.random() >= down) if p else (rng.random() < up) for p in passing]


def old_refuses(base: list[bool], cand: list[bool]) -> bool:
    drop = (sum(base) - sum(cand)) / len(base)
    return drop > OLD_TOLERANCE + 1e-12


def paired_refuses(base: list[bool], cand: list[bool], k: int, rule: GateRule) -> bool:
    def counts(rows):
        return {f"t{i}": [k * int(r), k] for i, r in enumerate(rows)}

    ev = {"sets": {"h": {"pass@1": sum(cand) / len(cand), "infra_errors": 0}}}
    row = {"tag": "iter-0001", "pass_at_1": {"h": sum(base) / len(base)}}
    d = decide(ev, row, rule, [], TaskResults({"h": counts(cand)}, {"h": counts(base)}))
    return not d.promote


def load_rates(path: Path, name: str) -> list[float]:
    data = json.loads(path.read_text())
    return [p / n for p, n in data["sets"][name].values() if n]


def simulate(base: list[bool], args) -> dict:
    """Refusal rates of both gates on ``args.nights`` candidates per scenario."""
    n_pass, m = sum(base), len(base)
    up = args.flip * n_pass / max(1, m - n_pass)
    rule = GateRule(args.tolerance, args.alpha)
    scenarios = {"equal": (args.flip, up)}
    for drop in (float(x) for x in args.drops.split(",")):
        scenarios[f"worse by {drop:g}"] = (min(1.0, args.flip + drop * m / n_pass), up)
    rng = random.Random(0)
    cands = {s: [flipped(base, dn, u, rng) for _ in range(args.nights)]
             for s, (dn, u) in scenarios.items()}
    gates = {
        f"old (drop > {OLD_TOLERANCE})": lambda c: old_refuses(base, c),
        f"paired (α {args.alpha}, tolerance {args.tolerance})":
            lambda c: paired_refuses(base, c, args.samples, rule),
    }
    print(f"{m} tasks, {n_pass} passing; an equal candidate flips {args.flip:g} of them; "
          f"{args.nights} candidates per scenario")
    print(f"{'gate':40s} " + " ".join(f"{s:>14s}" for s in scenarios))
    rates = {}
    for gname, refuses in gates.items():
        rates[gname] = {s: sum(map(refuses, cs)) / len(cs) for s, cs in cands.items()}
        print(f"{gname:40s} " + " ".join(f"{rates[gname][s]:14.3f}" for s in scenarios))
    return {"tasks": m, "passing": n_pass, "refusal_rate": rates}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default=str(ROOT / "metrics/gate_noise_rates.json"))
    ap.add_argument("--set", default="heldout")
    ap.add_argument("--tasks", default="0,250",
                    help="sets of these many tasks with the read passing share (0: as read)")
    ap.add_argument("--nights", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--flip", type=float, default=0.05)
    ap.add_argument("--drops", default="0.05,0.1")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--out", default=str(ROOT / "metrics/gate_noise.csv"))
    args = ap.parse_args()
    read = [r >= 0.5 for r in load_rates(Path(args.rates), args.set)]
    share = sum(read) / len(read)
    out = {"rates": Path(args.rates).name, "flip": args.flip, "nights": args.nights,
           "by_set_size": {}}
    for n in (int(x) for x in args.tasks.split(",")):
        base = read if not n else [i < round(share * n) for i in range(n)]
        out["by_set_size"][str(len(base))] = simulate(base, args)
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["tasks", "gate", "scenario", "refusal_rate", "flip", "candidates"])
        for size, res in out["by_set_size"].items():
            for gate, rates in res["refusal_rate"].items():
                kind = gate.split()[0]
                w.writerows([size, kind, sc, r, args.flip, args.nights] for sc, r in rates.items())


if __name__ == "__main__":
    main()
