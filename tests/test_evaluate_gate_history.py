"""Promotion gate decisions and the history file format."""

from __future__ import annotations

import pytest

from codeloop.evaluate.gate import GateRule, decide
from codeloop.evaluate.history import (
    ITERATION_FIELDS,
    HistoryError,
    append_iteration,
    last_promoted,
    make_row,
    next_iteration,
    read_iterations,
    read_pass_rates,
    update_pass_rates,
)

RULE = GateRule(tolerance=0.02)


def _eval(**p1):
    return {"sets": {k: {"pass@1": v, "infra_errors": 0} for k, v in p1.items()}}


def _row(it, **p1):
    return make_row(
        it, model_version="m", dataset_version="d", reward_fn_version="v1", eval_metrics=_eval(**p1)
    )


def test_first_candidate_is_promoted_without_a_baseline():
    d = decide(_eval(humaneval=0.1), None, RULE)
    assert d.promote and "no promoted iteration" in d.notes[0]


def test_a_drop_beyond_tolerance_is_refused_with_the_set_named():
    d = decide(_eval(humaneval=0.05, heldout=0.5), _row(3, humaneval=0.10, heldout=0.5), RULE)
    assert not d.promote
    assert any("humaneval" in r and "iter-0003" in r for r in d.reasons)


def test_a_drop_within_tolerance_is_promoted():
    assert decide(_eval(humaneval=0.09), _row(1, humaneval=0.10), RULE).promote


def test_a_hacking_alarm_refuses_promotion_even_when_pass_at_1_improves():
    d = decide(
        _eval(humaneval=0.5), _row(1, humaneval=0.1), RULE, alarms=["reward up, hidden down"]
    )
    assert not d.promote and "hacking alarm" in d.reasons[0]


def test_infra_errors_in_evaluation_refuse_promotion():
    ev = {"sets": {"humaneval": {"pass@1": 0.5, "infra_errors": 2}}}
    assert not decide(ev, None, RULE).promote


def test_a_frozen_set_missing_from_the_candidate_is_refused():
    assert not decide(_eval(heldout=0.9), _row(1, humaneval=0.1, heldout=0.5), RULE).promote


def test_history_round_trips_rows_with_per_set_pass_at_1(tmp_path):
    path = tmp_path / "iterations.csv"
    append_iteration(_row(1, humaneval=0.1, heldout=0.4), path)
    append_iteration(_row(2, humaneval=0.2, heldout=0.5), path)
    rows = read_iterations(path)
    assert [r["iteration"] for r in rows] == [1, 2]
    assert rows[1]["pass_at_1"] == {"heldout": 0.5, "humaneval": 0.2}
    assert rows[1]["pass_at_1_mean"] == pytest.approx(0.35)
    assert last_promoted(path)["tag"] == "iter-0002"
    assert next_iteration(path) == 3


def test_empty_or_missing_history_means_nothing_promoted(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    assert read_iterations(tmp_path / "empty.csv") == []
    assert next_iteration(tmp_path / "absent.csv") == 1


def test_history_refuses_a_non_increasing_iteration(tmp_path):
    path = tmp_path / "iterations.csv"
    append_iteration(_row(2, humaneval=0.1), path)
    with pytest.raises(HistoryError, match="not after"):
        append_iteration(_row(2, humaneval=0.1), path)


def test_a_corrupt_history_row_names_row_and_field(tmp_path):
    path = tmp_path / "iterations.csv"
    path.write_text("iteration,pass_at_1,pass_at_1_mean\n1,{},0.5\nx,{},0.1\n")
    with pytest.raises(HistoryError, match="row 3: field 'iteration'"):
        read_iterations(path)


def test_pass_rates_merge_newest_wins(tmp_path):
    path = tmp_path / "pass_rates.json"
    update_pass_rates({"a": 0.5, "b": 1.0}, path)
    update_pass_rates({"a": 0.25}, path)
    assert read_pass_rates(path) == {"a": 0.25, "b": 1.0}


def test_a_pass_rate_outside_0_1_is_rejected_naming_the_task(tmp_path):
    path = tmp_path / "pass_rates.json"
    path.write_text('{"t7": 1.5}')
    with pytest.raises(HistoryError, match="t7"):
        read_pass_rates(path)


def test_history_rows_read_back_feed_the_plot_of_the_next_iteration(tmp_path):
    from codeloop.evaluate.history import plot_rows

    path = tmp_path / "iterations.csv"
    score = {"components": {"pass_rate": {"mean": 0.5}}}
    row = make_row(
        1,
        model_version="m",
        dataset_version="d",
        reward_fn_version="v1",
        eval_metrics=_eval(heldout=0.4),
        score_metrics=score,
    )
    append_iteration(row, path)
    (back,) = read_iterations(path)
    first, second = plot_rows([back, _row(2, heldout=0.5)])
    assert first["pass@1/heldout"] == 0.4 and first["reward/pass_rate"] == 0.5
    assert second["iteration"] == 2 and second["pass@1/heldout"] == 0.5


def test_the_committed_history_is_a_header_with_nothing_promoted(repo_root, tmp_path):
    # a header, not an empty file: DVC warns about an empty dependency on every repro; the
    # header is the writer's own fields, else appended rows would sit under stale columns
    committed = repo_root / "history/iterations.csv"
    assert committed.read_text().splitlines() == [",".join(ITERATION_FIELDS)]
    assert read_iterations(committed) == [] and next_iteration(committed) == 1
    copy = tmp_path / "iterations.csv"
    copy.write_text(committed.read_text())
    append_iteration(_row(1, heldout=0.5), copy)
    assert [r["iteration"] for r in read_iterations(copy)] == [1]
