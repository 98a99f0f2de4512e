"""A readable summary of a night: each stage's headline numbers from metrics/*.json, the
gate's decision, and the change since the last promoted iteration (history/).

Pure: reads files under a repository root and returns a dict (``build_report``) or text
(``render``). Why not ``dvc metrics show``: it prints every key of every file as one
wide table, mostly "-", with no notion of which number matters or what it is compared to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from codeloop.evaluate.history import ITERATIONS_CSV, make_row, read_iterations
from codeloop.paths import ARCHIVE_DIR, ARCHIVE_METRICS, METRICS_DIR, METRICS_FILES

# stage -> its metrics file (policy_init writes none), from the one paths module
METRICS = {stage: f"{METRICS_DIR}/{name}" for stage, name in METRICS_FILES.items()}
# history row fields compared with the last promoted iteration, as (field, label)
COMPARED = (
    ("pass_at_1_mean", "frozen pass@1 (mean over sets)"),
    ("train_reward_mean", "train reward mean"),
    ("visible_pass_rate", "train visible pass rate"),
    ("hidden_pass_rate", "train hidden pass rate"),
    ("hidden_visible_gap", "train hidden-visible gap"),
)


def _read(path: Path) -> dict[str, Any] | None:
    """A metrics file's object; None when absent; ValueError naming it when unreadable."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _clean(m: dict) -> dict[str, Any]:
    kept = sum(v for k, v in m.items() if k.startswith("kept_"))
    frozen = {k.removeprefix("frozen_"): v for k, v in m.items() if k.startswith("frozen_")}
    return {
        "rows_in": m.get("rows_in"),
        "kept": kept,
        "quarantined": m.get("quarantined"),
        "dropped": m.get("dropped"),
        "frozen": frozen,
    }


def _sft(m: dict) -> dict[str, Any]:
    heldout = {k: v for k, v in m.items() if "heldout" in k or "held_out" in k}
    return {
        "steps": m.get("steps"),
        "examples": m.get("examples"),
        "loss_first": m.get("loss_first"),
        "loss_last": m.get("loss_last"),
        "heldout": heldout,
    }


def _bucket(m: dict) -> dict[str, Any]:
    ids = sorted({k.split("_")[1] for k in m if k.startswith("bucket_")}, key=int)
    per = {
        b: {"planned": m.get(f"bucket_{b}_planned"), "size": m.get(f"bucket_{b}_size")} for b in ids
    }
    return {"planned_tasks": m.get("planned_tasks"), "buckets": per}


def _rollout(m: dict) -> dict[str, Any]:
    keys = (
        "trajectories",
        "tasks",
        "visible_pass_rate",
        "first_turn_pass_rate",
        "mean_steps",
        "infra_errors",
        "generated_tokens_per_s",
    )
    return {k: m.get(k) for k in keys}


# score's per-row hidden-test diagnostic component (codeloop.rewards.HIDDEN_KEY; the
# report does not import the reward code)
HIDDEN_COMPONENT = "diag_hidden_pass_rate"


def _score(m: dict) -> dict[str, Any]:
    """Pass rates only over the rows they were measured on: score writes 0.0 for the hidden
    rate when no row ran hidden tests (its components then have no hidden diagnostic),
    which is no figure."""
    dists = m.get("components")
    comps = {n: c.get("mean") for n, c in (dists or {}).items()}
    replay = m.get("replay") or {}
    no_hidden = dists is not None and not (dists.get(HIDDEN_COMPONENT) or {}).get("count")
    return {
        "mean_reward": m.get("mean_reward"),
        "reward_version": m.get("reward_version"),
        "visible_pass_rate": None if m.get("n_scored") == 0 else m.get("visible_pass_rate"),
        "hidden_pass_rate": None if no_hidden else m.get("hidden_pass_rate"),
        "components": comps,
        "infra_errors": m.get("infra_errors"),
        "replay_mismatches": replay.get("mismatches"),
        "zero_std_group_fraction": m.get("zero_std_group_fraction"),
    }


def _critic(m: dict) -> dict[str, Any]:
    """Held-out AUC and accuracy only under holdout_status "ok": a metrics file without a
    status was written before degenerate splits were told apart, so its figures may not
    stand on both classes."""
    status = m.get("holdout_status") or "unchecked: metrics predate the degenerate-split check"
    ok = status == "ok"
    return {
        "n_examples": m.get("n_examples"),
        "n_holdout": m.get("n_holdout"),
        "holdout_status": status,
        "holdout_auc": m.get("holdout_auc") if ok else None,
        "holdout_accuracy": m.get("holdout_accuracy") if ok else None,
    }


def _train(m: dict) -> dict[str, Any]:
    keys = ("steps", "loss", "kl", "reward_mean", "grad_norm", "n_used", "preflight")
    replay = ("replay_rows", "replay_share", "replay_ess_fraction", "replay_clipped_share")
    rft = ("rft_mode", "rft_source", "rft_examples")
    return {k: m.get(k) for k in (*keys, *replay, *rft)}


def _archive(root: Path) -> dict[str, Any] | None:
    """data/archive's rows per (iteration, reward version) and size, from the Parquet
    footers (no row is read), and the last archived night's retention counts."""
    import pyarrow.parquet as pq

    from codeloop.data.archive import part_files

    last = _read(root / ARCHIVE_METRICS)
    files = part_files(root / ARCHIVE_DIR)
    if last is None and not files:
        return None
    rows: dict[str, dict[str, int]] = {}
    for f in files:
        it = f.parent.parent.name.split("=", 1)[1]
        version = f.parent.name.split("=", 1)[1]
        try:
            n = pq.read_metadata(f).num_rows
        except Exception as exc:  # pyarrow raises several kinds for a damaged footer
            raise ValueError(f"{f}: not a readable archive part: {exc}") from None
        per = rows.setdefault(it, {})
        per[version] = per.get(version, 0) + n
    keys = ("kept_sft", "kept_sample", "archived_rest", "stripped", "dropped", "infra")
    return {
        "rows": dict(sorted(rows.items(), key=lambda kv: int(kv[0]))),
        "total_rows": sum(n for per in rows.values() for n in per.values()),
        "bytes": sum(f.stat().st_size for f in files),
        "last_night": {k: last.get(k) for k in (*keys, "iterations")} if last else None,
    }


def _evaluate(m: dict) -> dict[str, Any]:
    sets = {
        n: {
            "pass@1": s.get("pass@1"),
            "n_tasks": s.get("n_tasks"),
            "infra_errors": s.get("infra_errors"),
        }
        for n, s in sorted((m.get("sets") or {}).items())
    }
    gate = m.get("gate") or {}
    return {
        "iteration": m.get("iteration"),
        "model_version": m.get("model_version"),
        "sets": sets,
        "promote": gate.get("promote"),
        "reasons": gate.get("reasons", []),
        "notes": gate.get("notes", []),
    }


HEADLINES = {
    "clean": _clean,
    "sft": _sft,
    "bucket": _bucket,
    "rollout": _rollout,
    "score": _score,
    "critic": _critic,
    "train": _train,
    "evaluate": _evaluate,
}


def _drop_empty_splits(now: dict, ev: dict, score: dict | None) -> None:
    """Tonight's figures that stand on no row become None: pass@1 of a set where no task
    was evaluated (evaluate writes 0.0 there), a mean over sets that counts one, and the
    train hidden pass rate and gap when no scored row ran hidden tests."""
    empty = {n for n, s in (ev.get("sets") or {}).items() if s.get("n_tasks") == 0}
    for name in empty & set(now["pass_at_1"]):
        now["pass_at_1"][name] = None
    if empty:
        now["pass_at_1_mean"] = None
    if score is not None and _score(score)["hidden_pass_rate"] is None:
        now["hidden_pass_rate"] = now["hidden_visible_gap"] = None


def _since_promoted(root: Path, ev: dict | None, score: dict | None) -> dict[str, Any]:
    """Tonight's evaluate+score numbers beside the last promoted iteration's history row.

    After a promoting night the last row *is* tonight (same iteration and model), so the
    baseline is the row before it.
    """
    history = read_iterations(root / ITERATIONS_CSV)
    if ev is None:
        return {"baseline": None, "note": "evaluate has not run: nothing to compare"}
    now = make_row(
        int(ev.get("iteration") or 0),
        model_version=str(ev.get("model_version", "")),
        dataset_version="",
        reward_fn_version="",
        eval_metrics=ev,
        score_metrics=score,
    )
    note = ""
    last = history[-1] if history else None
    if last and (last["iteration"], last["model_version"]) == (
        now["iteration"],
        now["model_version"],
    ):
        note = f"this iteration was promoted as {last['tag']}"
        history = history[:-1]
    if not history:
        earlier = f"{note}; no earlier promoted iteration to compare with" if note else ""
        return {"baseline": None, "note": earlier or "no promoted iteration yet"}
    base = history[-1]
    _drop_empty_splits(now, ev, score)
    rows = [(f"pass@1 {s}", base["pass_at_1"].get(s), v) for s, v in now["pass_at_1"].items()]
    rows += [(label, base.get(f), now.get(f)) for f, label in COMPARED]
    comps = sorted(set(base["reward_components"]) | set(now["reward_components"]))
    rows += [
        (f"component {c}", base["reward_components"].get(c), now["reward_components"].get(c))
        for c in comps
    ]
    changes = [
        {"what": w, "before": b, "now": n, "delta": None if b is None or n is None else n - b}
        for w, b, n in rows
    ]
    return {
        "baseline": {"tag": base["tag"], "iteration": base["iteration"]},
        "note": note,
        "changes": changes,
    }


def build_report(root: str | Path = ".") -> dict[str, Any]:
    """{"stages": {stage: headline dict or None when not run}, "since_promoted": {...}}."""
    root = Path(root)
    raw = {stage: _read(root / rel) for stage, rel in METRICS.items()}
    stages = {s: (HEADLINES[s](m) if m is not None else None) for s, m in raw.items()}
    return {
        "stages": stages,
        "archive": _archive(root),
        "since_promoted": _since_promoted(root, raw["evaluate"], raw["score"]),
    }


_NO_HIDDEN = "none (no row ran hidden tests)"


def _f(v: Any, digits: int = 3, none: str = "-") -> str:
    if v is None:
        return none
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _set_pass(name: str, s: dict) -> str:
    """A frozen set's pass@1, or why there is none: evaluate writes 0.0 for a set where no
    task was evaluated (every episode an infra error, or an empty set), which is no figure."""
    if s["n_tasks"] == 0:
        return f"{name} none (no task evaluated)"
    return f"{name} {_f(s['pass@1'])} ({s['n_tasks']} tasks)"


def _lines(stage: str, h: dict) -> str:
    """One line of a stage's headline."""
    if stage == "clean":
        frozen = ", ".join(f"{k} {v}" for k, v in h["frozen"].items())
        return (
            f"{h['rows_in']} rows in: kept {h['kept']}, quarantined {h['quarantined']}, "
            f"dropped {h['dropped']}; frozen sets: {frozen or '-'}"
        )
    if stage == "sft":
        held = "".join(f", {k} {_f(v)}" for k, v in h["heldout"].items())
        return (
            f"{h['steps']} steps on {h['examples']} examples, loss {_f(h['loss_first'])} "
            f"-> {_f(h['loss_last'])}{held}"
        )
    if stage == "bucket":
        per = ", ".join(f"bucket {b}: {v['planned']}/{v['size']}" for b, v in h["buckets"].items())
        return f"{h['planned_tasks']} tasks planned ({per})"
    if stage == "rollout":
        return (
            f"{h['trajectories']} episodes on {h['tasks']} tasks, visible pass rate "
            f"{_f(h['visible_pass_rate'])} (first turn {_f(h['first_turn_pass_rate'])}), "
            f"{_f(h['mean_steps'], 1)} steps/episode, {h['infra_errors']} infra errors"
        )
    if stage == "score":
        comps = ", ".join(f"{k} {_f(v)}" for k, v in h["components"].items())
        hidden = _f(h["hidden_pass_rate"], none=_NO_HIDDEN)
        return (
            f"mean reward {_f(h['mean_reward'])} ({h['reward_version']}), pass rate visible "
            f"{_f(h['visible_pass_rate'])} hidden {hidden}, replay "
            f"mismatches {_f(h['replay_mismatches'])}\n{'':12}component means: {comps or '-'}"
        )
    if stage == "critic":
        if h["holdout_status"] != "ok":
            return f"{h['n_examples']} examples, held-out: {h['holdout_status']} (no AUC)"
        return (
            f"{h['n_examples']} examples, held-out AUC {_f(h['holdout_auc'])}, "
            f"accuracy {_f(h['holdout_accuracy'])} over {h['n_holdout']} rows"
        )
    if stage == "train":
        line = (
            f"{h['steps']} steps, loss {_f(h['loss'], 4)}, KL {_f(h['kl'], 4)}, reward mean "
            f"{_f(h['reward_mean'])}, {h['n_used']} trajectories used, "
            f"preflight {h['preflight']}"
        )
        if h.get("replay_rows") is not None:
            line += (
                f"\n{'':12}replay: {h['replay_rows']} archived rows, share "
                f"{_f(h['replay_share'])}, ESS fraction {_f(h['replay_ess_fraction'])}, "
                f"clipped {_f(h['replay_clipped_share'])}"
            )
        if h.get("rft_mode") is not None:
            line += f"\n{'':12}RFT {h['rft_mode']} ({h['rft_source'] or 'current'}): "
            line += f"{h['rft_examples']} examples"
        return line
    sets = ", ".join(_set_pass(n, s) for n, s in h["sets"].items())
    infra = sum(int(s["infra_errors"] or 0) for s in h["sets"].values())
    return f"iteration {h['iteration']}: frozen pass@1 {sets or '-'}; {infra} infra errors"


def _archive_lines(a: dict[str, Any]) -> list[str]:
    per = "; ".join(
        f"{it}: " + ", ".join(f"{v} {n}" for v, n in sorted(vs.items()))
        for it, vs in a["rows"].items()
    )
    out = [
        f"  {'archive':<9} {a['total_rows']} rows in {len(a['rows'])} nights, "
        f"{a['bytes'] / 2**20:.2f} MiB (rows per iteration: {per or '-'})"
    ]
    last = a["last_night"]
    if last:
        its = ",".join(str(i) for i in last.get("iterations") or []) or "?"
        out.append(
            f"{'':12}night {its}: kept {last['kept_sft']} sft + {last['kept_sample']} sample, "
            f"archived {last['archived_rest']} rest, stripped {last['stripped']}, "
            f"dropped {last['dropped']}, infra {last['infra']} (never kept)"
        )
    return out


def render(report: dict[str, Any]) -> str:
    """The report as text: one line per stage, the archive, the gate, the change since
    promotion."""
    out = ["codeloop report"]
    for stage, h in report["stages"].items():
        out.append(f"  {stage:<9} {_lines(stage, h) if h else 'not run (no metrics file)'}")
    if report.get("archive"):
        out += _archive_lines(report["archive"])
    ev = report["stages"].get("evaluate")
    if ev and ev["promote"] is not None:
        out.append(f"  {'gate':<9} {'PROMOTE' if ev['promote'] else 'REFUSE'}")
        out += [f"            - {r}" for r in ev["reasons"] + ev["notes"]]
    since = report["since_promoted"]
    if since["baseline"] is None:
        out.append(f"since the last promoted iteration: {since['note']}")
        return "\n".join(out)
    b = since["baseline"]
    out.append(
        f"since the last promoted iteration ({b['tag']}, iteration {b['iteration']})"
        + (f"; {since['note']}" if since["note"] else "")
        + ":"
    )
    for c in since["changes"]:
        delta = "" if c["delta"] is None else f" ({c['delta']:+.3f})"
        out.append(f"  {c['what']:<34} {_f(c['before'])} -> {_f(c['now'])}{delta}")
    return "\n".join(out)
