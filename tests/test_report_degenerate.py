"""`codeloop report` prints no figure computed on a degenerate split: the critic's held-out
AUC only under holdout_status "ok", no pass@1 for a frozen set where no task was evaluated,
no hidden pass rate when no row ran hidden tests, in the stage lines and in the change
since the last promoted iteration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codeloop.data.generator import generate_tasks
from codeloop.evaluate.history import ITERATIONS_CSV, append_iteration, make_row
from codeloop.ops.report import build_report, render
from codeloop.rewards import HIDDEN_KEY
from codeloop.rewards.critic import fit_with_holdout, mutants


def _write(root: Path, name: str, data: dict) -> None:
    (root / "metrics").mkdir(exist_ok=True)
    (root / "metrics" / name).write_text(json.dumps(data))


def _line(root: Path, stage: str) -> str:
    text = render(build_report(root))
    return next(ln for ln in text.splitlines() if ln.strip().startswith(stage))


def _critic_metrics(one_class: bool) -> dict:
    tasks = generate_tasks(60, seed=11)
    rows = []
    for t in tasks:
        rows.append((t, t.reference_solution, 1.0))
        rows += [(t, m, float(one_class)) for m in mutants(t.reference_solution)]
    return fit_with_holdout(rows, holdout_fraction=0.2, seed=0, epochs=20)[1]


def test_a_one_class_critic_split_is_reported_as_degenerate_without_an_auc(tmp_path):
    _write(tmp_path, "critic.json", _critic_metrics(one_class=True))
    line = _line(tmp_path, "critic")
    assert "degenerate: 0 failing rows" in line
    assert "AUC" in line and "(no AUC)" in line and "accuracy" not in line


def test_a_critic_split_with_both_classes_is_reported_with_its_auc(tmp_path):
    metrics = _critic_metrics(one_class=False)
    _write(tmp_path, "critic.json", metrics)
    assert f"held-out AUC {metrics['holdout_auc']:.3f}" in _line(tmp_path, "critic")


def test_critic_metrics_without_a_holdout_status_are_not_printed_as_figures(tmp_path):
    old = {"n_examples": 412, "n_holdout": 67, "holdout_auc": 0.052, "holdout_accuracy": 0.970}
    _write(tmp_path, "critic.json", old)
    line = _line(tmp_path, "critic")
    assert "0.052" not in line and "0.970" not in line
    assert "unchecked" in line


def test_a_frozen_set_where_no_task_was_evaluated_has_no_pass_at_1(tmp_path):
    sets = {
        "heldout": {"pass@1": 0.5, "n_tasks": 20, "infra_errors": 0},
        "heldout_repo": {"pass@1": 0.0, "n_tasks": 0, "infra_errors": 20},
    }
    _write(tmp_path, "eval.json", {"iteration": 1, "model_version": "m", "sets": sets})
    line = _line(tmp_path, "evaluate")
    assert "heldout 0.500 (20 tasks)" in line
    assert "heldout_repo none (no task evaluated)" in line and "0.000" not in line


def _score_metrics(hidden_rows: int) -> dict:
    comps = {"pass_rate": {"count": 8, "mean": 0.5}}
    if hidden_rows:
        comps[HIDDEN_KEY] = {"count": hidden_rows, "mean": 0.25}
    rate = 0.25 if hidden_rows else 0.0  # score writes 0.0 when no row ran hidden tests
    return {"reward_version": "v1", "mean_reward": 0.5, "n_scored": 8,
            "visible_pass_rate": 0.5, "hidden_pass_rate": rate, "components": comps}


def test_a_hidden_pass_rate_over_no_row_is_reported_as_none(tmp_path):
    _write(tmp_path, "score.json", _score_metrics(hidden_rows=0))
    line = _line(tmp_path, "score")
    assert "visible 0.500 hidden none (no row ran hidden tests)" in line


def test_a_hidden_pass_rate_over_scored_rows_is_reported(tmp_path):
    _write(tmp_path, "score.json", _score_metrics(hidden_rows=8))
    assert "visible 0.500 hidden 0.250" in _line(tmp_path, "score")


def _promoted_before(root: Path) -> None:
    """One promoted iteration in history/ with both sets evaluated and hidden tests run."""
    sets = {"heldout": {"pass@1": 0.4, "n_tasks": 20}, "heldout_repo": {"pass@1": 0.1, "n_tasks": 20}}
    row = make_row(1, model_version="m1", dataset_version="d", reward_fn_version="v1",
                   eval_metrics={"sets": sets}, score_metrics=_score_metrics(hidden_rows=8))
    append_iteration(row, root / ITERATIONS_CSV)


def _changes(root: Path) -> dict[str, tuple]:
    changes = build_report(root)["since_promoted"]["changes"]
    return {c["what"]: (c["now"], c["delta"]) for c in changes}


def test_the_change_since_promotion_has_no_pass_at_1_for_a_set_where_no_task_was_evaluated(
    tmp_path,
):
    _promoted_before(tmp_path)
    sets = {
        "heldout": {"pass@1": 0.5, "n_tasks": 20, "infra_errors": 0},
        "heldout_repo": {"pass@1": 0.0, "n_tasks": 0, "infra_errors": 20},
    }
    _write(tmp_path, "eval.json", {"iteration": 2, "model_version": "m2", "sets": sets})
    changes = _changes(tmp_path)
    assert changes["pass@1 heldout"] == (0.5, pytest.approx(0.1))
    assert changes["pass@1 heldout_repo"] == (None, None)
    assert changes["frozen pass@1 (mean over sets)"] == (None, None)


def test_the_change_since_promotion_has_no_hidden_rate_when_no_row_ran_hidden_tests(tmp_path):
    _promoted_before(tmp_path)
    sets = {"heldout": {"pass@1": 0.5, "n_tasks": 20, "infra_errors": 0}}
    _write(tmp_path, "eval.json", {"iteration": 2, "model_version": "m2", "sets": sets})
    _write(tmp_path, "score.json", _score_metrics(hidden_rows=0))
    changes = _changes(tmp_path)
    assert changes["train hidden pass rate"] == (None, None)
    assert changes["train visible pass rate"] == (0.5, 0.0)
