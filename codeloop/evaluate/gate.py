"""The promotion gate: may tonight's candidate replace the promoted policy?

Promote only if, on every frozen set the promoted policy was measured on, the
candidate's pass@1 does not drop by more than ``evaluate.gate_tolerance`` (absolute),
evaluation had no infrastructure errors, and no reward-hacking alarm is raised. The
decision carries every reason, passing ones included, so the morning reader sees why.
Acting on a passing decision is codeloop.ops.promote's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GateDecision:
    promote: bool
    reasons: list[str] = field(default_factory=list)  # why refused (empty when promoted)
    notes: list[str] = field(default_factory=list)  # checks that passed, context
    candidate_pass_at_1: dict[str, float] = field(default_factory=dict)
    baseline_pass_at_1: dict[str, float] = field(default_factory=dict)
    baseline_tag: str = ""
    alarms: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        verdict = "PROMOTE" if self.promote else "REFUSE"
        lines = [f"gate: {verdict}"] + [f"  - {r}" for r in self.reasons + self.notes]
        return "\n".join(lines)


def decide(
    eval_metrics: dict[str, Any],
    baseline: dict[str, Any] | None,
    tolerance: float,
    alarms: list[str] | None = None,
) -> GateDecision:
    """Gate decision from metrics/eval.json contents and the last promoted history row."""
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
    for name, b in sorted(d.baseline_pass_at_1.items()):
        if name not in cand:
            d.reasons.append(f"frozen set {name!r} measured for {d.baseline_tag} is missing now")
            continue
        drop = b - cand[name]
        msg = f"{name}: pass@1 {cand[name]:.4f} vs {b:.4f} at {d.baseline_tag} (drop {drop:+.4f}"
        if drop > tolerance + 1e-12:
            d.reasons.append(f"{msg} > tolerance {tolerance})")
        else:
            d.notes.append(f"{msg} within tolerance {tolerance})")
    for name in sorted(set(cand) - set(d.baseline_pass_at_1)):
        if baseline is not None:
            d.notes.append(f"{name}: new frozen set, pass@1 {cand[name]:.4f}, no baseline")
    for alarm in d.alarms:
        d.reasons.append(f"hacking alarm: {alarm}")
    d.promote = not d.reasons
    return d


def hacking_alarms(history_rows: list[dict[str, Any]], current: dict[str, Any]) -> list[str]:
    """Alarms from the rewards engineer's pure detector over history rows.

    Rows use codeloop.evaluate.history's field names (train_reward_mean, visible_pass_rate,
    hidden_pass_rate, hidden_visible_gap).
    """
    from codeloop.rewards.alarm import check_alarms

    found = check_alarms(history_rows, current)
    return [str(a) for a in found]
