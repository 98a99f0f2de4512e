"""The nights log: one row per nightly run, promoted, refused or failed.

history/iterations.csv holds only promoted iterations and is restored with everything else
when a night is refused, so the morning reader would never see a refused or failed night
there. This log lives in the workspace's untracked DVC scratch space
(``.dvc/tmp/codeloop-nights.jsonl``), which the restore leaves alone, and keeps every night:
its outcome, the gate's reasons, the paired Δ ± SE per frozen set against the promoted
policy, the update's KL and the minutes it took.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NIGHTS_LOG = Path(".dvc/tmp/codeloop-nights.jsonl")
# What the "nights" table shows: the last week.
SHOWN = 7


def night_row(
    night: int | None,
    outcome: str,
    minutes: float,
    decision: dict[str, Any] | None = None,
    train_metrics: dict[str, Any] | None = None,
    tag: str = "",
    error: str = "",
) -> dict[str, Any]:
    """One night as the log keeps it; ``outcome`` is promoted, refused or failed."""
    decision = decision or {}
    paired = {
        name: {k: p[k] for k in ("delta", "se", "p_value", "mdd", "verdict") if k in p}
        for name, p in sorted((decision.get("paired") or {}).items())
    }
    return {
        "night": night,
        "outcome": outcome,
        "tag": tag,
        "minutes": round(minutes, 2),
        "pass_at_1": decision.get("candidate_pass_at_1") or {},
        "paired": paired,
        "kl": (train_metrics or {}).get("kl"),
        "reasons": list(decision.get("reasons") or []) + ([error] if error else []),
    }


def append_night(repo: str | Path, row: dict[str, Any]) -> None:
    path = Path(repo) / NIGHTS_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")


def read_nights(repo: str | Path) -> list[dict[str, Any]]:
    """Every logged night, oldest first (a torn last line, from a killed run, is skipped)."""
    path = Path(repo) / NIGHTS_LOG
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _delta(p: dict[str, Any]) -> str:
    if "se" not in p:
        return f"{p.get('delta', 0.0):+.3f} (unpaired)"
    return f"{p['delta']:+.3f} ± {p['se']:.3f} ({p['verdict']})"


def nights_table(rows: list[dict[str, Any]], shown: int = SHOWN) -> list[dict[str, Any]]:
    """The last ``shown`` nights as flat table rows: one column per frozen set's Δ ± SE,
    in every row (a table takes its columns from its rows; the first night has no Δ)."""
    rows = rows[-shown:]
    sets = sorted({name for r in rows for name in (r.get("paired") or {})})
    out = []
    for r in rows:
        flat = {
            "night": r.get("night"),
            "outcome": r.get("outcome"),
            "tag": r.get("tag") or "-",
            "minutes": r.get("minutes"),
            "kl": None if r.get("kl") is None else round(float(r["kl"]), 5),
        }
        paired = r.get("paired") or {}
        for name in sets:
            flat[f"{name} Δ"] = _delta(paired[name]) if name in paired else "-"
        flat["reasons"] = "; ".join(r.get("reasons") or []) or "-"
        out.append(flat)
    return out
