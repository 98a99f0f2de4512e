"""bench/false_pass.py: its rate helpers count false passes as the module doc defines them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.false_pass import Verdict, false_pass, view_rates  # noqa: E402


def test_false_pass_counts_only_paid_samples():
    # four samples: paid and clean, paid and failing original hidden, paid and failing
    # only augmented hidden, not paid (its hidden failures do not count)
    r = false_pass(
        [True, True, True, False], [True, False, True, False], [True, True, False, False]
    )
    assert r["passing_visible"] == 3
    assert (r["n_false_pass_before"], r["n_false_pass_after"]) == (1, 2)
    assert (r["false_pass_before"], r["false_pass_after"]) == (0.3333, 0.6667)
    assert false_pass([False], [True], [True])["false_pass_before"] is None


def test_views_drop_samples_an_augmented_visible_test_fails():
    vs = [
        Verdict(visible_orig=True, visible_aug=False, hidden_orig=True, hidden_aug=False),
        Verdict(visible_orig=True, visible_aug=True, hidden_orig=True, hidden_aug=True),
        Verdict(visible_orig=True, visible_aug=True, hidden_orig=False, hidden_aug=True),
    ]
    rates = view_rates(vs, control=True)
    assert rates["original"]["passing_visible"] == 3
    assert rates["original"]["n_false_pass_after"] == 2
    assert rates["original+augmented"]["passing_visible"] == 2
    assert rates["original+augmented"]["n_false_pass_after"] == 1
    # all_original: paid = passes every original test; after = killed by any augmented test
    assert rates["all_original"]["passing_visible"] == 2
    assert rates["all_original"]["n_false_pass_after"] == 1
    assert "all_original" not in view_rates(vs, control=False)
