"""Promotion history: what each promoted iteration was, and per-task pass rates.

Two small git-tracked files under ``history/``, written only by the nightly promotion:

``history/iterations.csv`` — one row per *promoted* iteration, oldest first, columns
``ITERATION_FIELDS``:

- ``iteration`` (int), ``tag`` (git tag ``iter-NNNN``), ``created_at`` (UTC ISO-8601);
- ``model_version`` (content hash of the promoted checkpoint), ``dataset_version``
  (sha256 from data/clean/manifest.json), ``reward_fn_version`` (reward.version);
- ``pass_at_1`` — JSON object ``{frozen_set: pass@1}``; ``pass_at_1_mean`` its mean;
- ``train_reward_mean`` — mean reward of the iteration's scored trajectories;
- ``visible_pass_rate`` / ``hidden_pass_rate`` / ``hidden_visible_gap`` — of the
  training trajectories (from metrics/score.json; what the hacking alarm watches);
- ``eval_visible_pass_rate`` / ``eval_hidden_pass_rate`` — the same on the frozen sets;
- ``reward_components`` — JSON object ``{component: mean}`` of the training rewards.

An empty file, a header-only file and a missing file all mean "nothing promoted yet".

``history/pass_rates.json`` — ``{task_id: empirical pass rate in [0, 1]}`` of the
promoted iteration's rollouts; the bucket stage reads it. ``{}`` means unknown.

``history/eval_baseline.json`` — the promoted iteration's per-task frozen-set results
(metrics/eval_tasks.json as promotion keeps it, plus its ``tag``): ``settings`` (what it
was sampled under) and ``sets`` ``{frozen_set: {task_id: [passed, samples]}}``; the next
nights' paired gate reads it (``read_task_results``).
"""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from codeloop import paths as _paths

ITERATIONS_CSV = Path(_paths.ITERATIONS_CSV)
PASS_RATES_JSON = Path(_paths.PASS_RATES_JSON)

ITERATION_FIELDS = (
    "iteration",
    "tag",
    "created_at",
    "model_version",
    "dataset_version",
    "reward_fn_version",
    "pass_at_1",
    "pass_at_1_mean",
    "train_reward_mean",
    "visible_pass_rate",
    "hidden_pass_rate",
    "hidden_visible_gap",
    "eval_visible_pass_rate",
    "eval_hidden_pass_rate",
    "reward_components",
)
_FLOATS = {
    "pass_at_1_mean",
    "train_reward_mean",
    "visible_pass_rate",
    "hidden_pass_rate",
    "hidden_visible_gap",
    "eval_visible_pass_rate",
    "eval_hidden_pass_rate",
}


class HistoryError(ValueError):
    """A history file that cannot be trusted; the message names file, row and field."""


def tag_for(iteration: int) -> str:
    """The git tag (and models/ directory name) of an iteration: iter-0003."""
    return f"iter-{iteration:04d}"


def _parse_row(raw: dict[str, str], path: Path, lineno: int) -> dict[str, Any]:
    row: dict[str, Any] = dict(raw)
    try:
        row["iteration"] = int(raw["iteration"])
    except (TypeError, ValueError):
        raise HistoryError(
            f"{path}: row {lineno}: field 'iteration': not an integer ({raw.get('iteration')!r})"
        ) from None
    for name in _FLOATS:
        val = raw.get(name)
        try:
            row[name] = float(val) if val not in (None, "") else None
        except ValueError:
            raise HistoryError(
                f"{path}: row {lineno}: field {name!r}: not a number ({val!r})"
            ) from None
    for name in ("pass_at_1", "reward_components"):
        try:
            row[name] = json.loads(raw.get(name) or "{}")
        except json.JSONDecodeError:
            raise HistoryError(f"{path}: row {lineno}: field {name!r}: not a JSON object") from None
    return row


def read_iterations(path: str | os.PathLike = ITERATIONS_CSV) -> list[dict[str, Any]]:
    """Promoted iterations, oldest first, with numbers parsed (missing file: [])."""
    path = Path(path)
    if not path.exists() or not path.read_text().strip():
        return []
    reader = csv.DictReader(io.StringIO(path.read_text()))
    missing = {"iteration", "pass_at_1"} - set(reader.fieldnames or ())
    if missing:
        raise HistoryError(f"{path}: header lacks {sorted(missing)}")
    return [_parse_row(r, path, i) for i, r in enumerate(reader, start=2)]


def last_promoted(path: str | os.PathLike = ITERATIONS_CSV) -> dict[str, Any] | None:
    rows = read_iterations(path)
    return max(rows, key=lambda r: r["iteration"]) if rows else None


def next_iteration(path: str | os.PathLike = ITERATIONS_CSV) -> int:
    """1 + the last promoted iteration (1 when nothing was promoted)."""
    last = last_promoted(path)
    return (last["iteration"] + 1) if last else 1


def make_row(
    iteration: int,
    *,
    model_version: str,
    dataset_version: str,
    reward_fn_version: str,
    eval_metrics: dict[str, Any],
    score_metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build one history row from metrics/eval.json and metrics/score.json contents."""
    sets = eval_metrics.get("sets", {})
    p1 = {name: float(m.get("pass@1", 0.0)) for name, m in sorted(sets.items())}
    score = score_metrics or {}

    def mean_over_sets(key: str) -> float | None:
        vals = [float(m[key]) for m in sets.values() if key in m]
        return sum(vals) / len(vals) if vals else None

    return {
        "iteration": iteration,
        "tag": tag_for(iteration),
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model_version": model_version,
        "dataset_version": dataset_version,
        "reward_fn_version": reward_fn_version,
        "pass_at_1": p1,
        "pass_at_1_mean": sum(p1.values()) / len(p1) if p1 else None,
        "train_reward_mean": _num(score, "reward_mean", "mean_reward"),
        "visible_pass_rate": _num(score, "visible_pass_rate"),
        "hidden_pass_rate": _num(score, "hidden_pass_rate"),
        "hidden_visible_gap": _num(score, "hidden_visible_gap", "visible_hidden_gap", "gap"),
        "eval_visible_pass_rate": mean_over_sets("visible_pass_rate"),
        "eval_hidden_pass_rate": mean_over_sets("hidden_pass_rate"),
        "reward_components": _component_means(score),
    }


def _component_means(score: dict[str, Any]) -> dict[str, float]:
    comps = score.get("components") or score.get("reward_components") or {}
    out = {}
    for name, val in comps.items() if isinstance(comps, dict) else ():
        mean = val.get("mean") if isinstance(val, dict) else val
        if isinstance(mean, int | float):
            out[str(name)] = float(mean)
    return dict(sorted(out.items()))


def plot_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flatten history rows into DVC plot records, one per iteration (x = iteration)."""
    out = []
    for r in rows:
        rec: dict[str, Any] = {"iteration": r["iteration"]}
        for name, val in sorted((r.get("pass_at_1") or {}).items()):
            rec[f"pass@1/{name}"] = val
        for key in sorted(_FLOATS):
            if r.get(key) is not None:
                rec[key] = r[key]
        for name, val in sorted((r.get("reward_components") or {}).items()):
            rec[f"reward/{name}"] = val
        out.append(rec)
    return out


def _num(d: dict[str, Any], *keys: str) -> float | None:
    """First numeric value among keys (score.json names drifted once; accept both)."""
    for key in keys:
        val = d.get(key)
        if isinstance(val, int | float):
            return float(val)
        if isinstance(val, dict) and isinstance(val.get("mean"), int | float):
            return float(val["mean"])
    return None


def append_iteration(row: dict[str, Any], path: str | os.PathLike = ITERATIONS_CSV) -> None:
    """Append a promoted iteration; refuses a duplicate or non-increasing iteration."""
    path = Path(path)
    rows = read_iterations(path)
    if rows and row["iteration"] <= max(r["iteration"] for r in rows):
        raise HistoryError(
            f"{path}: iteration {row['iteration']} is not after the last promoted one"
        )
    unknown = set(row) - set(ITERATION_FIELDS)
    if unknown:
        raise HistoryError(f"{path}: unknown history fields {sorted(unknown)}")
    out = dict(row)
    for name in ("pass_at_1", "reward_components"):
        out[name] = json.dumps(row.get(name) or {}, sort_keys=True)
    for key in _FLOATS:
        out[key] = "" if out.get(key) is None else repr(float(out[key]))
    path.parent.mkdir(parents=True, exist_ok=True)
    header_needed = not path.exists() or not path.read_text().strip()
    with open(path, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=ITERATION_FIELDS)
        if header_needed:
            writer.writeheader()
        writer.writerow({k: out.get(k, "") for k in ITERATION_FIELDS})


def read_pass_rates(path: str | os.PathLike = PASS_RATES_JSON) -> dict[str, float]:
    """task_id -> pass rate; validates every value (missing file: {})."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text() or "{}")
    except json.JSONDecodeError as exc:
        raise HistoryError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HistoryError(f"{path}: top level must be an object task_id -> rate")
    for tid, val in data.items():
        if not isinstance(val, int | float) or not 0.0 <= float(val) <= 1.0:
            raise HistoryError(f"{path}: task {tid!r}: pass rate must be in [0, 1], got {val!r}")
    return {str(k): float(v) for k, v in data.items()}


def update_pass_rates(
    new: dict[str, float], path: str | os.PathLike = PASS_RATES_JSON
) -> dict[str, float]:
    """Merge this iteration's rates into the file (newest wins per task); returns it."""
    merged = read_pass_rates(path)
    merged.update({k: float(v) for k, v in new.items()})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dict(sorted(merged.items())), indent=2) + "\n")
    os.replace(tmp, path)
    return merged


def read_task_results(path: str | os.PathLike) -> dict[str, Any] | None:
    """A per-task results file (metrics/eval_tasks.json or history/eval_baseline.json),
    checked: None when absent; HistoryError naming the file and the bad field otherwise."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HistoryError(f"{path}: top level must be an object, found {type(data).__name__}")
    for name, kind in (("tag", str), ("settings", dict), ("sets", dict)):
        if name in data and not isinstance(data[name], kind):
            raise HistoryError(
                f"{path}: field {name!r}: must be {kind.__name__}, found {type(data[name]).__name__}"
            )
    for name, counts in (data.get("sets") or {}).items():
        if not isinstance(counts, dict):
            raise HistoryError(f"{path}: field 'sets.{name}': must be an object task_id -> "
                               f"[passed, samples], found {type(counts).__name__}")
        for tid, pair in counts.items():
            if not _is_count(pair):
                raise HistoryError(f"{path}: field 'sets.{name}.{tid}': must be [passed, samples] "
                                   f"with 0 <= passed <= samples, found {pair!r}")
    return data


def _is_count(pair: Any) -> bool:
    if not isinstance(pair, list) or len(pair) != 2:
        return False
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        return False
    return 0 <= pair[0] <= pair[1]


def pass_rates_from_trajectories(trajs: list) -> dict[str, float]:
    """Empirical pass rate per task_id: share of episodes that passed all visible tests.

    Infra-failed episodes are left out (they say nothing about the task's difficulty).
    """
    seen: dict[str, list[bool]] = {}
    for tr in trajs:
        if tr.infra_error:
            continue
        seen.setdefault(tr.task_id, []).append(tr.terminal_reason == "all_tests_passed")
    return {tid: sum(v) / len(v) for tid, v in sorted(seen.items())}
