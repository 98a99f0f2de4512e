"""bench/learning_curve.py's --work: each iteration's policy, the archive and iteration 0's
evaluation kept in a directory, so a killed long run goes on from its last written row.
"""

from __future__ import annotations

import contextlib
import csv
import json
import shutil
import tempfile
from pathlib import Path

# Iteration 0's evaluation row in the work directory: its per-task held-out rates are
# what every later row's paired change is measured against, so a resumed run reads them
# back instead of evaluating the policy it resumes from.
BASE = "base.json"


def save_base(work: Path, row: dict) -> None:
    """Keep iteration 0's evaluation row (with its per-task rates) in the work directory."""
    (work / BASE).write_text(json.dumps(row, sort_keys=True))


def load_base(work: Path) -> dict | None:
    """Iteration 0's evaluation row as save_base kept it; None when there is none."""
    path = work / BASE
    return json.loads(path.read_text()) if path.exists() else None


def workdir(work: str):
    """--work (kept, so a killed run can go on) or a temporary directory."""
    if not work:
        return tempfile.TemporaryDirectory()
    Path(work).mkdir(parents=True, exist_ok=True)
    return contextlib.nullcontext(work)


def _num(v: str):
    for kind in (int, float):
        try:
            return kind(v)
        except ValueError:
            pass
    return v


def resume(work_flag: str, out_csv: str, work: Path) -> list[dict]:
    """The rows a run with this --work finished (read from --out); later partial state goes.

    A policy or archive night past the last written row is from the iteration that was
    killed: removed, so the rerun appends that night once.
    """
    out = Path(out_csv)
    if not (work_flag and out.exists() and (work / "iter-0000").exists()):
        return []
    with open(out) as f:
        rows = [{k: _num(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]
    rows = [r for r in rows if (work / f"iter-{r['iteration']:04d}").exists()]
    _restore_rates(out, rows)
    last = rows[-1]["iteration"] if rows else 0
    for d in [*work.glob("iter-*"), *(work / "archive").glob("iteration=*")]:
        if int(d.name.split("-" if d.name.startswith("iter-") else "=")[1]) > last:
            shutil.rmtree(d)
    print(f"resuming {work} after iteration {last}")
    return rows


def _restore_rates(out: Path, rows: list[dict]) -> None:
    """Put back the per-task rates of the finished rows (``<out>.rates.json``), so the
    rates file the resumed run rewrites still holds every evaluated iteration."""
    path = Path(str(out) + ".rates.json")
    rates = json.loads(path.read_text()) if path.exists() else {}
    for r in rows:
        if str(r["iteration"]) in rates:
            r["_rates"] = rates[str(r["iteration"])]
