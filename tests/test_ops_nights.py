"""The nights log: every night kept with its outcome, paired Δ ± SE, KL and minutes."""

from __future__ import annotations

from codeloop.ops.nights import NIGHTS_LOG, append_night, night_row, nights_table, read_nights

DECISION = {
    "candidate_pass_at_1": {"heldout": 0.41},
    "reasons": ["heldout: Δ pass@1 -0.0944 ± 0.0295 … worse"],
    "paired": {
        "heldout": {"delta": -0.0944, "se": 0.0296, "p_value": 0.001, "mdd": 0.07,
                    "verdict": "worse", "n_tasks": 90},
        "humaneval": {"delta": 0.0, "verdict": "unpaired", "why": "nothing kept"},
    },
}


def test_a_refused_night_is_logged_with_its_reasons_and_kl(tmp_path):
    append_night(tmp_path, night_row(4, "refused", 12.345, DECISION, {"kl": 0.0031}))
    [row] = read_nights(tmp_path)
    assert row["night"] == 4 and row["outcome"] == "refused" and row["minutes"] == 12.35
    assert row["kl"] == 0.0031 and "worse" in row["reasons"][0]
    assert row["paired"]["heldout"]["se"] == 0.0296


def test_the_table_shows_paired_delta_with_its_standard_error_per_set(tmp_path):
    append_night(tmp_path, night_row(4, "refused", 1.0, DECISION, {"kl": 0.0031}))
    [row] = nights_table(read_nights(tmp_path))
    assert row["heldout Δ"] == "-0.094 ± 0.030 (worse)"
    assert row["humaneval Δ"] == "+0.000 (unpaired)"


def test_the_table_shows_only_the_last_week(tmp_path):
    for night in range(1, 10):
        append_night(tmp_path, night_row(night, "promoted", 1.0, tag=f"iter-{night:04d}"))
    assert [r["night"] for r in nights_table(read_nights(tmp_path))] == list(range(3, 10))


def test_a_torn_last_line_from_a_killed_run_is_skipped(tmp_path):
    append_night(tmp_path, night_row(1, "promoted", 1.0))
    with open(tmp_path / NIGHTS_LOG, "a") as f:
        f.write('{"night": 2, "outc')
    assert [r["night"] for r in read_nights(tmp_path)] == [1]


def test_a_failed_night_keeps_its_error(tmp_path):
    append_night(tmp_path, night_row(3, "failed", 0.5, error="StageError: rollout died"))
    assert read_nights(tmp_path)[0]["reasons"] == ["StageError: rollout died"]


def test_every_row_of_the_table_has_every_sets_column(tmp_path):
    append_night(tmp_path, night_row(1, "promoted", 1.0, tag="iter-0001"))
    append_night(tmp_path, night_row(2, "refused", 1.0, DECISION))
    first, second = nights_table(read_nights(tmp_path))
    assert list(first) == list(second)
    assert first["heldout Δ"] == "-" and second["heldout Δ"].endswith("(worse)")
