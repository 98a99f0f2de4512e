"""The promotion gate: may tonight's candidate replace the promoted policy?

On every frozen set the promoted policy was measured on, the candidate is compared task
by task with the promoted policy's cached per-task results (same tasks, same seeds:
codeloop.evaluate.paired). A set refuses promotion when the candidate's drop is both
significant (one-sided, at ``evaluate.gate_alpha``) and larger than
``evaluate.gate_tolerance``; a set whose minimum detectable drop exceeds the tolerance is
called inconclusive (it could miss such a drop) but does not refuse on that alone. Without
usable per-task results for the promoted policy (none cached, or evaluated under other
settings) the set falls back to the plain pass@1 difference against the tolerance, and the
decision says so. Evaluation infrastructure errors and reward-hacking alarms refuse too.

The decision carries every reason, passing ones included, each with Δ ± SE, so the
morning reader sees why. Acting on a passing decision is codeloop.ops.promote's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from codeloop.evaluate.paired import PairedResult, compare


@dataclass
class GateDecision:
    promote: bool
    reasons: list[str] = field(default_factory=list)  # why refused (empty when promoted)
    notes: list[str] = field(default_factory=list)  # checks that passed, context
    candidate_pass_at_1: dict[str, float] = field(default_factory=dict)
    baseline_pass_at_1: dict[str, float] = field(default_factory=dict)
    baseline_tag: str = ""
    alarms: list[str] = field(default_factory=list)
    # per set: PairedResult's fields plus "verdict" (worse / no significant drop /
    # inconclusive / unpaired)
    paired: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        verdict = "PROMOTE" if self.promote else "REFUSE"
        lines = [f"gate: {verdict}"] + [f"  - {r}" for r in self.reasons + self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class GateRule:
    """The thresholds one decision applies (the evaluate section's gate fields)."""

    tolerance: float
    alpha: float = 0.05


@dataclass(frozen=True)
class TaskResults:
    """Per-task results of both policies: {set: {task_id: [passed, samples]}}; ``why``
    says why the promoted policy's are missing when ``promoted`` is None."""

    candidate: dict[str, dict[str, Any]]
    promoted: dict[str, dict[str, Any]] | None
    why: str = ""


def decide(
    eval_metrics: dict[str, Any],
    baseline: dict[str, Any] | None,
    rule: GateRule,
    alarms: list[str] | None = None,
    tasks: TaskResults | None = None,
) -> GateDecision:
    """Gate decision from metrics/eval.json contents, the last promoted history row and
    (for the paired test) both policies' per-task results."""
    sets = eval_metrics.get("sets") or {}
    cand = {name: float(m.get("pass@1", 0.0)) for name, m in sorted(sets.items())}
    base = dict((baseline or {}).get("pass_at_1") or {})
    d = GateDecision(
        promote=True,
        candidate_pass_at_1=cand,
        baseline_pass_at_1={k: float(v) for k, v in base.items()},
        baseline_tag=str((baseline or {}).get("tag", "")),
        alarms=list(alarms or []),
    )
    if not sets:
        d.reasons.append("evaluation produced no frozen-set metrics")
    infra = sum(int(m.get("infra_errors", 0)) for m in sets.values())
    if infra:
        d.reasons.append(
            f"{infra} evaluation episodes hit infrastructure errors; metrics untrusted"
        )
    if baseline is None:
        d.notes.append("no promoted iteration yet: first candidate is promoted on its own metrics")
    for name in sorted(d.baseline_pass_at_1):
        if name not in cand:
            d.reasons.append(f"frozen set {name!r} measured for {d.baseline_tag} is missing now")
            continue
        _judge_set(d, name, rule, tasks)
    for name in sorted(set(cand) - set(d.baseline_pass_at_1)):
        if baseline is not None:
            d.notes.append(f"{name}: new frozen set, pass@1 {cand[name]:.4f}, no baseline")
    for alarm in d.alarms:
        d.reasons.append(f"hacking alarm: {alarm}")
    d.promote = not d.reasons
    return d


def _judge_set(d: GateDecision, name: str, rule: GateRule, tasks: TaskResults | None) -> None:
    """One set's verdict into d: paired when both policies' per-task results exist."""
    result, why = _paired(name, rule, tasks)
    if result is None:
        _judge_unpaired(d, name, rule, why)
        return
    drop = -result.delta
    worse = result.p_value < rule.alpha and drop > rule.tolerance + 1e-12
    verdict = (
        "worse" if worse
        else "inconclusive" if result.mdd > rule.tolerance + 1e-12
        else "no significant drop"
    )
    d.paired[name] = {**result.to_dict(), "verdict": verdict}
    msg = (
        f"{name}: Δ pass@1 {result.delta:+.4f} ± {result.se:.4f} vs {d.baseline_tag} "
        f"(paired over {result.n_tasks} tasks × {result.samples} samples; one-sided "
        f"p {result.p_value:.3g}, {result.method}; minimum detectable drop {result.mdd:.3f})"
    )
    if worse:
        d.reasons.append(
            f"{msg}: worse — the drop is significant at α {rule.alpha} "
            f"and larger than the tolerance {rule.tolerance}"
        )
    elif verdict == "inconclusive":
        d.notes.append(
            f"{msg}: inconclusive — this set cannot detect a drop of {rule.tolerance}; "
            "no significant drop seen"
        )
    else:
        d.notes.append(f"{msg}: no significant drop larger than {rule.tolerance}")


def _paired(
    name: str, rule: GateRule, tasks: TaskResults | None
) -> tuple[PairedResult | None, str]:
    if tasks is None:
        return None, "no per-task results were given"
    if tasks.promoted is None:
        return None, tasks.why or "no per-task results of the promoted policy"
    if name not in tasks.promoted or name not in tasks.candidate:
        return None, "the set has no per-task results on both sides"
    result = compare(tasks.promoted[name], tasks.candidate[name], rule.alpha)
    return (result, "") if result is not None else (None, "the two share no task")


def _judge_unpaired(d: GateDecision, name: str, rule: GateRule, why: str) -> None:
    """The fallback: the plain pass@1 difference against the tolerance, said as such."""
    b, c = d.baseline_pass_at_1[name], d.candidate_pass_at_1[name]
    drop = b - c
    d.paired[name] = {"verdict": "unpaired", "why": why, "delta": c - b}
    msg = (
        f"{name}: pass@1 {c:.4f} vs {b:.4f} at {d.baseline_tag} (drop {drop:+.4f}; "
        f"unpaired: {why}"
    )
    if drop > rule.tolerance + 1e-12:
        d.reasons.append(f"{msg}) > tolerance {rule.tolerance}")
    else:
        d.notes.append(f"{msg}) within tolerance {rule.tolerance}")


def hacking_alarms(history_rows: list[dict[str, Any]], current: dict[str, Any]) -> list[str]:
    """Alarms from the rewards engineer's pure detector over history rows.

    Rows use codeloop.evaluate.history's field names (train_reward_mean, visible_pass_rate,
    hidden_pass_rate, hidden_visible_gap).
    """
    from codeloop.rewards.alarm import check_alarms

    found = check_alarms(history_rows, current)
    return [str(a) for a in found]
