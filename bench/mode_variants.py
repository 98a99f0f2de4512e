"""Compare episode modes paired per held-out task: metrics/mode_variants.csv from curve runs.

Each run is a curve bench run (bench/learning_curve.py for function tasks,
bench/agent_curve.py for repository tasks) that differs from its kind's ``self_debug``
run only in ``rollout.mode`` / ``rollout.agent_mode``: same tasks, held-out set, seeds and
steps. Each run's ``<csv>.rates.json`` holds every evaluated iteration's per-task held-out
rate; a mode's change against self_debug at the same iteration is the mean over tasks of
(rate_mode - rate_self_debug). Each rate and change has two SEs side by side: ``*_se`` over
tasks as independent draws, ``*_se_repo`` clustered by repository
(``codeloop.evaluate.paired.cluster_se``): tasks planted in one repository share it, so
they are not independent. A task's repository is read from ``<csv>.repos.json`` (written
by bench/agent_curve.py), else from a synthetic task id ``synthrepo/<seed>/<repo>/<task>``;
a function task is its own cluster, so its two SEs agree.

Run: ``.venv/bin/python bench/mode_variants.py KIND=MODE=CSV ... [--out metrics/mode_variants.csv]``
e.g. ``function=self_debug=metrics/mode_runs/function_self_debug.csv function=tdd=...``
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.evaluate.paired import cluster_se  # noqa: E402

FIELDS = ["kind", "mode", "iteration", "heldout_rate", "heldout_rate_se", "heldout_rate_se_repo",
          "paired_vs_self_debug", "paired_se", "paired_se_repo", "n_tasks", "n_repos", "run"]


def _rates(csv_path: str) -> dict[str, dict[str, float]]:
    """{iteration: {task_id: rate}} at evaluate.temperature (the function bench also keeps
    the rollout temperature's rates, under "_hot")."""
    runs = json.loads(Path(csv_path + ".rates.json").read_text())
    return {it: r[""] if "" in r and isinstance(r[""], dict) else r for it, r in runs.items()}


def _repos(csv_path: str) -> dict[str, str]:
    """{task_id: repository} from the run's ``<csv>.repos.json``, or {} when absent."""
    f = Path(csv_path + ".repos.json")
    return json.loads(f.read_text()) if f.is_file() else {}


def repository(task_id: str, known: dict[str, str]) -> str:
    """The repository a task was planted in: ``known``'s entry, else a synthetic id's
    ``synthrepo/<seed>/<repo>`` prefix, else the task itself (a cluster of one)."""
    if task_id in known:
        return known[task_id]
    parts = task_id.split("/")
    if len(parts) == 4 and parts[0] == "synthrepo":
        return "/".join(parts[:3])
    return task_id


def _mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def rows_for(kind: str, runs: dict[str, str]) -> list[dict]:
    """One row per (mode, evaluated iteration) of ``kind``, paired against self_debug."""
    if "self_debug" not in runs:
        raise SystemExit(f"{kind}: no self_debug run to pair against")
    base = _rates(runs["self_debug"])
    known = _repos(runs["self_debug"])
    out = []
    for mode, path in runs.items():
        known_here = {**known, **_repos(path)}
        for it, rates in sorted(_rates(path).items(), key=lambda kv: int(kv[0])):
            ref = base.get(it, {})
            shared = sorted(set(rates) & set(ref))
            rate, rate_se = _mean_se([rates[t] for t in rates])
            diff, diff_se = _mean_se([rates[t] - ref[t] for t in shared])
            all_repos = [repository(t, known_here) for t in rates]
            shared_repos = [repository(t, known_here) for t in shared]
            out.append({
                "kind": kind, "mode": mode, "iteration": int(it),
                "heldout_rate": round(rate, 4), "heldout_rate_se": round(rate_se, 4),
                "heldout_rate_se_repo": round(cluster_se(list(rates.values()), all_repos), 4),
                "paired_vs_self_debug": round(diff, 4), "paired_se": round(diff_se, 4),
                "paired_se_repo": round(
                    cluster_se([rates[t] - ref[t] for t in shared], shared_repos), 4
                ),
                "n_tasks": len(shared), "n_repos": len(set(shared_repos)), "run": path,
            })
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", metavar="KIND=MODE=CSV")
    ap.add_argument("--out", default="metrics/mode_variants.csv")
    a = ap.parse_args()
    by_kind: dict[str, dict[str, str]] = {}
    for spec in a.runs:
        parts = spec.split("=", 2)
        if len(parts) != 3 or not Path(parts[2] + ".rates.json").is_file():
            ap.error(f"run {spec!r}: want KIND=MODE=CSV with CSV.rates.json beside it")
        kind, mode, path = parts
        by_kind.setdefault(kind, {})[mode] = path
    rows = [r for kind, runs in by_kind.items() for r in rows_for(kind, runs)]
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(f"{r['kind']:9s} {r['mode']:12s} it {r['iteration']:2d}  rate {r['heldout_rate']:.3f}"
              f" +- {r['heldout_rate_se']:.3f}  vs self_debug {r['paired_vs_self_debug']:+.3f}"
              f" +- {r['paired_se']:.3f} (tasks) +- {r['paired_se_repo']:.3f} (repos)"
              f"  ({r['n_tasks']} tasks, {r['n_repos']} repos)")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
