"""How many tasks does each real repository of repos.yaml yield, at what cost?

Runs `codeloop mint --repos-list` (codeloop.data.repos.mint_list) on the list, or on the
repositories named by ``--only``, with params.yaml's ``mint`` section, on the sandbox backend
``--backend``, and prints the yield table: per repository the candidates tried, the tasks
kept, the rejected ones by reason and the seconds (environment build included), or why it
failed. Written to metrics/mint_yield.csv, one row per (backend, repository) and, per
backend, ``total`` rows summing each split and both; a rerun replaces the rows of the
repositories it ran.

Run: ``nice -n 10 .venv/bin/python bench/mint_yield.py [--backend local|docker]
[--only inflection six] [--max N]``
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codeloop.config import load_params, load_repos_list  # noqa: E402
from codeloop.data.repos.mint_list import ListConfig, format_yield_table, mint_list  # noqa: E402

REASONS = ("no_test_fails", "collect_error", "timeout", "duplicate_failing_set",
           "judge_refuses_gold")
COLUMNS = ["backend", "repo", "version", "split", "status", "tried", "kept", *REASONS,
           "stable_tests", "seconds", "reason"]


def _rows(report: dict, backend: str) -> list[dict]:
    out = []
    for r in report["yield"]:
        row = {"backend": backend, **{k: r[k] for k in ("repo", "version", "split", "status",
                                                          "tried", "kept", "stable_tests",
                                                          "seconds")}}
        row.update({k: r["rejected"].get(k, 0) for k in REASONS})
        other = set(r["rejected"]) - set(REASONS)
        assert not other, f"unknown rejection reasons {other}: add them to REASONS"
        row["reason"] = r["reason"].splitlines()[0][:200] if r["reason"] else ""
        out.append(row)
    return out


def _totals(rows: list[dict]) -> list[dict]:
    """Per backend, a row summing its repositories of each split (split ``train`` or
    ``heldout``) and of both (split ``all``); repo ``total``."""
    out = []
    for backend in sorted({r["backend"] for r in rows}):
        mine = [r for r in rows if r["backend"] == backend]
        for split in ("train", "heldout", "all"):
            part = [r for r in mine if split in ("all", r["split"])]
            row = {"backend": backend, "repo": "total", "version": "", "split": split,
                   "status": f"{sum(r['status'] == 'ok' for r in part)}/{len(part)} ok",
                   "seconds": round(sum(float(r["seconds"]) for r in part), 2), "reason": ""}
            for k in ("tried", "kept", *REASONS, "stable_tests"):
                row[k] = sum(int(r.get(k) or 0) for r in part)  # a column older rows lack: 0
            out.append(row)
    return out


def _merge(path: Path, rows: list[dict]) -> None:
    old = list(csv.DictReader(path.open(newline=""))) if path.exists() else []
    ran = {(r["backend"], r["repo"]) for r in rows}
    keep = [r for r in old if (r["backend"], r["repo"]) not in ran and r["repo"] != "total"]
    repos = sorted(keep + rows, key=lambda r: (r["backend"], r["repo"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(repos + _totals(repos))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["local", "docker"], default="local")
    ap.add_argument("--only", nargs="*", default=[], help="repository names (default: all)")
    ap.add_argument("--max", type=int, help="tasks kept at most per repository")
    ap.add_argument("--out", help="mint output dir (default bench/out/mint_yield-BACKEND)")
    ap.add_argument("--metrics", default=str(ROOT / "metrics" / "mint_yield.csv"))
    args = ap.parse_args()
    section = load_params(ROOT / "params.yaml").mint
    repos = load_repos_list(ROOT / section.repos_list).repos
    if args.only:
        unknown = set(args.only) - {e.name for e in repos}
        if unknown:
            ap.error(f"not in {section.repos_list}: {sorted(unknown)}")
        repos = [e for e in repos if e.name in args.only]
    cfg = ListConfig(max_tasks=args.max or section.max_tasks, seed=section.seed,
                     workers=section.workers, hidden_fraction=section.hidden_fraction,
                     wheel_cache=str(ROOT / section.wheel_cache),
                     sdist_cache=str(ROOT / section.sdist_cache))
    out = Path(args.out or ROOT / "bench" / "out" / f"mint_yield-{args.backend}")
    report = mint_list(repos, out, cfg, backend=args.backend,
                       progress=lambda r: print(f"{r['repo']}: {r['status']} "
                                                f"kept {r['kept']}/{r['tried']} "
                                                f"{r['seconds']} s", flush=True))
    print(format_yield_table(report))
    _merge(Path(args.metrics), _rows(report, args.backend))
    return 0


if __name__ == "__main__":
    sys.exit(main())
