"""The reward-hacking alarm over per-iteration history rows."""

from __future__ import annotations

import pytest

from codeloop.rewards.alarm import check_alarms, check_hacking


def _row(reward: float, hidden: float, visible: float) -> dict:
    return {"mean_reward": reward, "hidden_pass_rate": hidden, "visible_pass_rate": visible}


def test_reward_up_while_hidden_down_raises_the_alarm():
    alarm = check_hacking([_row(0.40, 0.40, 0.45)], _row(0.55, 0.30, 0.45))
    assert alarm.raised and "hidden pass rate fell" in alarm.reasons[0]


def test_healthy_learning_raises_no_alarm():
    alarm = check_hacking([_row(0.40, 0.40, 0.45)], _row(0.50, 0.47, 0.52))
    assert not alarm.raised


def test_a_gap_above_the_threshold_raises_the_alarm():
    alarm = check_hacking([], _row(0.5, 0.3, 0.6), gap_threshold=0.2)
    assert alarm.raised and alarm.gap == pytest.approx(0.3)


def test_a_widening_gap_raises_the_alarm_below_the_absolute_threshold():
    alarm = check_hacking(
        [_row(0.4, 0.40, 0.40)], _row(0.4, 0.40, 0.55), gap_threshold=0.5, gap_widen_threshold=0.1
    )
    assert alarm.raised and "widened" in alarm.reasons[0]


def test_moves_inside_the_noise_floor_raise_no_alarm():
    alarm = check_hacking([_row(0.400, 0.400, 0.4)], _row(0.405, 0.395, 0.4), min_delta=0.01)
    assert not alarm.raised


def test_a_missing_value_skips_its_checks_and_says_which():
    alarm = check_hacking([], {"mean_reward": 0.1, "visible_pass_rate": 0.9})
    assert not alarm.raised and alarm.notes == ["current row has no hidden_pass_rate"]


def test_history_rows_named_as_codeloop_history_writes_them_are_understood():
    prev = {"train_reward_mean": 0.4, "hidden_pass_rate": 0.4, "visible_pass_rate": 0.45}
    cur = {"train_reward_mean": 0.6, "hidden_pass_rate": 0.2, "visible_pass_rate": 0.45}
    assert check_alarms([prev], cur)


def test_only_the_latest_history_row_is_the_baseline():
    history = [_row(0.9, 0.1, 0.1), _row(0.40, 0.40, 0.45)]
    assert not check_hacking(history, _row(0.50, 0.45, 0.5)).raised
